#![allow(clippy::expect_used, clippy::unwrap_used)] // Tests: a failed expectation is the failure.

//! The set-based invoicing run against a real database: the invoices it
//! writes are the ones `draft` describes (the preview), tenants sharing a
//! chunk get their own gap-free numbers, a re-run issues nothing new, and
//! SQL's half-even rounding is `money::round_to_minor`'s.

use contracts::ids::{InstanceId, MachineId, TenantId};
use std::time::Duration;

use billing::invoices::{self, InvoicePeriod};
use chrono::Utc;
use contracts::events::UsageRecorded;
use contracts::{Envelope, api, money};
use diesel::{Connection, PgConnection, QueryableByName, RunQueryDsl};
use gpumarket_billing as billing;
use rust_decimal::Decimal;
use uuid::Uuid;

mod common;
use common::{TestDb, count, settings};

/// One usage segment through billing's real posting path.
fn usage(conn: &mut PgConnection, tenant: Uuid, instance: Uuid, seconds: i64, price: &str) {
    let now = Utc::now();
    let usage = UsageRecorded {
        interval_id: Uuid::now_v7(),
        instance_id: InstanceId(instance),
        tenant_id: TenantId(tenant),
        host_tenant_id: TenantId(Uuid::from_u128(7)),
        meter: contracts::states::Meter::Gpu,
        started_at: now - chrono::Duration::seconds(seconds),
        ended_at: now,
        seconds,
        price_per_hour: price.parse().expect("price"),
        currency: "USD".into(),
        offset_seconds: 0,
        machine_id: Some(MachineId(Uuid::from_u128(9))),
        gpu_model: Some("RTX 4090".into()),
    };
    let envelope = Envelope::new(
        contracts::events::kinds::USAGE_RECORDED,
        now,
        Some(TenantId(tenant)),
        None,
        &contracts::events::MeteredUsage::from(usage),
    )
    .expect("envelope");
    conn.transaction::<_, diesel::result::Error, _>(|c| {
        billing::apply_event(c, &envelope, &settings())
            .map_err(|e| diesel::result::Error::QueryBuilderError(e.to_string().into()))
    })
    .expect("usage");
}

/// The invoice as the preview (`draft`, in Rust) would write it.
fn same_as_preview(invoice: &api::Invoice, preview: &api::Invoice) {
    assert_eq!(invoice.total, preview.total);
    assert_eq!(invoice.subtotal, preview.subtotal);
    assert_eq!(invoice.exact_total, preview.exact_total);
    assert_eq!(invoice.rounding, preview.rounding);
    assert_eq!(invoice.period_start, preview.period_start);
    assert_eq!(invoice.lines, preview.lines);
}

async fn run_all(db: &platform::Db, end: chrono::DateTime<Utc>) -> api::RunInvoicesResult {
    invoices::run_invoices(
        db,
        &settings(),
        InvoicePeriod::Monthly,
        api::RunInvoicesRequest {
            period_end: Some(end),
            tenant_id: None,
        },
    )
    .await
    .expect("run")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_in_one_chunk_get_their_own_numbers_and_a_rerun_issues_nothing() {
    let test = TestDb::new("invoice_run");
    let db = platform::Db::connect(test.url(), 2).expect("db");
    let mut conn = test.conn();
    let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
    let (a1, a2, b1) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    // Sub-cent amounts on purpose: the lines round once, not per posting.
    for (tenant, instance, seconds, price) in [
        (a, a1, 7, "2.49"),
        (a, a1, 13, "2.49"),
        (a, a2, 11, "0.37"),
        (a, a2, 5, "1.10"),
        (b, b1, 3601, "3.33"),
        (b, b1, 1, "3.33"),
    ] {
        usage(&mut conn, tenant, instance, seconds, price);
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
    let end = Utc::now();
    let preview_a = invoices::preview(&db, &settings(), InvoicePeriod::Monthly, TenantId(a), end)
        .await
        .expect("preview");
    let preview_b = invoices::preview(&db, &settings(), InvoicePeriod::Monthly, TenantId(b), end)
        .await
        .expect("preview");

    let run = run_all(&db, end).await;
    assert_eq!(run.invoices.len(), 2);
    let of = |run: &api::RunInvoicesResult, t: Uuid| {
        run.invoices
            .iter()
            .find(|i| i.tenant_id == t)
            .cloned()
            .expect("the tenant's invoice")
    };
    let (ia, ib) = (of(&run, a), of(&run, b));
    assert_eq!((ia.number, ib.number), (Some(1), Some(1)));
    assert_eq!(ia.lines.len(), 3, "instance a2 has two prices");
    same_as_preview(&ia, &preview_a);
    same_as_preview(&ib, &preview_b);

    // The invoice total is the sum of the tenant's usage postings, rounded
    // once per line (instance, meter, price), straight from the ledger.
    #[derive(QueryableByName)]
    struct Sum {
        #[diesel(sql_type = diesel::sql_types::Numeric)]
        exact: Decimal,
    }
    for (tenant, invoice) in [(a, &ia), (b, &ib)] {
        let per_line: Vec<Sum> = diesel::sql_query(format!(
            "SELECT -sum(e.amount) AS exact FROM billing.transactions t \
             JOIN billing.entries e ON e.transaction_id = t.id \
             JOIN billing.accounts ac ON ac.id = e.account_id AND ac.kind = 'renter_balance' \
             JOIN billing.usage_details d ON d.transaction_id = t.id \
             WHERE t.kind = 'usage' AND t.tenant_id = '{tenant}' \
             GROUP BY t.instance_id, d.meter, d.price_per_hour"
        ))
        .load(&mut conn)
        .expect("sums");
        let total: Decimal = per_line
            .iter()
            .map(|s| money::round_to_minor(s.exact, "USD"))
            .sum();
        assert_eq!(invoice.total, total);
        assert_eq!(
            invoice.exact_total,
            per_line.iter().map(|s| s.exact).sum::<Decimal>()
        );
    }

    // A finalized invoice takes no more lines or postings (checked once
    // per statement over the inserted rows).
    let refused = diesel::sql_query(format!(
        "INSERT INTO billing.invoice_lines (invoice_id, position, instance_id, meter, quantity, unit, \
             unit_price_per_hour, earlier_period, charge_period_start, charge_period_end, postings, \
             exact_amount, amount) \
         VALUES ('{}', 99, '{a1}', 'gpu', 1, 'second', 1, false, now(), now(), 1, 1, 1)",
        ia.id.expect("stored")
    ))
    .execute(&mut conn);
    assert!(refused.is_err(), "a line added to a finalized invoice");

    // The host's statement, set-based too, is the preview's.
    let host = Uuid::from_u128(7);
    let statement_preview = billing::statements::preview(
        &db,
        &settings(),
        InvoicePeriod::Monthly,
        TenantId(host),
        end,
    )
    .await
    .expect("statement preview");
    let stated = billing::statements::run_statements(
        &db,
        &settings(),
        InvoicePeriod::Monthly,
        api::RunStatementsRequest {
            period_end: Some(end),
            host_tenant_id: None,
        },
    )
    .await
    .expect("statements");
    assert_eq!(stated.statements.len(), 1);
    let s = &stated.statements[0];
    assert_eq!(s.number, Some(1));
    assert_eq!(s.lines, statement_preview.lines);
    assert_eq!(
        (s.gross, s.fee, s.net, s.earnings, s.closing_balance),
        (
            statement_preview.gross,
            statement_preview.fee,
            statement_preview.net,
            statement_preview.earnings,
            statement_preview.closing_balance
        )
    );
    let restated = billing::statements::run_statements(
        &db,
        &settings(),
        InvoicePeriod::Monthly,
        api::RunStatementsRequest {
            period_end: Some(end),
            host_tenant_id: None,
        },
    )
    .await
    .expect("statements again");
    assert_eq!(restated.statements[0].id, s.id);
    assert_eq!(
        count(&mut conn, "SELECT count(*) AS n FROM billing.statements"),
        1
    );

    // A re-run finds the same invoices and issues nothing new.
    let again = run_all(&db, end).await;
    let mut ids: Vec<_> = run.invoices.iter().map(|i| i.id).collect();
    let mut again_ids: Vec<_> = again.invoices.iter().map(|i| i.id).collect();
    ids.sort();
    again_ids.sort();
    assert_eq!(ids, again_ids);
    assert_eq!(
        count(&mut conn, "SELECT count(*) AS n FROM billing.invoices"),
        2
    );
    assert_eq!(
        count(
            &mut conn,
            "SELECT count(*) AS n FROM billing.transactions WHERE kind = 'rounding'"
        ),
        count(
            &mut conn,
            "SELECT count(*) AS n FROM billing.invoices WHERE rounding <> 0"
        )
    );

    // Later usage of one tenant: its next number, the other's untouched.
    usage(&mut conn, a, a1, 60, "2.49");
    tokio::time::sleep(Duration::from_millis(5)).await;
    let end2 = Utc::now();
    let next = run_all(&db, end2).await;
    assert_eq!(next.invoices.len(), 1);
    assert_eq!(next.invoices[0].tenant_id, a);
    assert_eq!(next.invoices[0].number, Some(2));
    assert_eq!(next.invoices[0].period_start, end.trunc_subsecs_6());
    assert_eq!(
        count(
            &mut conn,
            "SELECT count(*) AS n FROM billing.transactions t WHERE t.kind = 'usage' \
             AND NOT EXISTS (SELECT 1 FROM billing.invoice_items i WHERE i.transaction_id = t.id)"
        ),
        0
    );
    // Every ledger transaction balances, the rounding postings included.
    assert_eq!(
        count(
            &mut conn,
            "SELECT count(*) AS n FROM (SELECT 1 FROM billing.entries \
             GROUP BY transaction_id HAVING sum(amount) <> 0) t"
        ),
        0
    );
    assert_eq!(
        count(
            &mut conn,
            "SELECT count(*) AS n FROM billing.accounts a WHERE a.balance <> \
             (SELECT coalesce(sum(e.amount), 0) FROM billing.entries e WHERE e.account_id = a.id)"
        ),
        0
    );
}

trait Micros {
    fn trunc_subsecs_6(self) -> Self;
}

impl Micros for chrono::DateTime<Utc> {
    fn trunc_subsecs_6(self) -> Self {
        chrono::SubsecRound::trunc_subsecs(self, 6)
    }
}

#[test]
fn sql_half_even_rounding_is_round_to_minor() {
    let test = TestDb::new("half_even");
    let mut conn = test.conn();
    #[derive(QueryableByName)]
    struct Rounded {
        #[diesel(sql_type = diesel::sql_types::Numeric)]
        r: Decimal,
    }
    let mut values: Vec<Decimal> = [
        "0.005",
        "0.015",
        "0.025",
        "-0.005",
        "-0.015",
        "-0.025",
        "0.0050001",
        "0.0049999",
        "2.5",
        "3.5",
        "-2.5",
        "0.0005",
        "0.0015",
        "1.000000001",
        "0",
        "-0.000000001",
        "12345.125",
        "12345.135",
    ]
    .iter()
    .map(|v| v.parse().expect("decimal"))
    .collect();
    // And a spread of 9-decimal amounts, as the ledger keeps them.
    let mut x: i64 = 88_172_645_463_325_252;
    for _ in 0..300 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        values.push(Decimal::new(x % 10_000_000_000_000, 9));
        values.push(Decimal::new((x % 1000) * 5_000_000, 9));
    }
    for currency in ["USD", "JPY", "KWD"] {
        let digits = money::minor_unit_digits(currency);
        for v in &values {
            let sql = format!(
                "SELECT {} AS r",
                invoices::half_even_sql(&format!("({v}::numeric)"), digits)
            );
            let got = diesel::sql_query(sql)
                .get_result::<Rounded>(&mut conn)
                .expect("round");
            assert_eq!(got.r, money::round_to_minor(*v, currency), "{v} {currency}");
        }
    }
}
