//! Usage ingest: a batch of metering's messages applied with a fixed number
//! of set-based statements, whatever the batch's size (issue 17). One usage
//! segment is one posting (renter debit = host credit + platform fee) with
//! its usage details; a downtime credit (host to renter) is one posting too,
//! posted with the batch. For the batch as a whole, in this order:
//!
//! 1. the postings are inserted in one statement, and only those not posted
//!    before go on (a posting id names one segment of one interval, so a
//!    segment re-announced under a new message id posts nothing);
//! 2. the renters', hosts' and fee accounts are looked up (and created on
//!    first use) in one statement;
//! 3. every leg is inserted in one statement (the database checks once, for
//!    the statement, that each posting's legs sum to zero);
//! 4. the usage details, in one statement;
//! 5. the caps: month-to-date spend moves once per tenant and month, and a
//!    tenant whose charge reached its cap is announced, as before;
//! 6. each account's balance moves once by the sum of its legs, the accounts
//!    locked in id order (`ledger::move_balances`, as every writer does) so
//!    concurrent batches never deadlock; last, so the hot rows (the fee
//!    account, always) stay locked only until the commit that follows;
//! 7. the floor: a renter charged in the batch whose balance ends below zero
//!    is announced once (`billing.balance.exhausted`), from the same
//!    transaction.
//!
//! A batch of one is exactly the old per-event path; every caller (the
//! consumer, the tests, the simulation) goes through here.

use contracts::ids::{MachineId, TenantId};
use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};
use contracts::events::{
    BALANCE_EXHAUSTED, BalanceExhausted, INSTANCE_DOWNTIME, MeteredUsage, USAGE_RECORDED,
    UsageRecorded,
};
use contracts::{Envelope, money};
use diesel::prelude::*;
use diesel::sql_types::{Array, Int8, Nullable, Numeric, Text, Timestamptz, Uuid as SqlUuid};
use platform::consumer::HandlerError;
use rust_decimal::Decimal;
use uuid::Uuid;

use crate::Settings;
use crate::ledger::AccountKind;
use crate::rating::{DowntimeCredit, Rating};

/// One usage segment, rated and described, ready to post.
struct Segment {
    posting_id: String,
    usage: UsageRecorded,
    amount: Decimal,
    host_share: Decimal,
    fee: Decimal,
    description: String,
    unit: &'static str,
    quantity: Option<i64>,
    unit_price: Option<Decimal>,
    correlation_id: Option<String>,
}

/// Reads and rates one `metering.usage.recorded` message; a message that
/// can never be posted is a permanent error.
fn segment(envelope: &Envelope, settings: &Settings) -> Result<Segment, HandlerError> {
    let metered: MeteredUsage = envelope
        .payload()
        .map_err(|e| HandlerError::Permanent(format!("bad usage payload: {e}")))?;
    let rating = Rating::of(&metered).map_err(HandlerError::Permanent)?;
    let usage = metered.usage;
    if usage.currency != settings.currency {
        return Err(HandlerError::Permanent(format!(
            "usage in {} but the ledger settles in {}",
            usage.currency, settings.currency
        )));
    }
    let amount = rating
        .segment(usage.offset_seconds, usage.seconds)
        .ok_or_else(|| HandlerError::Permanent("usage amount out of range".into()))?;
    let split = money::split_fee(amount, settings.fee_rate);
    let currency = &settings.currency;
    let description = match rating {
        Rating::Hourly(_) => format!(
            "{} s of {} at {} {}/h (from second {} of the interval)",
            usage.seconds, usage.meter, usage.price_per_hour, currency, usage.offset_seconds
        ),
        Rating::Storage {
            disk_gib,
            per_gb_month,
        } => format!(
            "{} s of {} for {} GiB at {} {}/GB-month of 730 h (from second {} of the interval)",
            usage.seconds, usage.meter, disk_gib, per_gb_month, currency, usage.offset_seconds
        ),
        Rating::Bytes { per_tb } => format!(
            "{} bytes of {} at {} {}/TB of 10^12 bytes (from byte {} of the interval)",
            usage.seconds, usage.meter, per_tb, currency, usage.offset_seconds
        ),
    };
    // What an invoice line counts: GiB-seconds of storage, bytes of
    // bandwidth (seconds of GPU time, the default).
    let (unit, quantity, unit_price) = match rating {
        Rating::Hourly(_) => ("second", None, None),
        Rating::Storage {
            disk_gib,
            per_gb_month,
        } => (
            "gib_second",
            usage.seconds.checked_mul(i64::from(disk_gib)),
            Some(per_gb_month),
        ),
        Rating::Bytes { per_tb } => ("byte", Some(usage.seconds), Some(per_tb)),
    };
    Ok(Segment {
        // One posting per segment of the interval, whatever the deliveries.
        posting_id: format!(
            "usage:{}:{}:{}",
            usage.interval_id, usage.offset_seconds, usage.seconds
        ),
        usage,
        amount,
        host_share: split.host,
        fee: split.fee,
        description,
        unit,
        quantity,
        unit_price,
        correlation_id: envelope.correlation_id.clone(),
    })
}

/// Applies a batch of billing's messages (usage segments and downtime
/// credits; other kinds are ignored) inside the caller's transaction.
pub fn apply_batch(
    conn: &mut PgConnection,
    envelopes: &[&Envelope],
    settings: &Settings,
) -> Result<(), HandlerError> {
    let mut segments = Vec::with_capacity(envelopes.len());
    let mut credits = Vec::new();
    let mut ids = HashSet::with_capacity(envelopes.len());
    for envelope in envelopes {
        match envelope.kind.as_str() {
            USAGE_RECORDED => {
                let segment = segment(envelope, settings)?;
                if ids.insert(segment.posting_id.clone()) {
                    segments.push(segment);
                }
            }
            // Rare (a lost host), but posted with the batch: a credit posted
            // on its own would lock its two accounts ahead of the batch's
            // id-ordered sweep, and two batches could deadlock.
            INSTANCE_DOWNTIME => {
                if let Some(credit) = crate::rating::downtime_credit(envelope, settings)?
                    && ids.insert(credit.posting_id.clone())
                {
                    credits.push(credit);
                }
            }
            _ => {}
        }
    }
    if segments.is_empty() && credits.is_empty() {
        return Ok(());
    }
    let posted = insert_postings(conn, &segments, &credits, settings)?;
    segments.retain(|s| posted.contains(&s.posting_id));
    credits.retain(|c| posted.contains(&c.posting_id));
    if segments.is_empty() && credits.is_empty() {
        return Ok(());
    }
    let accounts = Accounts::load(conn, &segments, &credits, &settings.currency)?;
    let deltas = insert_legs(conn, &segments, &credits, &accounts)?;
    if !segments.is_empty() {
        insert_details(conn, &segments)?;
    }
    let charges: Vec<crate::spend::Charge> = segments
        .iter()
        .map(|s| crate::spend::Charge {
            tenant_id: s.usage.tenant_id,
            amount: s.amount,
            usage_at: s.usage.started_at,
            correlation_id: s.correlation_id.clone(),
        })
        .collect();
    crate::spend::charges_posted(conn, settings, &charges)?;
    let balances = crate::ledger::move_balances(conn, &deltas)?;
    for s in &segments {
        tracing::debug!(instance.id = %s.usage.instance_id, amount = %s.amount, "usage posted");
        crate::metrics::usage_posted(s.usage.meter.as_str(), s.amount);
    }
    for c in &credits {
        tracing::info!(instance.id = %c.instance_id, amount = %c.amount, seconds = c.seconds, "downtime credited");
        crate::metrics::downtime_credited(c.amount);
    }
    announce_exhausted(conn, &segments, &accounts, &balances, settings)?;
    tracing::info!(
        postings = segments.len(),
        credits = credits.len(),
        "usage batch posted"
    );
    Ok(())
}

#[derive(QueryableByName)]
struct PostedId {
    #[diesel(sql_type = Text)]
    id: String,
}

/// Inserts the batch's postings in one statement (in id order, so
/// concurrent batches queue on a shared id in one order); returns the ids
/// posted now.
fn insert_postings(
    conn: &mut PgConnection,
    segments: &[Segment],
    credits: &[DowntimeCredit],
    settings: &Settings,
) -> Result<HashSet<String>, HandlerError> {
    struct Row<'a> {
        id: &'a str,
        kind: &'static str,
        tenant: Uuid,
        instance: Uuid,
        fee_rate: Option<Decimal>,
        description: &'a str,
    }
    let mut rows: Vec<Row<'_>> = segments
        .iter()
        .map(|s| Row {
            id: &s.posting_id,
            kind: "usage",
            tenant: s.usage.tenant_id.into(),
            instance: s.usage.instance_id.into(),
            fee_rate: Some(settings.fee_rate),
            description: &s.description,
        })
        .chain(credits.iter().map(|c| Row {
            id: &c.posting_id,
            kind: "downtime_credit",
            tenant: c.tenant_id.into(),
            instance: c.instance_id.into(),
            fee_rate: None,
            description: &c.description,
        }))
        .collect();
    rows.sort_by(|a, b| a.id.cmp(b.id));
    let ids: Vec<&str> = rows.iter().map(|r| r.id).collect();
    let kinds: Vec<&str> = rows.iter().map(|r| r.kind).collect();
    let tenants: Vec<Uuid> = rows.iter().map(|r| r.tenant).collect();
    let instances: Vec<Uuid> = rows.iter().map(|r| r.instance).collect();
    let fee_rates: Vec<Option<Decimal>> = rows.iter().map(|r| r.fee_rate).collect();
    let descriptions: Vec<&str> = rows.iter().map(|r| r.description).collect();
    Ok(diesel::sql_query(
        "INSERT INTO billing.transactions (id, kind, tenant_id, instance_id, fee_rate, description) \
         SELECT * FROM unnest($1::text[], $2::text[], $3::uuid[], $4::uuid[], $5::numeric[], $6::text[]) \
         ON CONFLICT DO NOTHING RETURNING id",
    )
    .bind::<Array<Text>, _>(&ids)
    .bind::<Array<Text>, _>(&kinds)
    .bind::<Array<SqlUuid>, _>(&tenants)
    .bind::<Array<SqlUuid>, _>(&instances)
    .bind::<Array<Nullable<Numeric>>, _>(&fee_rates)
    .bind::<Array<Text>, _>(&descriptions)
    .load::<PostedId>(conn)?
    .into_iter()
    .map(|p| p.id)
    .collect())
}

/// The accounts a batch posts to, by kind and tenant.
struct Accounts {
    by_owner: HashMap<(AccountKind, Option<Uuid>), Uuid>,
}

#[derive(QueryableByName)]
struct AccountRow {
    #[diesel(sql_type = SqlUuid)]
    id: Uuid,
    #[diesel(sql_type = Text)]
    kind: String,
    #[diesel(sql_type = Nullable<SqlUuid>)]
    tenant_id: Option<Uuid>,
}

impl Accounts {
    fn load(
        conn: &mut PgConnection,
        segments: &[Segment],
        credits: &[DowntimeCredit],
        currency: &str,
    ) -> Result<Self, HandlerError> {
        let mut wanted: Vec<(AccountKind, Option<Uuid>)> = Vec::new();
        if !segments.is_empty() {
            wanted.push((AccountKind::PlatformFee, None));
        }
        let owners = segments
            .iter()
            .map(|s| (s.usage.tenant_id.0, s.usage.host_tenant_id.0))
            .chain(credits.iter().map(|c| (c.tenant_id.0, c.host_tenant_id.0)));
        for (renter, host) in owners {
            wanted.push((AccountKind::RenterBalance, Some(renter)));
            wanted.push((AccountKind::HostEarnings, Some(host)));
        }
        wanted.sort_by_key(|(kind, tenant)| (kind.as_str(), *tenant));
        wanted.dedup();
        let mut accounts = Self::select(conn, &wanted, currency)?;
        let missing: Vec<&(AccountKind, Option<Uuid>)> = wanted
            .iter()
            .filter(|w| !accounts.by_owner.contains_key(w))
            .collect();
        if !missing.is_empty() {
            // Created on first use; a concurrent batch creating the same
            // account is absorbed by the unique key, then both read it.
            let ids: Vec<Uuid> = missing.iter().map(|_| Uuid::now_v7()).collect();
            let kinds: Vec<&str> = missing.iter().map(|(k, _)| k.as_str()).collect();
            let tenants: Vec<Option<Uuid>> = missing.iter().map(|(_, t)| *t).collect();
            diesel::sql_query(
                "INSERT INTO billing.accounts (id, kind, tenant_id, currency) \
                 SELECT t.id, t.kind, t.tenant_id, $4 \
                 FROM unnest($1::uuid[], $2::text[], $3::uuid[]) AS t(id, kind, tenant_id) \
                 ON CONFLICT DO NOTHING",
            )
            .bind::<Array<SqlUuid>, _>(&ids)
            .bind::<Array<Text>, _>(&kinds)
            .bind::<Array<Nullable<SqlUuid>>, _>(&tenants)
            .bind::<Text, _>(currency)
            .execute(conn)?;
            accounts = Self::select(conn, &wanted, currency)?;
        }
        if wanted.iter().any(|w| !accounts.by_owner.contains_key(w)) {
            return Err(HandlerError::Transient(
                "a ledger account could not be created".into(),
            ));
        }
        Ok(accounts)
    }

    fn select(
        conn: &mut PgConnection,
        wanted: &[(AccountKind, Option<Uuid>)],
        currency: &str,
    ) -> Result<Self, HandlerError> {
        let tenants_of = |kind: AccountKind| -> Vec<Uuid> {
            wanted
                .iter()
                .filter(|(k, _)| *k == kind)
                .filter_map(|(_, t)| *t)
                .collect()
        };
        let rows: Vec<AccountRow> = diesel::sql_query(
            "SELECT id, kind, tenant_id FROM billing.accounts WHERE currency = $1 AND ( \
                 (kind = 'renter_balance' AND tenant_id = ANY($2)) \
              OR (kind = 'host_earnings' AND tenant_id = ANY($3)) \
              OR (kind = 'platform_fee' AND tenant_id IS NULL))",
        )
        .bind::<Text, _>(currency)
        .bind::<Array<SqlUuid>, _>(tenants_of(AccountKind::RenterBalance))
        .bind::<Array<SqlUuid>, _>(tenants_of(AccountKind::HostEarnings))
        .load(conn)?;
        let by_owner = rows
            .into_iter()
            .filter_map(|row| {
                let kind = match row.kind.as_str() {
                    "renter_balance" => AccountKind::RenterBalance,
                    "host_earnings" => AccountKind::HostEarnings,
                    "platform_fee" => AccountKind::PlatformFee,
                    _ => return None,
                };
                Some(((kind, row.tenant_id), row.id))
            })
            .collect();
        Ok(Self { by_owner })
    }

    fn id(&self, kind: AccountKind, tenant: Option<Uuid>) -> Result<Uuid, HandlerError> {
        self.by_owner
            .get(&(kind, tenant))
            .copied()
            .ok_or_else(|| HandlerError::Transient(format!("no {} account", kind.as_str())))
    }
}

/// Inserts every leg of the batch's postings in one statement; returns the
/// sum of the legs per account, for the balances.
fn insert_legs(
    conn: &mut PgConnection,
    segments: &[Segment],
    credits: &[DowntimeCredit],
    accounts: &Accounts,
) -> Result<BTreeMap<Uuid, Decimal>, HandlerError> {
    let mut legs: Vec<(&str, Uuid, Decimal)> =
        Vec::with_capacity(segments.len() * 3 + credits.len() * 2);
    if !segments.is_empty() {
        let fee = accounts.id(AccountKind::PlatformFee, None)?;
        for s in segments {
            let renter = accounts.id(AccountKind::RenterBalance, Some(s.usage.tenant_id.into()))?;
            let host = accounts.id(
                AccountKind::HostEarnings,
                Some(s.usage.host_tenant_id.into()),
            )?;
            legs.push((&s.posting_id, renter, -s.amount));
            legs.push((&s.posting_id, host, s.host_share));
            legs.push((&s.posting_id, fee, s.fee));
        }
    }
    for c in credits {
        let renter = accounts.id(AccountKind::RenterBalance, Some(c.tenant_id.into()))?;
        let host = accounts.id(AccountKind::HostEarnings, Some(c.host_tenant_id.into()))?;
        legs.push((&c.posting_id, host, -c.amount));
        legs.push((&c.posting_id, renter, c.amount));
    }
    let mut deltas: BTreeMap<Uuid, Decimal> = BTreeMap::new();
    for (_, account, amount) in &legs {
        *deltas.entry(*account).or_default() += *amount;
    }
    let txns: Vec<&str> = legs.iter().map(|l| l.0).collect();
    let ids: Vec<Uuid> = legs.iter().map(|l| l.1).collect();
    let amounts: Vec<Decimal> = legs.iter().map(|l| l.2).collect();
    diesel::sql_query(
        "INSERT INTO billing.entries (transaction_id, account_id, amount) \
         SELECT * FROM unnest($1::text[], $2::uuid[], $3::numeric[])",
    )
    .bind::<Array<Text>, _>(&txns)
    .bind::<Array<SqlUuid>, _>(&ids)
    .bind::<Array<Numeric>, _>(&amounts)
    .execute(conn)?;
    Ok(deltas)
}

/// The facts invoices group and show (meter, seconds, price, charge period),
/// as columns beside the immutable postings.
fn insert_details(conn: &mut PgConnection, segments: &[Segment]) -> Result<(), HandlerError> {
    let col = |f: &dyn Fn(&Segment) -> Uuid| -> Vec<Uuid> { segments.iter().map(f).collect() };
    let ids: Vec<&str> = segments.iter().map(|s| s.posting_id.as_str()).collect();
    let meters: Vec<&str> = segments.iter().map(|s| s.usage.meter.as_str()).collect();
    let offsets: Vec<i64> = segments.iter().map(|s| s.usage.offset_seconds).collect();
    let seconds: Vec<i64> = segments.iter().map(|s| s.usage.seconds).collect();
    let prices: Vec<Decimal> = segments.iter().map(|s| s.usage.price_per_hour).collect();
    let started: Vec<DateTime<Utc>> = segments.iter().map(|s| s.usage.started_at).collect();
    let ended: Vec<DateTime<Utc>> = segments.iter().map(|s| s.usage.ended_at).collect();
    let machines: Vec<Option<Uuid>> = segments
        .iter()
        .map(|s| s.usage.machine_id.map(MachineId::into_uuid))
        .collect();
    let models: Vec<Option<&str>> = segments
        .iter()
        .map(|s| s.usage.gpu_model.as_deref())
        .collect();
    let units: Vec<&str> = segments.iter().map(|s| s.unit).collect();
    let quantities: Vec<Option<i64>> = segments.iter().map(|s| s.quantity).collect();
    let unit_prices: Vec<Option<Decimal>> = segments.iter().map(|s| s.unit_price).collect();
    diesel::sql_query(
        "INSERT INTO billing.usage_details (transaction_id, interval_id, meter, offset_seconds, \
             seconds, price_per_hour, started_at, ended_at, tenant_id, host_tenant_id, machine_id, \
             gpu_model, unit, quantity, unit_price) \
         SELECT * FROM unnest($1::text[], $2::uuid[], $3::text[], $4::int8[], $5::int8[], \
             $6::numeric[], $7::timestamptz[], $8::timestamptz[], $9::uuid[], $10::uuid[], \
             $11::uuid[], $12::text[], $13::text[], $14::int8[], $15::numeric[])",
    )
    .bind::<Array<Text>, _>(&ids)
    .bind::<Array<SqlUuid>, _>(col(&|s| s.usage.interval_id))
    .bind::<Array<Text>, _>(&meters)
    .bind::<Array<Int8>, _>(&offsets)
    .bind::<Array<Int8>, _>(&seconds)
    .bind::<Array<Numeric>, _>(&prices)
    .bind::<Array<Timestamptz>, _>(&started)
    .bind::<Array<Timestamptz>, _>(&ended)
    .bind::<Array<SqlUuid>, _>(col(&|s| s.usage.tenant_id.into()))
    .bind::<Array<SqlUuid>, _>(col(&|s| s.usage.host_tenant_id.into()))
    .bind::<Array<Nullable<SqlUuid>>, _>(&machines)
    .bind::<Array<Nullable<Text>>, _>(&models)
    .bind::<Array<Text>, _>(&units)
    .bind::<Array<Nullable<Int8>>, _>(&quantities)
    .bind::<Array<Nullable<Numeric>>, _>(&unit_prices)
    .execute(conn)?;
    Ok(())
}

/// A charge that takes a renter below zero is still posted (the usage
/// happened); the exhausted balance is announced in the same transaction,
/// once per renter charged in the batch, so ordering stops the tenant's
/// instances: an overdraft is bounded by one settlement interval's burn
/// (DESIGN 5).
fn announce_exhausted(
    conn: &mut PgConnection,
    segments: &[Segment],
    accounts: &Accounts,
    balances: &HashMap<Uuid, Decimal>,
    settings: &Settings,
) -> Result<(), HandlerError> {
    // The renters charged (not only corrected) in this batch, each with the
    // correlation id of its last charge.
    let mut charged: Vec<(Uuid, Option<String>)> = Vec::new();
    for s in segments.iter().filter(|s| s.amount > Decimal::ZERO) {
        match charged.iter_mut().find(|(t, _)| *t == s.usage.tenant_id) {
            Some(entry) => entry.1.clone_from(&s.correlation_id),
            None => charged.push((s.usage.tenant_id.into(), s.correlation_id.clone())),
        }
    }
    let mut exhausted: Vec<(Uuid, Decimal, Option<String>)> = Vec::new();
    for (tenant_id, correlation_id) in charged {
        let account = accounts.id(AccountKind::RenterBalance, Some(tenant_id))?;
        let Some(&balance) = balances.get(&account) else {
            continue;
        };
        if balance >= Decimal::ZERO {
            continue;
        }
        exhausted.push((tenant_id, balance, correlation_id));
    }
    if exhausted.is_empty() {
        return Ok(());
    }
    // The renters' balance events are numbered (webhook ordering) only when
    // one is announced, in one statement for the batch: never per charge.
    let resources: Vec<String> = exhausted
        .iter()
        .map(|(tenant_id, _, _)| contracts::events::resource::tenant(*tenant_id))
        .collect();
    let sequences = platform::sequence::next_many(conn, crate::SCHEMA, &resources)?;
    for ((tenant_id, balance, correlation_id), sequence) in exhausted.into_iter().zip(sequences) {
        let exhausted = BalanceExhausted {
            tenant_id: TenantId(tenant_id),
            balance,
            currency: settings.currency.clone(),
            at: contracts::time::now(),
            sequence,
        };
        let envelope = Envelope::new(
            contracts::events::kinds::BALANCE_EXHAUSTED,
            exhausted.at,
            Some(TenantId(tenant_id)),
            correlation_id,
            &exhausted,
        )
        .map_err(|e| HandlerError::Permanent(e.to_string()))?;
        platform::outbox::enqueue(
            conn,
            crate::SCHEMA,
            &settings.events_exchange,
            BALANCE_EXHAUSTED,
            &envelope,
        )?;
        tracing::warn!(tenant.id = %tenant_id, %balance, "balance exhausted; the tenant's instances will be stopped");
        crate::metrics::balance_exhausted();
    }
    Ok(())
}
