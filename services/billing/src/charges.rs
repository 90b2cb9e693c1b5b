//! What the ledger has charged a renter per instance so far: the sum of the
//! renter's legs of every usage posting of the instance, per meter, with the
//! quantities the postings record (GPU seconds, disk seconds and GiB-seconds,
//! bandwidth bytes). The gateway shows them as `Instance.costSoFar`,
//! `billedSeconds` and `charges`, so a client never recomputes a bill from
//! intervals and prices. Read in batches of instance ids, always within one
//! tenant: an id of another tenant's instance simply has no postings here.

use contracts::api::{InstanceCharges, InstanceChargesRequest, MAX_CHARGED_INSTANCES};
use contracts::ids::InstanceId;
use contracts::meters::{BANDWIDTH_DOWN, BANDWIDTH_UP, GPU, STORAGE};
use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Numeric, Text, Uuid as SqlUuid};
use platform::Db;
use rust_decimal::Decimal;

use crate::{Error, Settings};

#[derive(QueryableByName)]
struct Row {
    #[diesel(sql_type = SqlUuid)]
    instance_id: InstanceId,
    #[diesel(sql_type = Text)]
    meter: String,
    #[diesel(sql_type = BigInt)]
    seconds: i64,
    #[diesel(sql_type = BigInt)]
    quantity: i64,
    #[diesel(sql_type = Numeric)]
    amount: Decimal,
}

pub async fn instance_charges(
    db: &Db,
    settings: &Settings,
    req: InstanceChargesRequest,
) -> Result<Vec<InstanceCharges>, Error> {
    if req.instance_ids.len() > MAX_CHARGED_INSTANCES {
        return Err(Error::Validation(format!(
            "instanceIds: at most {MAX_CHARGED_INSTANCES} at once"
        )));
    }
    let mut ids = req.instance_ids.clone();
    ids.sort_unstable();
    ids.dedup();
    let currency = settings.currency.clone();
    let tenant_id = req.tenant_id;
    let rows: Vec<Row> = {
        let ids = ids.clone();
        let currency = currency.clone();
        db.run(move |conn| {
            // One row per (instance, meter): the renter's legs (negative
            // amounts) of the tenant's usage postings of these instances.
            diesel::sql_query(
                "SELECT t.instance_id, d.meter, \
                        coalesce(sum(d.seconds), 0)::bigint AS seconds, \
                        coalesce(sum(coalesce(d.quantity, d.seconds)), 0)::bigint AS quantity, \
                        coalesce(-sum(e.amount), 0) AS amount \
                 FROM billing.transactions t \
                 JOIN billing.usage_details d ON d.transaction_id = t.id \
                 JOIN billing.entries e ON e.transaction_id = t.id \
                 JOIN billing.accounts a ON a.id = e.account_id \
                 WHERE t.kind = 'usage' AND t.tenant_id = $1 AND t.instance_id = ANY($2) \
                   AND a.kind = 'renter_balance' AND a.tenant_id = $1 AND a.currency = $3 \
                 GROUP BY t.instance_id, d.meter",
            )
            .bind::<SqlUuid, _>(tenant_id)
            .bind::<Array<SqlUuid>, _>(ids)
            .bind::<Text, _>(currency)
            .load(conn)
            .map_err(Error::from)
        })
        .await?
    };
    Ok(ids
        .into_iter()
        .map(|id| {
            let mut c = InstanceCharges {
                instance_id: id,
                currency: currency.clone(),
                ..Default::default()
            };
            for row in rows.iter().filter(|r| r.instance_id == id) {
                c.total += row.amount;
                match row.meter.as_str() {
                    GPU => {
                        c.gpu_seconds += row.seconds;
                        c.gpu_amount += row.amount;
                    }
                    STORAGE => {
                        c.storage_seconds += row.seconds;
                        c.storage_gib_seconds += row.quantity;
                        c.storage_amount += row.amount;
                    }
                    BANDWIDTH_UP => {
                        c.bandwidth_up_bytes += row.quantity;
                        c.bandwidth_up_amount += row.amount;
                    }
                    BANDWIDTH_DOWN => {
                        c.bandwidth_down_bytes += row.quantity;
                        c.bandwidth_down_amount += row.amount;
                    }
                    // A meter this reader does not know yet still counts in
                    // the total.
                    _ => {}
                }
            }
            c
        })
        .collect())
}
