#![allow(clippy::expect_used, clippy::unwrap_used)] // Tests: a failed expectation is the failure.

//! Batched usage ingest against a real database: the per-statement balance
//! check refuses a posting whose legs do not sum to zero, duplicates and a
//! replayed batch post each event once, concurrent batches touching the same
//! accounts in different orders (downtime credits among them) neither
//! deadlock nor lose a cent, nor does an invoice run beside them, and the
//! ledger refuses TRUNCATE.

use contracts::ids::{InstanceId, MachineId, TenantId};
use std::sync::{Arc, Barrier};

use billing::invoices::{self, InvoicePeriod};
use chrono::Utc;
use contracts::events::{InstanceDowntime, MeteredUsage, UsageRecorded};
use contracts::{Envelope, api};
use diesel::{Connection, PgConnection, RunQueryDsl};
use gpumarket_billing as billing;
use rust_decimal::Decimal;
use uuid::Uuid;

mod common;
use common::{TestDb, count, settings};

use billing::ledger::{self, AccountKind, Posting};

/// A usage segment of `seconds` as metering announces it.
fn usage(tenant: Uuid, host: Uuid, interval: Uuid, seconds: i64) -> Envelope {
    let now = Utc::now();
    let usage = UsageRecorded {
        interval_id: interval,
        instance_id: InstanceId(interval),
        tenant_id: TenantId(tenant),
        host_tenant_id: TenantId(host),
        meter: contracts::states::Meter::Gpu,
        started_at: now - chrono::Duration::seconds(seconds),
        ended_at: now,
        seconds,
        price_per_hour: Decimal::new(137, 2),
        currency: "USD".into(),
        offset_seconds: 0,
        machine_id: Some(MachineId(Uuid::from_u128(9))),
        gpu_model: Some("RTX 4090".into()),
    };
    Envelope::new(
        contracts::events::kinds::USAGE_RECORDED,
        now,
        Some(TenantId(tenant)),
        None,
        &MeteredUsage::from(usage),
    )
    .expect("envelope")
}

/// A lost host's downtime credit for one run of `instance`.
fn downtime(tenant: Uuid, host: Uuid, instance: Uuid, seconds: i64) -> Envelope {
    let now = Utc::now();
    let down = InstanceDowntime {
        instance_id: InstanceId(instance),
        tenant_id: TenantId(tenant),
        host_tenant_id: TenantId(host),
        machine_id: MachineId(Uuid::from_u128(9)),
        run_seq: 1,
        down_from: now - chrono::Duration::seconds(seconds),
        down_until: now,
        seconds,
        price_per_hour: Decimal::new(137, 2),
        currency: "USD".into(),
        ended_by: "host_back".into(),
    };
    Envelope::new(
        contracts::events::kinds::INSTANCE_DOWNTIME,
        now,
        Some(TenantId(tenant)),
        None,
        &down,
    )
    .expect("envelope")
}

/// One batch through the consumer's path (inbox claim, then ingest) in one
/// transaction; how many messages were fresh.
fn apply(conn: &mut PgConnection, envelopes: &[Envelope]) -> Result<usize, String> {
    conn.transaction::<_, diesel::result::Error, _>(|c| {
        platform::consumer::apply_batch_once(c, billing::SCHEMA, envelopes, |c, fresh| {
            billing::apply_batch(c, fresh, &settings())
        })
        .map_err(|e| diesel::result::Error::QueryBuilderError(e.to_string().into()))
    })
    .map_err(|e| e.to_string())
}

/// Every account's balance is the sum of its legs and every posting sums to
/// zero.
fn assert_ledger_consistent(conn: &mut PgConnection) {
    assert_eq!(
        count(
            conn,
            "SELECT count(*) AS n FROM billing.accounts a \
             WHERE a.balance <> (SELECT coalesce(sum(e.amount), 0) FROM billing.entries e \
                                 WHERE e.account_id = a.id)",
        ),
        0,
        "an account's balance differs from the sum of its legs"
    );
    assert_postings_balance(conn);
}

fn assert_postings_balance(conn: &mut PgConnection) {
    assert_eq!(
        count(
            conn,
            "SELECT count(*) AS n FROM (SELECT transaction_id FROM billing.entries \
             GROUP BY transaction_id HAVING sum(amount) <> 0) u",
        ),
        0,
        "a posting does not balance"
    );
}

#[test]
fn an_unbalanced_posting_inserted_by_one_statement_is_refused() {
    let db = TestDb::new("ing_unbal");
    let mut conn = db.conn();
    let tenant = Uuid::now_v7();
    let renter = ledger::account(&mut conn, AccountKind::RenterBalance, Some(tenant), "USD")
        .expect("renter");
    let fee = ledger::account(&mut conn, AccountKind::PlatformFee, None, "USD").expect("fee");
    let insert = |conn: &mut PgConnection, legs: &str| -> Result<(), String> {
        conn.transaction::<_, diesel::result::Error, _>(|c| {
            diesel::sql_query(
                "INSERT INTO billing.transactions (id, kind, description) \
                 VALUES ('t:a', 'test', 'a'), ('t:b', 'test', 'b')",
            )
            .execute(c)?;
            diesel::sql_query(format!(
                "INSERT INTO billing.entries (transaction_id, account_id, amount) VALUES {legs}"
            ))
            .execute(c)?;
            Ok(())
        })
        .map_err(|e| e.to_string())
    };
    // One posting off by a cent, beside one that balances: the statement is
    // refused whole.
    let refused = insert(
        &mut conn,
        &format!(
            "('t:a', '{renter}', -1.00), ('t:a', '{fee}', 1.00), \
             ('t:b', '{renter}', -2.00), ('t:b', '{fee}', 1.99)"
        ),
    )
    .expect_err("an unbalanced posting is refused");
    assert!(refused.contains("t:b does not balance"), "{refused}");
    // A posting cannot be balanced by a later statement either: each
    // statement's share of a posting must sum to zero.
    let split = conn
        .transaction::<_, diesel::result::Error, _>(|c| {
            diesel::sql_query(
                "INSERT INTO billing.transactions (id, kind, description) VALUES ('t:c', 'test', 'c')",
            )
            .execute(c)?;
            diesel::sql_query(format!(
                "INSERT INTO billing.entries (transaction_id, account_id, amount) \
                 VALUES ('t:c', '{renter}', -1.00)"
            ))
            .execute(c)?;
            diesel::sql_query(format!(
                "INSERT INTO billing.entries (transaction_id, account_id, amount) \
                 VALUES ('t:c', '{fee}', 1.00)"
            ))
            .execute(c)?;
            Ok(())
        })
        .map_err(|e| e.to_string())
        .expect_err("legs split across statements are refused");
    assert!(split.contains("does not balance"), "{split}");
    assert_eq!(
        count(&mut conn, "SELECT count(*) AS n FROM billing.entries"),
        0
    );

    // Balanced postings go in, and `ledger::post` writes its legs with one
    // statement and moves the balances.
    insert(
        &mut conn,
        &format!(
            "('t:a', '{renter}', -1.00), ('t:a', '{fee}', 1.00), \
             ('t:b', '{renter}', -2.00), ('t:b', '{fee}', 2.00)"
        ),
    )
    .expect("balanced postings");
    let amount = Decimal::new(5, 0);
    let posted = conn
        .transaction::<_, diesel::result::Error, _>(|c| {
            ledger::post(
                c,
                &Posting {
                    id: "t:d",
                    kind: "test",
                    tenant_id: Some(tenant),
                    instance_id: None,
                    fee_rate: None,
                    description: "d",
                    legs: &[(fee, -amount), (renter, amount)],
                },
            )
        })
        .expect("post");
    assert!(posted);
    assert_eq!(
        ledger::balance(
            &mut conn,
            AccountKind::RenterBalance,
            TenantId(tenant),
            "USD"
        )
        .expect("balance"),
        amount
    );
    let unbalanced = conn
        .transaction::<_, diesel::result::Error, _>(|c| {
            ledger::post(
                c,
                &Posting {
                    id: "t:e",
                    kind: "test",
                    tenant_id: Some(tenant),
                    instance_id: None,
                    fee_rate: None,
                    description: "e",
                    legs: &[(fee, -amount), (renter, Decimal::ONE)],
                },
            )
        })
        .map_err(|e| e.to_string())
        .expect_err("ledger::post of an unbalanced posting is refused");
    assert!(unbalanced.contains("t:e does not balance"), "{unbalanced}");
    // (The raw inserts above moved no balance: only the postings are
    // checked here.)
    assert_postings_balance(&mut conn);
}

#[test]
fn duplicates_and_a_replayed_batch_post_each_event_once() {
    let db = TestDb::new("ing_replay");
    let mut conn = db.conn();
    let host = Uuid::now_v7();
    let renters: Vec<Uuid> = (0..5).map(|_| Uuid::now_v7()).collect();
    let mut batch: Vec<Envelope> = (0..40)
        .map(|i| {
            usage(
                renters[i % renters.len()],
                host,
                Uuid::now_v7(),
                60 + i as i64,
            )
        })
        .collect();
    batch.push(downtime(renters[0], host, Uuid::now_v7(), 600));
    let events = batch.len();
    // The same delivery twice, and the same segment re-announced under a new
    // message id (its posting id is the same).
    batch.push(batch[3].clone());
    let again: UsageRecorded = batch[7].payload().expect("payload");
    batch.push(
        Envelope::new(
            contracts::events::kinds::USAGE_RECORDED,
            Utc::now(),
            Some(again.tenant_id),
            None,
            &MeteredUsage::from(again.clone()),
        )
        .expect("envelope"),
    );
    let down: InstanceDowntime = batch[40].payload().expect("payload");
    batch.push(
        Envelope::new(
            contracts::events::kinds::INSTANCE_DOWNTIME,
            Utc::now(),
            Some(down.tenant_id),
            None,
            &down,
        )
        .expect("envelope"),
    );

    apply(&mut conn, &batch).expect("first delivery");
    let postings = "SELECT count(*) AS n FROM billing.transactions";
    let legs = "SELECT count(*) AS n FROM billing.entries";
    let details = "SELECT count(*) AS n FROM billing.usage_details";
    let events = i64::try_from(events).expect("events");
    assert_eq!(count(&mut conn, postings), events);
    assert_eq!(count(&mut conn, legs), (events - 1) * 3 + 2);
    assert_eq!(count(&mut conn, details), events - 1);
    assert_ledger_consistent(&mut conn);
    let renter_total = ledger::balance(
        &mut conn,
        AccountKind::RenterBalance,
        TenantId(renters[0]),
        "USD",
    )
    .expect("balance");

    // The broker redelivers the whole batch (a lost ack): nothing is fresh.
    assert_eq!(apply(&mut conn, &batch).expect("replay"), 0);
    // The same events under new message ids (metering re-announcing): fresh
    // to the inbox, but every posting exists already.
    let reannounced: Vec<Envelope> = batch
        .iter()
        .map(|e| {
            Envelope::named(&e.kind, Utc::now(), e.tenant_id, None, &e.payload).expect("envelope")
        })
        .collect();
    assert_eq!(
        apply(&mut conn, &reannounced).expect("re-announced"),
        reannounced.len()
    );
    assert_eq!(count(&mut conn, postings), events);
    assert_eq!(count(&mut conn, legs), (events - 1) * 3 + 2);
    assert_eq!(count(&mut conn, details), events - 1);
    assert_eq!(
        ledger::balance(
            &mut conn,
            AccountKind::RenterBalance,
            TenantId(renters[0]),
            "USD"
        )
        .expect("balance"),
        renter_total
    );
    // The details carry their tenant (the fill-in trigger had nothing to do).
    assert_eq!(
        count(
            &mut conn,
            "SELECT count(*) AS n FROM billing.usage_details WHERE tenant_id IS NULL"
        ),
        0
    );
    assert_ledger_consistent(&mut conn);
}

#[test]
fn concurrent_batches_over_the_same_accounts_in_different_orders_neither_deadlock_nor_drift() {
    const BATCHES: usize = 8;
    const ROUNDS: usize = 3;
    let db = TestDb::new("ing_conc");
    let hosts: Vec<Uuid> = (0..3).map(|_| Uuid::now_v7()).collect();
    let renters: Vec<Uuid> = (0..12).map(|_| Uuid::now_v7()).collect();
    // Each batch names the same renters and hosts, rotated and reversed
    // differently, and credits a downtime whose host and renter are locked
    // in opposite orders by its legs: a credit posted on its own, or
    // balances moved in the batch's order, would deadlock here.
    let batches: Vec<Vec<Vec<Envelope>>> = (0..BATCHES)
        .map(|b| {
            (0..ROUNDS)
                .map(|_| {
                    let mut order: Vec<usize> = (0..renters.len()).collect();
                    order.rotate_left(b % renters.len());
                    if b % 2 == 1 {
                        order.reverse();
                    }
                    let mut batch: Vec<Envelope> = order
                        .iter()
                        .flat_map(|&r| {
                            let renter = renters[r];
                            let host = hosts[(r + b) % hosts.len()];
                            [
                                usage(renter, host, Uuid::now_v7(), 30 + r as i64),
                                usage(renter, host, Uuid::now_v7(), 3600),
                            ]
                        })
                        .collect();
                    let credited = renters[(b * 5) % renters.len()];
                    batch.insert(
                        b % batch.len(),
                        downtime(credited, hosts[b % hosts.len()], Uuid::now_v7(), 900),
                    );
                    batch
                })
                .collect()
        })
        .collect();
    let expected_postings: usize = batches.iter().flatten().map(Vec::len).sum();

    let start = Arc::new(Barrier::new(BATCHES));
    let outcomes: Vec<Result<(), String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = batches
            .iter()
            .map(|rounds| {
                let start = Arc::clone(&start);
                let url = db.url().to_owned();
                scope.spawn(move || -> Result<(), String> {
                    let mut conn = PgConnection::establish(&url).map_err(|e| e.to_string())?;
                    start.wait();
                    for batch in rounds {
                        apply(&mut conn, batch)?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("batch thread"))
            .collect()
    });
    for outcome in outcomes {
        outcome.expect("every batch commits (no deadlock)");
    }

    let mut conn = db.conn();
    assert_eq!(
        count(&mut conn, "SELECT count(*) AS n FROM billing.transactions"),
        i64::try_from(expected_postings).expect("postings")
    );
    assert_ledger_consistent(&mut conn);
    assert_eq!(
        count(
            &mut conn,
            "SELECT count(*) AS n FROM billing.accounts WHERE kind = 'renter_balance'"
        ),
        i64::try_from(renters.len()).expect("renters")
    );
    // The whole ledger sums to zero.
    assert_eq!(
        count(
            &mut conn,
            "SELECT count(*) AS n FROM (SELECT sum(balance) AS s FROM billing.accounts) t WHERE s <> 0"
        ),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invoice_run_beside_ingest_batches_over_the_same_renters_does_not_deadlock() {
    let test = TestDb::new("ing_inv");
    let mut conn = test.conn();
    let host = Uuid::now_v7();
    let renters: Vec<Uuid> = (0..40).map(|_| Uuid::now_v7()).collect();
    // Sub-cent charges, so that every invoice posts a rounding and its run
    // moves every renter's balance.
    let invoiced: Vec<Envelope> = renters
        .iter()
        .enumerate()
        .map(|(i, r)| usage(*r, host, Uuid::now_v7(), 7 + i as i64))
        .collect();
    apply(&mut conn, &invoiced).expect("usage to invoice");
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let end = Utc::now();
    // Later usage of the same renters, in other orders, while the run goes.
    let batches: Vec<Vec<Vec<Envelope>>> = (0..4)
        .map(|b| {
            (0..3)
                .map(|_| {
                    let mut order = renters.clone();
                    order.rotate_left(b * 7);
                    if b % 2 == 0 {
                        order.reverse();
                    }
                    order
                        .iter()
                        .map(|r| usage(*r, host, Uuid::now_v7(), 60))
                        .collect()
                })
                .collect()
        })
        .collect();
    let db = platform::Db::connect(test.url(), 2).expect("db");
    let url = test.url().to_owned();
    let ingest = tokio::task::spawn_blocking(move || -> Result<(), String> {
        std::thread::scope(|scope| {
            let handles: Vec<_> = batches
                .iter()
                .map(|rounds| {
                    let url = url.clone();
                    scope.spawn(move || -> Result<(), String> {
                        let mut conn = PgConnection::establish(&url).map_err(|e| e.to_string())?;
                        for batch in rounds {
                            apply(&mut conn, batch)?;
                        }
                        Ok(())
                    })
                })
                .collect();
            handles
                .into_iter()
                .try_for_each(|h| h.join().expect("batch thread"))
        })
    });
    let run = invoices::run_invoices(
        &db,
        &settings(),
        InvoicePeriod::Monthly,
        api::RunInvoicesRequest {
            period_end: Some(end),
            tenant_id: None,
        },
    )
    .await
    .expect("the invoice run commits (no deadlock)");
    ingest
        .await
        .expect("join")
        .expect("every batch commits (no deadlock)");
    assert_eq!(run.invoices.len(), renters.len());
    assert_eq!(
        count(
            &mut conn,
            "SELECT count(*) AS n FROM billing.transactions WHERE kind = 'rounding'"
        ),
        i64::try_from(renters.len()).expect("renters")
    );
    assert_ledger_consistent(&mut conn);
}

#[test]
fn the_ledger_refuses_truncate() {
    let db = TestDb::new("ing_trunc");
    let mut conn = db.conn();
    let batch = vec![usage(Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7(), 120)];
    apply(&mut conn, &batch).expect("usage");
    for table in [
        "billing.entries",
        "billing.usage_details",
        "billing.transactions CASCADE",
        "billing.accounts CASCADE",
    ] {
        let refused = diesel::sql_query(format!("TRUNCATE {table}"))
            .execute(&mut conn)
            .map_err(|e| e.to_string())
            .expect_err("TRUNCATE is refused");
        assert!(refused.contains("immutable"), "{table}: {refused}");
    }
    assert_eq!(
        count(&mut conn, "SELECT count(*) AS n FROM billing.entries"),
        3
    );
    assert_eq!(
        count(&mut conn, "SELECT count(*) AS n FROM billing.usage_details"),
        1
    );
}
