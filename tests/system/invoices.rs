//! Renters' invoices end to end: a settled rental is invoiced once, its line
//! the rounded sum of its postings and the residue on the rounding account;
//! finalizing is idempotent and numbers have no gaps; usage that reaches the
//! ledger after finalization lands on the next invoice; a finalized invoice
//! cannot be edited; the FOCUS export adds up to the invoice; another tenant
//! sees none of it.

use contracts::ids::{InstanceId, TenantId};
use std::time::Duration;

use chrono::{DateTime, Utc};
use contracts::events::UsageRecorded;
use contracts::{Envelope, money};
use diesel::{Connection, RunQueryDsl};
use gpumarket::dev::Parts;
use rust_decimal::Decimal;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::harness::*;

const INVOICE: &str = "id number status periodStart periodEnd total subtotal exactTotal rounding
    lines { instanceId meter quantitySeconds unit unitPricePerHour earlierPeriod postings exactAmount amount }";

/// The exact sum of the renter's usage legs.
fn charged(env: &TestEnv, tenant: &str) -> Decimal {
    sql_decimal(
        env,
        &format!(
            "SELECT coalesce(-sum(e.amount), 0) AS d FROM billing.transactions t \
             JOIN billing.entries e ON e.transaction_id = t.id \
             JOIN billing.accounts a ON a.id = e.account_id \
             WHERE t.kind = 'usage' AND a.kind = 'renter_balance' AND a.tenant_id = '{tenant}'"
        ),
    )
}

async fn run_invoices(
    operator: &gpumarket::client::Client,
    end: DateTime<Utc>,
    tenant: Option<&str>,
) -> Value {
    operator
        .run(
            &format!(
                "mutation($e: String, $t: ID) {{ runInvoices(periodEnd: $e, tenantId: $t) {{ periodEnd invoices {{ {INVOICE} }} }} }}"
            ),
            json!({ "e": end.to_rfc3339(), "t": tenant }),
        )
        .await
        .expect("runInvoices")["runInvoices"]
        .clone()
}

fn only_invoice_of(run: &Value, total_invoices: usize) -> Value {
    let invoices = run["invoices"].as_array().expect("invoices");
    assert_eq!(invoices.len(), total_invoices, "{run}");
    invoices[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_is_invoiced_once_rounded_numbered_without_gaps_and_exported_in_focus() {
    let mut env = TestEnv::new().await;
    env.settlement_interval_ms(300);
    // 999.97 an hour: a second costs 0.277769444..., so the ledger holds
    // amounts far below the cent and the invoice has to round.
    let Rental {
        env,
        stack,
        renter,
        tenant,
        operator,
        offer,
    } = rental(env, Parts::ALL, "RTX 4090", 1, "999.97", "1000").await;
    let price: Decimal = "999.97".parse().expect("price");
    let id = running_instance(&renter, &offer, 1, "invoiced").await;
    eventually("settled while running", Duration::from_secs(30), || async {
        (env.count(&format!(
            "SELECT count(*) AS n FROM billing.transactions WHERE kind = 'usage' AND tenant_id = '{tenant}'"
        )) >= 2)
            .then_some(())
    })
    .await;
    let stopped = renter
        .run(
            "mutation($id: ID!) { stopInstance(id: $id) { runningAt stoppedAt } }",
            json!({ "id": id }),
        )
        .await
        .expect("stop")["stopInstance"]
        .clone();
    let instant =
        |v: &Value| -> DateTime<Utc> { v.as_str().expect("instant").parse().expect("instant") };
    let run_seconds = money::billed_seconds(
        instant(&stopped["runningAt"]).timestamp_micros(),
        instant(&stopped["stoppedAt"]).timestamp_micros(),
    );
    let whole = money::rate(run_seconds, price);
    eventually("run settled in full", Duration::from_secs(30), || async {
        let recorded = env.count(&format!(
            "SELECT count(*) AS n FROM metering.intervals WHERE instance_id = '{id}' AND recorded_at IS NOT NULL"
        ));
        (recorded == 1 && charged(&env, &tenant) == whole).then_some(())
    })
    .await;
    let exact = charged(&env, &tenant);
    assert_eq!(exact, whole);
    assert!(exact > Decimal::ZERO);

    // The preview shows what the invoice will hold, and stores nothing.
    let preview = renter
        .run(
            "{ invoicePreview { total exactTotal rounding lines { amount postings } } }",
            json!({}),
        )
        .await
        .expect("preview")["invoicePreview"]
        .clone();
    assert_eq!(dec(&preview["exactTotal"]), exact);
    assert_eq!(dec(&preview["total"]), money::round_to_minor(exact, "USD"));
    assert_eq!(env.count("SELECT count(*) AS n FROM billing.invoices"), 0);

    // Period 1.
    let end1 = Utc::now();
    let first = only_invoice_of(&run_invoices(&operator, end1, Some(&tenant)).await, 1);
    assert_eq!(first["number"], 1);
    assert_eq!(first["status"], "paid", "the prepaid balance covered it");
    let lines = first["lines"].as_array().expect("lines");
    assert_eq!(lines.len(), 1, "{first}");
    let line = &lines[0];
    assert_eq!(line["instanceId"], id.as_str());
    assert_eq!(line["meter"], "gpu");
    assert_eq!(line["unit"], "second");
    assert_eq!(dec(&line["unitPricePerHour"]), price);
    assert_eq!(line["earlierPeriod"], false);
    assert!(line["postings"].as_i64().expect("postings") >= 2);
    assert_eq!(dec(&line["exactAmount"]), exact);
    let total1 = money::round_to_minor(exact, "USD");
    assert_eq!(dec(&line["amount"]), total1);
    assert_eq!(dec(&first["total"]), total1);
    assert_eq!(dec(&first["subtotal"]), total1);
    assert_eq!(dec(&first["rounding"]), total1 - exact);
    // A second at 999.97/h is not a whole number of cents: there is a residue.
    assert_ne!(total1, exact);
    // Seconds billed are the seconds rated.
    let seconds = line["quantitySeconds"].as_i64().expect("seconds");
    assert_eq!(money::rate(seconds, price), exact);

    // The residue is on the rounding account, the renter paid the invoice to
    // the cent, every posting balances, every posting is on the invoice.
    assert_eq!(
        sql_decimal(
            &env,
            "SELECT balance AS d FROM billing.accounts WHERE kind = 'rounding'"
        ),
        total1 - exact
    );
    let balance = renter
        .run("{ balance { amount } }", json!({}))
        .await
        .expect("balance");
    assert_eq!(
        dec(&balance["balance"]["amount"]),
        Decimal::from(1000) - total1
    );
    assert_eq!(
        env.count(
            "SELECT count(*) AS n FROM (SELECT 1 FROM billing.entries GROUP BY transaction_id HAVING sum(amount) <> 0) t"
        ),
        0
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM billing.transactions t WHERE t.kind = 'usage' AND t.tenant_id = '{tenant}' \
               AND NOT EXISTS (SELECT 1 FROM billing.invoice_items i WHERE i.transaction_id = t.id)"
        )),
        0
    );

    // Finalizing again, for the tenant or for everyone, is the same invoice.
    let again = only_invoice_of(&run_invoices(&operator, end1, Some(&tenant)).await, 1);
    assert_eq!(again, first);
    let everyone = only_invoice_of(&run_invoices(&operator, end1, None).await, 1);
    assert_eq!(everyone, first);
    assert_eq!(env.count("SELECT count(*) AS n FROM billing.invoices"), 1);

    // A finalized invoice cannot be edited, its lines and postings neither.
    let invoice_id = first["id"].as_str().expect("invoice id").to_owned();
    for edit in [
        format!("UPDATE billing.invoices SET total = 0 WHERE id = '{invoice_id}'"),
        format!("UPDATE billing.invoices SET status = 'finalized' WHERE id = '{invoice_id}'"),
        format!("DELETE FROM billing.invoices WHERE id = '{invoice_id}'"),
        format!("UPDATE billing.invoice_lines SET amount = 0 WHERE invoice_id = '{invoice_id}'"),
        format!("DELETE FROM billing.invoice_items WHERE invoice_id = '{invoice_id}'"),
        format!(
            "INSERT INTO billing.invoice_lines (invoice_id, position, instance_id, meter, quantity, unit, \
               unit_price_per_hour, earlier_period, charge_period_start, charge_period_end, postings, \
               exact_amount, amount) \
             VALUES ('{invoice_id}', 9, '{id}', 'gpu', 1, 'second', 1, false, now(), now(), 1, 1, 1)"
        ),
    ] {
        let refused = diesel::sql_query(&edit).execute(&mut env.conn());
        assert!(refused.is_err(), "{edit} was accepted");
    }

    // Usage of period 1 that reaches the ledger only now (a late delivery):
    // it is billed on the next invoice, as a delta.
    let host: Uuid = {
        #[derive(diesel::QueryableByName)]
        struct T {
            #[diesel(sql_type = diesel::sql_types::Uuid)]
            tenant_id: Uuid,
        }
        let rows: Vec<T> = diesel::sql_query(
            "SELECT tenant_id FROM billing.accounts WHERE kind = 'host_earnings'",
        )
        .load(&mut env.conn())
        .expect("host");
        rows[0].tenant_id
    };
    let late = UsageRecorded {
        interval_id: Uuid::now_v7(),
        instance_id: id.parse().expect("uuid"),
        tenant_id: tenant.parse().expect("uuid"),
        host_tenant_id: TenantId(host),
        meter: contracts::states::Meter::Gpu,
        started_at: end1 - chrono::Duration::seconds(10),
        ended_at: end1 - chrono::Duration::seconds(8),
        seconds: 2,
        price_per_hour: price,
        currency: "USD".into(),
        offset_seconds: 0,
        machine_id: None,
        gpu_model: None,
    };
    let envelope = Envelope::new(
        contracts::events::kinds::USAGE_RECORDED,
        late.ended_at,
        Some(late.tenant_id),
        None,
        &contracts::events::MeteredUsage::from(late.clone()),
    )
    .expect("envelope");
    let settings = billing::Settings::from_config(&env.config).expect("settings");
    env.conn()
        .transaction::<_, diesel::result::Error, _>(|c| {
            billing::apply_event(c, &envelope, &settings)
                .map_err(|e| diesel::result::Error::QueryBuilderError(e.to_string().into()))
        })
        .expect("late usage");
    let late_amount = money::rate(2, price);

    let preview = renter
        .run(
            "{ invoicePreview { total lines { earlierPeriod exactAmount } } }",
            json!({}),
        )
        .await
        .expect("preview")["invoicePreview"]
        .clone();
    assert_eq!(preview["lines"][0]["earlierPeriod"], true, "{preview}");
    assert_eq!(dec(&preview["lines"][0]["exactAmount"]), late_amount);

    // An end before the last invoiced one is refused; none is created.
    let refused = operator
        .run(
            "mutation($e: String, $t: ID) { runInvoices(periodEnd: $e, tenantId: $t) { periodEnd } }",
            json!({ "e": (end1 - chrono::Duration::seconds(1)).to_rfc3339(), "t": tenant }),
        )
        .await
        .expect_err("an earlier period end");
    assert_eq!(refused.code, "CONFLICT");

    // Period 2: number 2, no gap, the delta line.
    let end2 = Utc::now();
    let second = only_invoice_of(&run_invoices(&operator, end2, Some(&tenant)).await, 1);
    assert_eq!(second["number"], 2);
    assert_eq!(second["periodStart"], first["periodEnd"]);
    let lines = second["lines"].as_array().expect("lines");
    assert_eq!(lines.len(), 1, "{second}");
    assert_eq!(lines[0]["earlierPeriod"], true);
    assert_eq!(lines[0]["quantitySeconds"], 2);
    assert_eq!(dec(&lines[0]["exactAmount"]), late_amount);
    assert_eq!(
        dec(&second["total"]),
        money::round_to_minor(late_amount, "USD")
    );
    assert_eq!(
        sql_decimal(
            &env,
            "SELECT balance AS d FROM billing.accounts WHERE kind = 'rounding'"
        ),
        (total1 - exact) + (dec(&second["total"]) - late_amount)
    );

    // The renter's list, newest first; the first invoice is unchanged.
    let listed = renter
        .run(&format!("{{ invoices {{ {INVOICE} }} }}"), json!({}))
        .await
        .expect("invoices")["invoices"]
        .clone();
    assert_eq!(listed.as_array().map(Vec::len), Some(2));
    assert_eq!(listed[0]["number"], 2);
    assert_eq!(listed[1], first);
    let one = renter
        .run(
            &format!("query($id: ID!) {{ invoice(id: $id) {{ {INVOICE} }} }}"),
            json!({ "id": invoice_id }),
        )
        .await
        .expect("invoice")["invoice"]
        .clone();
    assert_eq!(one, first);

    // The FOCUS export: one row per line, BilledCost adds up to the total.
    let csv = renter
        .run(
            "query($id: ID!) { invoiceUsageCsv(invoiceId: $id) }",
            json!({ "id": invoice_id }),
        )
        .await
        .expect("csv")["invoiceUsageCsv"]
        .as_str()
        .expect("csv text")
        .to_owned();
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows.len(), 2, "{csv}");
    let header: Vec<&str> = rows[0].split(',').collect();
    assert_eq!(header, billing::focus::COLUMNS.to_vec());
    assert_eq!(billing::focus::billed_cost_sum(&csv), Some(total1));
    let row: Vec<&str> = rows[1].split(',').collect();
    assert_eq!(
        row[header
            .iter()
            .position(|c| *c == "ChargeCategory")
            .expect("col")],
        "Usage"
    );
    assert_eq!(
        row[header.iter().position(|c| *c == "ResourceId").expect("col")],
        id
    );
    assert_eq!(
        row[header
            .iter()
            .position(|c| *c == "SubAccountId")
            .expect("col")],
        tenant
    );
    assert_eq!(
        row[header
            .iter()
            .position(|c| *c == "ConsumedQuantity")
            .expect("col")],
        seconds.to_string()
    );

    // Another renter sees none of it.
    let api = gpumarket::client::Client::new(&stack.gateway_url);
    let (stranger, _) = sign_up(&api, &["RENTER"]).await;
    for query in [
        format!("{{ invoice(id: \"{invoice_id}\") {{ id }} }}"),
        format!("{{ invoiceUsageCsv(invoiceId: \"{invoice_id}\") }}"),
    ] {
        let error = stranger
            .run(&query, json!({}))
            .await
            .expect_err("not theirs");
        assert_eq!(error.code, "NOT_FOUND", "{query}");
    }
    let theirs = stranger
        .run("{ invoices { id } }", json!({}))
        .await
        .expect("their invoices");
    assert_eq!(theirs["invoices"], json!([]));
    // And only an operator runs invoicing.
    let error = renter
        .run("mutation { runInvoices { periodEnd } }", json!({}))
        .await
        .expect_err("not an operator");
    assert_eq!(error.code, "FORBIDDEN");

    // Refunds and SLA credits are credit notes: numbered, posted to the
    // renter's balance by the platform, the invoice untouched.
    let balance_of = || async {
        let b = renter
            .run("{ balance { amount } }", json!({}))
            .await
            .expect("balance");
        dec(&b["balance"]["amount"])
    };
    let before = balance_of().await;
    let credit = |amount: &str, key: &str| {
        let operator = operator.clone();
        let (invoice_id, amount, key) = (invoice_id.clone(), amount.to_owned(), key.to_owned());
        async move {
            operator
                .run(
                    "mutation($i: ID!, $a: Decimal!, $k: String!) { issueCreditNote(invoiceId: $i, amount: $a, \
                       reason: \"SLA credit: 20 minutes of downtime\", idempotencyKey: $k) { id number amount invoiceId } }",
                    json!({ "i": invoice_id, "a": amount, "k": key }),
                )
                .await
                .map(|d| d["issueCreditNote"].clone())
        }
    };
    let note = credit("0.10", "sla-1").await.expect("credit note");
    assert_eq!(note["number"], 1);
    assert_eq!(
        dec(&note["amount"]),
        "0.10".parse::<Decimal>().expect("amount")
    );
    assert_eq!(note["invoiceId"], invoice_id.as_str());
    assert_eq!(credit("0.10", "sla-1").await.expect("same key"), note);
    assert_eq!(
        balance_of().await,
        before + "0.10".parse::<Decimal>().expect("amount")
    );
    let too_much = credit(&total1.to_string(), "sla-2")
        .await
        .expect_err("beyond the invoice");
    assert_eq!(too_much.code, "VALIDATION");
    let credited = renter
        .run(
            &format!("query($id: ID!) {{ invoice(id: $id) {{ {INVOICE} creditNotes {{ number amount reason }} }} }}"),
            json!({ "id": invoice_id }),
        )
        .await
        .expect("invoice")["invoice"]
        .clone();
    assert_eq!(credited["total"], first["total"]);
    assert_eq!(credited["lines"], first["lines"]);
    assert_eq!(credited["creditNotes"][0]["number"], 1);
    // The FOCUS export carries the credit note as a negative `Credit` row:
    // its BilledCost now adds up to what the renter was finally charged.
    let csv = renter
        .run(
            "query($id: ID!) { invoiceUsageCsv(invoiceId: $id) }",
            json!({ "id": invoice_id }),
        )
        .await
        .expect("csv")["invoiceUsageCsv"]
        .as_str()
        .expect("csv text")
        .to_owned();
    assert_eq!(csv.lines().count(), 3, "{csv}");
    assert!(csv.contains(",Credit,credit note 1: "), "{csv}");
    assert_eq!(
        billing::focus::billed_cost_sum(&csv),
        Some(total1 - "0.10".parse::<Decimal>().expect("amount"))
    );

    // Voiding gives back what was not credited yet (credit note 2, no gap).
    let second_id = second["id"].as_str().expect("id").to_owned();
    let before = balance_of().await;
    let void = |id: String| {
        let operator = operator.clone();
        async move {
            operator
                .run(
                    "mutation($id: ID!) { voidInvoice(id: $id, reason: \"issued in error\") { status voidReason total creditNotes { number amount } } }",
                    json!({ "id": id }),
                )
                .await
                .expect("void")["voidInvoice"]
                .clone()
        }
    };
    let voided = void(second_id.clone()).await;
    assert_eq!(voided["status"], "void");
    assert_eq!(voided["voidReason"], "issued in error");
    assert_eq!(voided["creditNotes"][0]["number"], 2);
    assert_eq!(
        dec(&voided["creditNotes"][0]["amount"]),
        dec(&second["total"])
    );
    assert_eq!(balance_of().await, before + dec(&second["total"]));
    assert_eq!(
        void(second_id.clone()).await,
        voided,
        "voiding again changes nothing"
    );
    assert_eq!(
        env.count(
            "SELECT count(*) AS n FROM (SELECT 1 FROM billing.entries GROUP BY transaction_id HAVING sum(amount) <> 0) t"
        ),
        0
    );
    assert!(
        diesel::sql_query("UPDATE billing.credit_notes SET amount = 1")
            .execute(&mut env.conn())
            .is_err()
    );

    // Marking paid: a paid invoice stays as it is, a void one cannot be paid.
    let mark_paid = |id: String| {
        let operator = operator.clone();
        async move {
            operator
                .run(
                    "mutation($id: ID!) { markInvoicePaid(id: $id) { number status } }",
                    json!({ "id": id }),
                )
                .await
        }
    };
    let paid = mark_paid(invoice_id.clone()).await.expect("already paid");
    assert_eq!(paid["markInvoicePaid"]["status"], "paid");
    let refused = mark_paid(second_id.clone()).await.expect_err("void");
    assert_eq!(refused.code, "CONFLICT");

    stack.stop().await;
    assert_invoices_announced(&env);
    env.cleanup().await;
}

/// Finalizations of one tenant racing each other (different period ends in
/// any order, each twice) still number invoices 1..n without gaps, with
/// contiguous periods, one invoice per period end, and every posting on
/// exactly one invoice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_finalizations_number_without_gaps_and_assign_each_posting_once() {
    use billing::invoices::{InvoicePeriod, finalize_period};

    let env = TestEnv::new().await;
    let settings = billing::Settings::from_config(&env.config).expect("settings");
    let db = platform::Db::connect(&env.config.database_url, 4).expect("db");
    let (tenant, host) = (Uuid::now_v7(), Uuid::now_v7());
    let instances = [Uuid::now_v7(), Uuid::now_v7()];
    let price: Decimal = "2.49".parse().expect("price");
    let mut ends = Vec::new();
    let mut conn = env.conn();
    for i in 0..6i64 {
        let usage = UsageRecorded {
            interval_id: Uuid::now_v7(),
            instance_id: InstanceId(instances[(i % 2) as usize]),
            tenant_id: TenantId(tenant),
            host_tenant_id: TenantId(host),
            meter: contracts::states::Meter::Gpu,
            started_at: Utc::now(),
            ended_at: Utc::now(),
            seconds: 7 + i * 13,
            price_per_hour: price,
            currency: "USD".into(),
            offset_seconds: 0,
            machine_id: None,
            gpu_model: None,
        };
        let envelope = Envelope::new(
            contracts::events::kinds::USAGE_RECORDED,
            usage.ended_at,
            Some(TenantId(tenant)),
            None,
            &contracts::events::MeteredUsage::from(usage.clone()),
        )
        .expect("envelope");
        conn.transaction::<_, diesel::result::Error, _>(|c| {
            billing::apply_event(c, &envelope, &settings)
                .map_err(|e| diesel::result::Error::QueryBuilderError(e.to_string().into()))
        })
        .expect("usage");
        tokio::time::sleep(Duration::from_millis(5)).await;
        ends.push(Utc::now());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // Every end twice, latest first for half of them: some runs find the
    // tenant invoiced past their end (CONFLICT), none may leave a gap.
    let order = [5usize, 1, 3, 0, 4, 2, 2, 0, 5, 1, 4, 3];
    let mut tasks = Vec::new();
    for i in order {
        let (db, settings, end) = (db.clone(), settings.clone(), ends[i]);
        tasks.push(tokio::spawn(async move {
            (
                i,
                finalize_period(
                    &db,
                    &settings,
                    InvoicePeriod::Monthly,
                    TenantId(tenant),
                    end,
                )
                .await,
            )
        }));
    }
    let mut by_end: std::collections::HashMap<usize, Uuid> = std::collections::HashMap::new();
    for task in tasks {
        let (i, result) = task.await.expect("join");
        match result {
            Ok(Some(invoice)) => {
                let id = invoice.id.expect("stored");
                assert_eq!(
                    *by_end.entry(i).or_insert(id.into()),
                    id,
                    "one invoice per end"
                );
            }
            Ok(None) => panic!("end {i} had usage to invoice"),
            Err(billing::Error::Conflict(_)) => {}
            Err(e) => panic!("end {i}: {e}"),
        }
    }
    assert!(!by_end.is_empty());

    #[derive(diesel::QueryableByName)]
    struct Row {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        number: i64,
        #[diesel(sql_type = diesel::sql_types::Timestamptz)]
        period_start: DateTime<Utc>,
        #[diesel(sql_type = diesel::sql_types::Timestamptz)]
        period_end: DateTime<Utc>,
    }
    let rows: Vec<Row> = diesel::sql_query(format!(
        "SELECT number, period_start, period_end FROM billing.invoices \
         WHERE tenant_id = '{tenant}' ORDER BY number"
    ))
    .load(&mut conn)
    .expect("invoices");
    assert_eq!(rows.len(), by_end.len());
    for (k, row) in rows.iter().enumerate() {
        assert_eq!(row.number, k as i64 + 1, "numbers without gaps");
        if k > 0 {
            assert_eq!(
                row.period_start,
                rows[k - 1].period_end,
                "contiguous periods"
            );
        }
    }
    // Every posting before the last invoiced end is on exactly one invoice,
    // and the invoices' exact totals are the ledger's sum.
    let last_end = rows.last().expect("an invoice").period_end;
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM billing.transactions t WHERE t.tenant_id = '{tenant}' \
               AND t.kind = 'usage' AND t.created_at < '{}' \
               AND NOT EXISTS (SELECT 1 FROM billing.invoice_items i WHERE i.transaction_id = t.id)",
            last_end.to_rfc3339()
        )),
        0
    );
    assert_eq!(
        sql_decimal(
            &env,
            &format!(
                "SELECT sum(exact_total) AS d FROM billing.invoices WHERE tenant_id = '{tenant}'"
            )
        ),
        sql_decimal(
            &env,
            &format!(
                "SELECT -sum(e.amount) AS d FROM billing.invoice_items i \
                 JOIN billing.entries e ON e.transaction_id = i.transaction_id \
                 JOIN billing.accounts a ON a.id = e.account_id AND a.kind = 'renter_balance' \
                 JOIN billing.invoices v ON v.id = i.invoice_id WHERE v.tenant_id = '{tenant}'"
            )
        )
    );
    assert_eq!(
        env.count(
            "SELECT count(*) AS n FROM (SELECT 1 FROM billing.entries GROUP BY transaction_id HAVING sum(amount) <> 0) t"
        ),
        0
    );
    assert_invoices_announced(&env);
    env.cleanup().await;
}

/// Renters are prepaid: an invoice finalized while the tenant was overdrawn
/// stays open until a credit brings the balance back to zero or above, and
/// that credit pays it in its own transaction; a credit that leaves the
/// balance negative pays nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credit_that_covers_an_overdraft_pays_the_open_invoices() {
    let env = TestEnv::new().await;
    let stack = env.start(Parts::ALL).await;
    let api = gpumarket::client::Client::new(&stack.gateway_url);
    let (renter, tenant) = sign_up(&api, &["RENTER"]).await;
    let operator = env.operator(&api).await;
    let settings = billing::Settings::from_config(&env.config).expect("settings");
    let tenant_id: Uuid = tenant.parse().expect("tenant id");
    // An hour at 1.00: the renter, with no credit, is 1.00 overdrawn.
    let start = Utc::now() - chrono::Duration::hours(2);
    let usage = UsageRecorded {
        interval_id: Uuid::now_v7(),
        instance_id: InstanceId(Uuid::now_v7()),
        tenant_id: TenantId(tenant_id),
        host_tenant_id: TenantId(Uuid::now_v7()),
        meter: contracts::states::Meter::Gpu,
        started_at: start,
        ended_at: start + chrono::Duration::hours(1),
        seconds: 3600,
        price_per_hour: Decimal::ONE,
        currency: "USD".into(),
        offset_seconds: 0,
        machine_id: None,
        gpu_model: None,
    };
    let envelope = Envelope::new(
        contracts::events::kinds::USAGE_RECORDED,
        usage.ended_at,
        Some(TenantId(tenant_id)),
        None,
        &contracts::events::MeteredUsage::from(usage.clone()),
    )
    .expect("envelope");
    env.conn()
        .transaction::<_, diesel::result::Error, _>(|c| {
            billing::apply_event(c, &envelope, &settings)
                .map_err(|e| diesel::result::Error::QueryBuilderError(e.to_string().into()))
        })
        .expect("usage");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let run = run_invoices(&operator, Utc::now(), Some(&tenant)).await;
    let invoice = only_invoice_of(&run, 1);
    assert_eq!(invoice["status"], "finalized", "{invoice}");
    let id = invoice["id"].as_str().expect("id").to_owned();
    let status = || {
        let renter = renter.clone();
        let id = id.clone();
        async move {
            renter
                .run(
                    "query($id: ID!) { invoice(id: $id) { status paidAt } }",
                    json!({ "id": id }),
                )
                .await
                .expect("invoice")["invoice"]
                .clone()
        }
    };

    grant(&operator, &tenant, "0.40").await;
    assert_eq!(
        status().await["status"],
        "finalized",
        "still 0.60 overdrawn"
    );
    grant(&operator, &tenant, "0.60").await;
    let paid = status().await;
    assert_eq!(paid["status"], "paid", "{paid}");
    assert!(paid["paidAt"].is_string());

    stack.stop().await;
    assert_invoices_announced(&env);
    env.cleanup().await;
}

/// Every finalized invoice was announced once as finalized, and every paid
/// one once as paid (renters' webhooks), whichever way it got there.
pub fn assert_invoices_announced(env: &TestEnv) {
    for (kind, status) in [
        ("billing.invoice.finalized", "finalized_at IS NOT NULL"),
        ("billing.invoice.paid", "paid_at IS NOT NULL"),
    ] {
        let announced = env.count(&format!(
            "SELECT count(*) AS n FROM (SELECT DISTINCT body->'payload'->>'invoice_id' FROM billing.outbox \
             WHERE routing_key = '{kind}') a"
        ));
        let rows = env.count(&format!(
            "SELECT count(*) AS n FROM billing.outbox WHERE routing_key = '{kind}'"
        ));
        let invoices = env.count(&format!(
            "SELECT count(*) AS n FROM billing.invoices WHERE {status}"
        ));
        assert_eq!((announced, rows), (invoices, invoices), "{kind}");
    }
    // Numbered per invoice (webhook ordering): finalized 1, paid 2.
    env.assert_sequenced(
        "billing",
        &["billing.invoice.finalized", "billing.invoice.paid"],
        "'invoice:' || (body->'payload'->>'invoice_id')",
    );
    for (kind, sequence) in [
        ("billing.invoice.finalized", 1),
        ("billing.invoice.paid", 2),
    ] {
        assert_eq!(
            env.count(&format!(
                "SELECT count(*) AS n FROM billing.outbox WHERE routing_key = '{kind}' \
                 AND (body->'payload'->>'sequence')::bigint <> {sequence}"
            )),
            0,
            "{kind}"
        );
    }
}
