//! Renters out of money. Billing posts every settlement of a running rental
//! and, when a charge takes a prepaid balance below zero, announces it
//! (`billing.balance.exhausted`, from the posting's transaction). Here every
//! running instance of that tenant is stopped, exactly as the renter's own
//! stop would (billing ends at the stop, the disk stays; the renter tops up
//! and starts again). A renter whose usage this month reached its monthly
//! budget (`billing.balance.cap_reached`, announced the same way) is stopped
//! the same way. Idempotent: a stopped instance stays stopped, and a
//! redelivered event finds nothing left running.
//!
//! **The runway check at order time** ([`admit`]). Billing's funds check
//! sees only the balance; what already runs is ordering's knowledge. So an
//! order is admitted only if the balance covers the minimum runway of the
//! tenant's whole GPU burn after it: every instance holding GPUs
//! (provisioning, running, stopping, and host lost: it runs again when its
//! host is back) plus every order already admitted but
//! not yet an instance (`allocating`), plus the new one. The sum and the
//! admission (the order's move to `allocating`) happen in one transaction
//! under a per-tenant advisory lock, so concurrent orders of one tenant are
//! checked one after the other and each sees the others' burn: eight
//! concurrent orders on a balance that covers two admit two.

use contracts::events::{BalanceExhausted, SPEND_CAP_REACHED, SpendCapReached};
use contracts::ids::{OrderId, TenantId};
use contracts::{Envelope, ErrorCode};
use diesel::prelude::*;
use diesel::sql_types::Text;
use platform::Db;
use platform::consumer::HandlerError;
use platform::internal::RemoteError;
use rust_decimal::Decimal;
use schema::ordering::{instances, orders};
use uuid::Uuid;

use crate::{Deps, Error};
use contracts::states::InstanceState;

const REASON: &str = "stopped: prepaid balance exhausted";
const CAP_REASON: &str = "stopped: monthly spend cap reached";

pub(crate) async fn handle(db: &Db, deps: &Deps, envelope: Envelope) -> Result<(), HandlerError> {
    let undecodable = |e: serde_json::Error| {
        HandlerError::Permanent(format!("undecodable {} event: {e}", envelope.kind))
    };
    let (tenant_id, reason, detail) = if envelope.kind == SPEND_CAP_REACHED {
        let event: SpendCapReached = envelope.payload().map_err(undecodable)?;
        (
            event.tenant_id,
            CAP_REASON,
            format!("spent {} of {}", event.spent, event.monthly_cap),
        )
    } else {
        let event: BalanceExhausted = envelope.payload().map_err(undecodable)?;
        (
            event.tenant_id,
            REASON,
            format!("balance {}", event.balance),
        )
    };
    let running: Vec<Uuid> = db
        .run(move |conn| {
            instances::table
                .filter(instances::tenant_id.eq(tenant_id))
                .filter(instances::state.eq(InstanceState::Running))
                .select(instances::id)
                .load(conn)
                .map_err(Error::from)
        })
        .await
        .map_err(|e| HandlerError::Transient(e.to_string()))?;
    for id in running {
        match crate::instances::stop_because(db, deps, id, tenant_id, reason).await {
            Ok(_) => {
                tracing::warn!(instance.id = %id, tenant.id = %tenant_id, %detail, "instance {reason}")
            }
            // Stopped or destroyed meanwhile by someone else: nothing to do.
            Err(Error::Conflict(_)) => {}
            Err(e) => return Err(HandlerError::Transient(e.to_string())),
        }
    }
    Ok(())
}

static REFUSED: std::sync::LazyLock<prometheus::IntCounterVec> = std::sync::LazyLock::new(|| {
    platform::metrics::register_counter(
        "gpumarket_ordering_orders_refused_funds_total",
        "Orders refused at admission for want of funds, by check (runway: the \
         balance does not cover the runway of what already runs plus the order)",
        &["check"],
    )
});

/// States whose instances hold GPUs and so burn (or are about to burn) at
/// their GPU rate. `host_lost` is not billed while the host is away, but its
/// GPUs and quota stay held and it runs (and is billed) again the moment
/// the host is back, without asking the runway: left out, a renter whose
/// host went dark could order a replacement on a balance that covers one of
/// them and burn two when the host returns.
const BURNING: [InstanceState; 4] = [
    InstanceState::Provisioning,
    InstanceState::Running,
    InstanceState::Stopping,
    InstanceState::HostLost,
];

/// Serialises the runway checks of one tenant until the transaction ends.
pub(crate) fn lock_tenant(conn: &mut PgConnection, tenant_id: TenantId) -> QueryResult<()> {
    diesel::sql_query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
        .bind::<Text, _>(format!("gpumarket:runway:{tenant_id}"))
        .execute(conn)
        .map(|_| ())
}

/// The tenant's committed GPU burn per hour: instances holding GPUs and
/// admitted orders without an instance yet. `except_order` is left out (the
/// order being checked, when a resumed request finds it admitted already);
/// `except_instance` likewise (an instance being started again).
///
/// One statement, so one snapshot: an order becomes its instance in one
/// transaction (the order leaves `allocating` as its instance appears in
/// `provisioning`) that does not take the runway lock. Read as two
/// statements under READ COMMITTED, a commit falling between them hid that
/// burn from both (the instance read before it, the order after it), and a
/// burst of one tenant's orders admitted one more than its balance covered.
pub(crate) fn committed_burn(
    conn: &mut PgConnection,
    tenant_id: TenantId,
    except_order: Option<Uuid>,
    except_instance: Option<Uuid>,
) -> QueryResult<Decimal> {
    #[derive(QueryableByName)]
    struct Burn {
        #[diesel(sql_type = diesel::sql_types::Numeric)]
        burn: Decimal,
    }
    let burning: Vec<&str> = BURNING.iter().map(|s| s.as_str()).collect();
    diesel::sql_query(
        "SELECT coalesce(sum(price * gpus), 0) AS burn FROM ( \
             SELECT price_per_gpu_hour AS price, gpu_count AS gpus FROM ordering.instances \
             WHERE tenant_id = $1 AND state = ANY($2) AND id IS DISTINCT FROM $3 \
             UNION ALL \
             SELECT coalesce(price_per_gpu_hour, 0), gpu_count FROM ordering.orders \
             WHERE tenant_id = $1 AND state = $4 AND id IS DISTINCT FROM $5) committed",
    )
    .bind::<diesel::sql_types::Uuid, _>(tenant_id)
    .bind::<diesel::sql_types::Array<Text>, _>(burning)
    .bind::<diesel::sql_types::Nullable<diesel::sql_types::Uuid>, _>(except_instance)
    .bind::<Text, _>(InstanceState::Allocating)
    .bind::<diesel::sql_types::Nullable<diesel::sql_types::Uuid>, _>(except_order)
    .get_result::<Burn>(conn)
    .map(|b| b.burn)
}

/// What the runway check decides, for one new burn.
pub(crate) struct Runway {
    pub balance: Decimal,
    pub currency: String,
    pub runway_seconds: i64,
}

impl Runway {
    /// `Err(INSUFFICIENT_FUNDS)` when the balance does not cover the runway of
    /// `committed` (what already burns) plus `new` (this order's rate).
    pub(crate) fn check(&self, committed: Decimal, new: Decimal) -> Result<(), Error> {
        let required = contracts::money::rate(self.runway_seconds, committed + new);
        if self.balance >= required {
            return Ok(());
        }
        let minor = |d: Decimal| contracts::money::round_to_minor(d, &self.currency);
        let c = &self.currency;
        let minutes = self.runway_seconds / 60;
        let message = if committed.is_zero() {
            format!(
                "balance {} {c} is below the {} {c} needed to start this order \
                 ({minutes} minutes at {} {c} per hour)",
                minor(self.balance),
                minor(required),
                new.normalize(),
            )
        } else {
            format!(
                "balance {} {c} is below the {} {c} needed to keep what already runs \
                 ({} {c} per hour) and this order ({} {c} per hour) going for {minutes} minutes; \
                 top up, or stop an instance first",
                minor(self.balance),
                minor(required),
                committed.normalize(),
                new.normalize(),
            )
        };
        Err(Error::Remote(RemoteError {
            code: ErrorCode::InsufficientFunds,
            message,
            details: None,
        }))
    }
}

/// Admits an order under the tenant's runway lock: checks the balance
/// against the runway of everything committed plus `hourly`, and moves the
/// order from `pending` to `allocating` (which makes its burn count for the
/// next check) in the same transaction. `Ok(false)`: the order is no longer
/// in its saga (it expired meanwhile).
pub(crate) async fn admit(
    db: &Db,
    tenant_id: TenantId,
    order_id: OrderId,
    hourly: Decimal,
    runway: Runway,
) -> Result<bool, Error> {
    db.tx(move |conn| {
        lock_tenant(conn, tenant_id)?;
        let committed = committed_burn(conn, tenant_id, Some(order_id.into()), None)?;
        if let Err(refused) = runway.check(committed, hourly) {
            REFUSED.with_label_values(&["runway"]).inc();
            tracing::info!(order.id = %order_id, tenant.id = %tenant_id, %committed, %hourly, "order refused: runway");
            return Err(refused);
        }
        diesel::update(orders::table.find(order_id))
            .filter(orders::state.eq_any([
                InstanceState::Pending,
                InstanceState::Allocating,
            ]))
            .set((
                orders::state.eq(InstanceState::Allocating),
                orders::updated_at.eq(diesel::dsl::now),
            ))
            .execute(conn)
            .map(|n| n == 1)
            .map_err(Error::from)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    #[test]
    fn the_runway_counts_what_already_runs() {
        let runway = Runway {
            balance: d("0.05"),
            currency: "USD".into(),
            runway_seconds: 600,
        };
        // 10 minutes at 0.12/h is 0.02: one order alone, and a second next to
        // it, fit in 0.05; a third does not.
        assert!(runway.check(Decimal::ZERO, d("0.12")).is_ok());
        assert!(runway.check(d("0.12"), d("0.12")).is_ok());
        let refused = runway.check(d("0.24"), d("0.12")).unwrap_err();
        assert_eq!(refused.code(), ErrorCode::InsufficientFunds);
        assert!(refused.to_string().contains("already runs"), "{refused}");
    }

    /// An order of one GPU at 0.12 an hour, in `state`.
    fn insert_order(
        conn: &mut PgConnection,
        id: Uuid,
        tenant: Uuid,
        key: &str,
        state: &str,
    ) -> QueryResult<usize> {
        diesel::sql_query(
            "INSERT INTO ordering.orders (id, tenant_id, user_id, idempotency_key, \
                 request_fingerprint, offer_id, gpu_count, price_per_gpu_hour, state) \
             VALUES ($1, $2, $2, $3, 'f', $2, 1, 0.12, $4)",
        )
        .bind::<diesel::sql_types::Uuid, _>(id)
        .bind::<diesel::sql_types::Uuid, _>(tenant)
        .bind::<Text, _>(key)
        .bind::<Text, _>(state)
        .execute(conn)
    }

    /// The instance of `order`: `gpus` GPUs at 0.12 an hour each, in `state`.
    fn insert_instance(
        conn: &mut PgConnection,
        id: Uuid,
        order: Uuid,
        tenant: Uuid,
        gpus: i32,
        state: &str,
    ) -> QueryResult<usize> {
        diesel::sql_query(
            "INSERT INTO ordering.instances (id, order_id, tenant_id, host_tenant_id, \
                 machine_id, gpu_model, gpu_count, rental_type, price_per_gpu_hour, \
                 currency, image, state) \
             VALUES ($1, $2, $3, $3, $3, 'RTX 4090', $4, 'on_demand', 0.12, 'USD', 'img', $5)",
        )
        .bind::<diesel::sql_types::Uuid, _>(id)
        .bind::<diesel::sql_types::Uuid, _>(order)
        .bind::<diesel::sql_types::Uuid, _>(tenant)
        .bind::<diesel::sql_types::Integer, _>(gpus)
        .bind::<Text, _>(state)
        .execute(conn)
    }

    /// Every state that holds GPUs and will be billed counts, `host_lost`
    /// included; stopped, failed and destroyed instances do not.
    #[test]
    fn the_committed_burn_counts_a_lost_host_and_not_a_stopped_instance() {
        let db = platform::test_db::TestDb::new("funds").expect("test database");
        let mut conn = db.conn().expect("connect");
        let tenant = Uuid::now_v7();
        for state in ["running", "host_lost", "stopped", "failed", "destroyed"] {
            let order = Uuid::now_v7();
            insert_order(&mut conn, order, tenant, &format!("k-{state}"), state).expect("order");
            insert_instance(&mut conn, Uuid::now_v7(), order, tenant, 2, state).expect("instance");
        }
        // Two GPUs at 0.12 each for the running and the lost instance.
        assert_eq!(
            committed_burn(&mut conn, TenantId(tenant), None, None).expect("burn"),
            d("0.48")
        );
    }

    /// An order becoming its instance (one transaction that does not take
    /// the runway lock) is counted exactly once by a runway check running
    /// beside it, however the two interleave: never missed (a burst would
    /// admit one order too many) and never twice. Real Postgres, READ
    /// COMMITTED, many flips against many reads.
    #[test]
    fn an_order_becoming_its_instance_is_counted_once_by_a_concurrent_check() {
        let db = platform::test_db::TestDb::new("funds").expect("test database");
        let (tenant, order, instance) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        let mut setup = PgConnection::establish(&db.url).expect("connect");
        insert_order(&mut setup, order, tenant, "k", "allocating").expect("order");

        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flipper = {
            let (url, stop) = (db.url.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut conn = PgConnection::establish(&url).expect("connect");
                let mut flips = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && flips < 20_000 {
                    // As the saga's create_instance: the instance appears in
                    // provisioning and the order leaves allocating together;
                    // then back, to flip again.
                    conn.transaction::<_, diesel::result::Error, _>(|c| {
                        insert_instance(c, instance, order, tenant, 1, "provisioning")?;
                        diesel::sql_query(
                            "UPDATE ordering.orders SET state = 'provisioning' WHERE id = $1",
                        )
                        .bind::<diesel::sql_types::Uuid, _>(order)
                        .execute(c)
                    })
                    .expect("to instance");
                    conn.transaction::<_, diesel::result::Error, _>(|c| {
                        diesel::sql_query("DELETE FROM ordering.instances WHERE id = $1")
                            .bind::<diesel::sql_types::Uuid, _>(instance)
                            .execute(c)?;
                        diesel::sql_query(
                            "UPDATE ordering.orders SET state = 'allocating' WHERE id = $1",
                        )
                        .bind::<diesel::sql_types::Uuid, _>(order)
                        .execute(c)
                    })
                    .expect("back to order");
                    flips += 1;
                }
                flips
            })
        };

        let mut conn = PgConnection::establish(&db.url).expect("connect");
        let mut wrong = Vec::new();
        for _ in 0..5_000 {
            let burn = committed_burn(&mut conn, TenantId(tenant), None, None).expect("burn");
            if burn != d("0.12") {
                wrong.push(burn);
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let flips = flipper.join().expect("flipper");
        assert!(flips > 0);
        assert!(
            wrong.is_empty(),
            "{} of 5000 checks saw a burn other than 0.12 while the order flipped {flips} times: {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(5)]
        );
    }
}
