#![allow(clippy::expect_used, clippy::unwrap_used)] // Tests: a failed expectation is the failure.

//! Reserved blocks' escrow against a real database: a charge under the
//! balance lock (idempotent, refused without funds or past the budget),
//! releases on heartbeat evidence (silent seconds back to the holder of
//! each hour, one chunk per holder), a resale moving the refunds of its
//! hours to the buyer, a host's cancellation with its penalty, the refusal
//! without evidence, conservation in the rows and the ledger, and the
//! reservation lines on the renter's invoice, the host's statement and the
//! FOCUS export.

use std::time::Duration;

use billing::escrow::{self, EscrowTerms, Evidence, Gap};
use billing::invoices::{self, InvoicePeriod};
use billing::ledger::{self, AccountKind, Posting};
use chrono::{DateTime, TimeZone, Utc};
use contracts::ErrorCode;
use contracts::ids::{MachineId, ResaleListingId, ReservationId, TenantId};
use contracts::reservations::{
    EscrowCancelRequest, EscrowChargeRequest, EscrowQuery, EscrowState, ResaleTransferRequest,
};
use diesel::{Connection, PgConnection, QueryableByName, RunQueryDsl};
use gpumarket_billing as billing;
use rust_decimal::Decimal;
use uuid::Uuid;

mod common;
use common::{TestDb, settings};

fn d(s: &str) -> Decimal {
    s.parse().unwrap()
}

fn terms() -> EscrowTerms {
    EscrowTerms {
        penalty_rate: d("0.10"),
        resale_fee_rate: d("0.05"),
        settle_lag: chrono::Duration::seconds(120),
        interval: Duration::from_secs(10),
    }
}

/// Evidence as the test says.
struct Fake(Result<Vec<Gap>, String>);

impl Evidence for Fake {
    async fn gaps(
        &self,
        _: MachineId,
        _: TenantId,
        _: DateTime<Utc>,
        _: DateTime<Utc>,
    ) -> Result<Vec<Gap>, String> {
        self.0.clone()
    }
}

/// Credits a tenant's balance (as an operator's grant posts it).
fn fund(conn: &mut PgConnection, tenant: TenantId, amount: &str) {
    conn.transaction::<_, diesel::result::Error, _>(|c| {
        let renter = ledger::account(c, AccountKind::RenterBalance, Some(tenant.0), "USD")?;
        let clearing = ledger::account(c, AccountKind::PaymentClearing, None, "USD")?;
        let id = format!("credit:{tenant}:{}", Uuid::now_v7());
        ledger::post(
            c,
            &Posting {
                id: &id,
                kind: "credit",
                tenant_id: Some(tenant.0),
                instance_id: None,
                fee_rate: None,
                description: "test credit",
                legs: &[(clearing, -d(amount)), (renter, d(amount))],
            },
        )?;
        Ok(())
    })
    .expect("fund");
}

fn balance(conn: &mut PgConnection, kind: AccountKind, tenant: Option<TenantId>) -> Decimal {
    #[derive(QueryableByName)]
    struct B {
        #[diesel(sql_type = diesel::sql_types::Numeric)]
        b: Decimal,
    }
    let filter = match tenant {
        Some(t) => format!("tenant_id = '{t}'"),
        None => "tenant_id IS NULL".into(),
    };
    diesel::sql_query(format!(
        "SELECT coalesce(sum(balance), 0) AS b FROM billing.accounts WHERE kind = '{}' AND {filter}",
        kind.as_str()
    ))
    .get_result::<B>(conn)
    .expect("balance")
    .b
}

fn charge(
    conn: &mut PgConnection,
    req: &EscrowChargeRequest,
    budget: Option<Option<Decimal>>,
    now: DateTime<Utc>,
) -> Result<contracts::reservations::Escrow, billing::Error> {
    conn.transaction(|c| escrow::charge::charge_in(c, &settings(), req, budget, now))
}

fn resale(
    conn: &mut PgConnection,
    req: &ResaleTransferRequest,
    now: DateTime<Utc>,
) -> Result<contracts::reservations::ResaleTransfer, billing::Error> {
    conn.transaction(|c| {
        escrow::resale::transfer_in(c, &settings(), &terms(), req, Some(None), now)
    })
}

fn block(
    renter: TenantId,
    host: TenantId,
    start: DateTime<Utc>,
    hours: i64,
    price: &str,
) -> EscrowChargeRequest {
    let price = d(price);
    EscrowChargeRequest {
        reservation_id: ReservationId::new(),
        renter_tenant_id: renter,
        host_tenant_id: host,
        machine_id: MachineId(Uuid::from_u128(9)),
        gpu_count: 2,
        starts_at: start,
        ends_at: start + chrono::Duration::hours(hours),
        price_per_gpu_hour: price,
        amount: price * Decimal::from(2 * hours),
        currency: "USD".into(),
    }
}

fn code(result: Result<impl std::fmt::Debug, billing::Error>) -> ErrorCode {
    result.expect_err("refused").code()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escrow_is_charged_released_resold_and_conserved() {
    let test = TestDb::new("escrow");
    let db = platform::Db::connect(test.url(), 4).expect("db");
    let mut conn = test.conn();
    let (renter, host, buyer) = (TenantId::new(), TenantId::new(), TenantId::new());
    let start = Utc.with_ymd_and_hms(2030, 1, 7, 10, 0, 0).unwrap();
    let at = |seconds: i64| start + chrono::Duration::seconds(seconds);
    fund(&mut conn, renter, "100");
    fund(&mut conn, buyer, "10");

    // The charge: 1.234567891 × 2 GPUs × 3 h.
    let req = block(renter, host, start, 3, "1.234567891");
    assert_eq!(req.amount, d("7.407407346"));
    let e = charge(&mut conn, &req, Some(None), at(-3600)).expect("charge");
    assert_eq!(e.state, EscrowState::Held);
    assert_eq!((e.remaining, e.settled_until), (req.amount, start));
    assert_eq!(
        balance(&mut conn, AccountKind::RenterBalance, Some(renter)),
        d("100") - req.amount
    );
    assert_eq!(
        balance(&mut conn, AccountKind::Escrow, Some(renter)),
        req.amount
    );
    // A retry answers the same escrow and charges nothing more; another
    // request under the same id is a conflict.
    assert_eq!(
        charge(&mut conn, &req, Some(None), at(-10)).expect("retry"),
        e
    );
    assert_eq!(
        balance(&mut conn, AccountKind::Escrow, Some(renter)),
        req.amount
    );
    let other = EscrowChargeRequest {
        gpu_count: 1,
        amount: d("3.703703673"),
        ..req.clone()
    };
    assert_eq!(
        code(charge(&mut conn, &other, Some(None), at(-10))),
        ErrorCode::Conflict
    );
    // The amount must be the price of the block exactly; the block must not
    // have started; the balance must cover it; the budget must allow it.
    let wrong = EscrowChargeRequest {
        amount: req.amount + d("0.000000001"),
        ..block(renter, host, start, 3, "1.234567891")
    };
    assert_eq!(
        code(charge(&mut conn, &wrong, Some(None), at(-10))),
        ErrorCode::Validation
    );
    let started = block(renter, host, start, 3, "1");
    assert_eq!(
        code(charge(&mut conn, &started, Some(None), at(1))),
        ErrorCode::Validation
    );
    let big = block(renter, host, start, 3, "50");
    let refused = charge(&mut conn, &big, Some(None), at(-10)).expect_err("no funds");
    assert_eq!(refused.code(), ErrorCode::InsufficientFunds);
    assert!(refused.to_string().contains("300"), "{refused}");
    let capped = block(renter, host, start, 3, "1");
    assert_eq!(
        code(charge(&mut conn, &capped, Some(Some(d("10"))), at(-10))),
        ErrorCode::QuotaExceeded
    );
    assert_eq!(
        balance(&mut conn, AccountKind::RenterBalance, Some(renter)),
        d("100") - req.amount
    );

    // A resale of the last hour to the buyer, half an hour into the block.
    let listing = ResaleTransferRequest {
        listing_id: ResaleListingId::new(),
        escrow_reservation_id: req.reservation_id,
        child_reservation_id: ReservationId::new(),
        buyer_tenant_id: buyer,
        seller_tenant_id: renter,
        amount: d("3"),
        starts_at: at(7200),
        ends_at: at(10800),
    };
    let t = resale(&mut conn, &listing, at(1800)).expect("resale");
    assert_eq!((t.fee, t.seller_credit), (d("0.15"), d("2.85")));
    assert_eq!(resale(&mut conn, &listing, at(1900)).expect("retry"), t);
    assert_eq!(
        balance(&mut conn, AccountKind::RenterBalance, Some(buyer)),
        d("7")
    );
    assert_eq!(balance(&mut conn, AccountKind::Escrow, None), Decimal::ZERO);
    // The same hours again: the renter holds them no more.
    let again = ResaleTransferRequest {
        listing_id: ResaleListingId::new(),
        child_reservation_id: ReservationId::new(),
        ..listing.clone()
    };
    assert_eq!(
        code(resale(&mut conn, &again, at(1900))),
        ErrorCode::Conflict
    );
    // Hours that started, a stranger's escrow, too little money.
    let started = ResaleTransferRequest {
        listing_id: ResaleListingId::new(),
        child_reservation_id: ReservationId::new(),
        starts_at: at(3600),
        ends_at: at(7200),
        ..listing.clone()
    };
    assert_eq!(
        code(resale(&mut conn, &started, at(3700))),
        ErrorCode::Validation
    );
    let stranger = ResaleTransferRequest {
        seller_tenant_id: TenantId::new(),
        ..started.clone()
    };
    assert_eq!(
        code(resale(&mut conn, &stranger, at(1900))),
        ErrorCode::NotFound
    );
    let poor = ResaleTransferRequest {
        amount: d("50"),
        ..started.clone()
    };
    assert_eq!(
        code(resale(&mut conn, &poor, at(1900))),
        ErrorCode::InsufficientFunds
    );

    // Releases. Silent from 10 to 20 minutes in, and from 2.5 h to the end
    // (an open gap).
    let gaps = Fake(Ok(vec![
        Gap {
            started_at: at(600),
            ended_at: Some(at(1200)),
        },
        Gap {
            started_at: at(9000),
            ended_at: None,
        },
    ]));
    let s = settings();
    // Without evidence nothing moves.
    let none = Fake(Err("catalog down".into()));
    let r = escrow::release::release_once(&db, &s, &terms(), &none, at(3600 + 120))
        .await
        .expect("pass");
    assert_eq!((r.escrows, r.skipped), (0, 1));
    // The first hour.
    let r = escrow::release::release_once(&db, &s, &terms(), &gaps, at(3600 + 120))
        .await
        .expect("pass");
    assert_eq!((r.escrows, r.skipped), (1, 0));
    let e = escrow::get(&db, req.reservation_id).await.expect("escrow");
    let block_math = escrow::math::Block::new(req.amount, 10800).unwrap();
    let value = |a: i64, b: i64| block_math.value(escrow::math::Span::new(a, b));
    assert_eq!(e.settled_until, at(3600));
    assert_eq!(e.silent_seconds, 600);
    assert_eq!(e.refunded, value(600, 1200));
    assert_eq!(e.released + e.fees, value(0, 600) + value(1200, 3600));
    assert_eq!(e.amount, e.released + e.fees + e.refunded + e.remaining);
    // The rest: the renter's second hour heard, the buyer's hour silent
    // from 2.5 h on; one chunk per holder.
    let r = escrow::release::release_once(&db, &s, &terms(), &gaps, at(10800 + 120))
        .await
        .expect("pass");
    assert_eq!(r.escrows, 1);
    let e = escrow::get(&db, req.reservation_id).await.expect("escrow");
    assert_eq!(e.state, EscrowState::Settled);
    assert_eq!(e.remaining, Decimal::ZERO);
    assert_eq!(e.released + e.fees + e.refunded, e.amount);
    assert_eq!(e.silent_seconds, 600 + 1800);
    assert_eq!(e.refunded, value(600, 1200) + value(9000, 10800));
    assert_eq!(
        balance(&mut conn, AccountKind::Escrow, Some(renter)),
        Decimal::ZERO
    );
    assert_eq!(
        balance(&mut conn, AccountKind::HostEarnings, Some(host)),
        e.released
    );
    assert_eq!(
        balance(&mut conn, AccountKind::RenterBalance, Some(buyer)),
        d("7") + value(9000, 10800)
    );
    assert_eq!(
        balance(&mut conn, AccountKind::RenterBalance, Some(renter)),
        d("100") - req.amount + d("2.85") + value(600, 1200)
    );
    assert_eq!(
        common::count(
            &mut conn,
            &format!(
                "SELECT count(*) AS n FROM billing.transactions WHERE id LIKE 'escrow:{}:%'",
                req.reservation_id
            )
        ),
        3
    );
    // Nothing more to do.
    let r = escrow::release::release_once(&db, &s, &terms(), &gaps, at(20000))
        .await
        .expect("pass");
    assert_eq!(r.escrows, 0);

    // A second block, cancelled by the host half an hour in; the buyer
    // holds its second hour.
    let start2 = start + chrono::Duration::days(1);
    let at2 = |seconds: i64| start2 + chrono::Duration::seconds(seconds);
    let req2 = block(renter, host, start2, 2, "2.5");
    charge(&mut conn, &req2, Some(None), at2(-60)).expect("charge");
    let listing2 = ResaleTransferRequest {
        listing_id: ResaleListingId::new(),
        escrow_reservation_id: req2.reservation_id,
        child_reservation_id: ReservationId::new(),
        buyer_tenant_id: buyer,
        seller_tenant_id: renter,
        amount: d("4"),
        starts_at: at2(3600),
        ends_at: at2(7200),
    };
    resale(&mut conn, &listing2, at2(-30)).expect("resale");
    let cancel = EscrowCancelRequest {
        at: at2(1800),
        by_host: true,
        reason: "machine unlisted".into(),
    };
    // Without evidence the cancellation is refused and nothing changes.
    let refused = escrow::cancel::cancel(
        &db,
        &s,
        &terms(),
        &none,
        req2.reservation_id,
        cancel.clone(),
        at2(1800),
    )
    .await
    .expect_err("no evidence");
    assert_eq!(refused.code(), ErrorCode::Unavailable);
    assert_eq!(
        escrow::get(&db, req2.reservation_id).await.unwrap().state,
        EscrowState::Held
    );
    let (renter_before, buyer_before, host_before) = (
        balance(&mut conn, AccountKind::RenterBalance, Some(renter)),
        balance(&mut conn, AccountKind::RenterBalance, Some(buyer)),
        balance(&mut conn, AccountKind::HostEarnings, Some(host)),
    );
    let heard = Fake(Ok(Vec::new()));
    let c = escrow::cancel::cancel(
        &db,
        &s,
        &terms(),
        &heard,
        req2.reservation_id,
        cancel.clone(),
        at2(1800),
    )
    .await
    .expect("cancel");
    assert_eq!(c.state, EscrowState::Cancelled);
    assert_eq!(c.settled_until, at2(1800));
    assert_eq!(c.remaining, Decimal::ZERO);
    // 10 over 2 h: the first half hour released, 2.5 and 5 refunded to
    // the renter and the buyer, the penalty 10 % of 7.5.
    assert_eq!(c.released + c.fees, d("2.5"));
    assert_eq!(c.refunded, d("7.5"));
    assert_eq!(c.penalty, d("0.75"));
    assert_eq!(
        balance(&mut conn, AccountKind::RenterBalance, Some(renter)),
        renter_before + d("2.5") + d("0.25")
    );
    assert_eq!(
        balance(&mut conn, AccountKind::RenterBalance, Some(buyer)),
        buyer_before + d("5") + d("0.5")
    );
    assert_eq!(
        balance(&mut conn, AccountKind::HostEarnings, Some(host)),
        host_before + c.released - d("0.75")
    );
    // Cancelling again answers the same.
    let again = escrow::cancel::cancel(
        &db,
        &s,
        &terms(),
        &none,
        req2.reservation_id,
        cancel,
        at2(4000),
    )
    .await
    .expect("again");
    assert_eq!(again, c);

    // Reads.
    let mine = escrow::list(
        &db,
        EscrowQuery {
            renter_tenant_id: Some(renter),
            host_tenant_id: None,
        },
    )
    .await
    .expect("list");
    assert_eq!(mine.len(), 2);
    assert_eq!(
        mine[0].reservation_id, req2.reservation_id,
        "newest block first"
    );
    assert!(
        escrow::list(&db, EscrowQuery::default()).await.is_err(),
        "a tenant is needed"
    );
    assert_eq!(
        escrow::get(&db, ReservationId::new())
            .await
            .unwrap_err()
            .code(),
        ErrorCode::NotFound
    );
    // The database agrees: every escrow conserved, every posting balanced.
    assert_eq!(
        common::count(
            &mut conn,
            "SELECT count(*) AS n FROM billing.escrows WHERE released + fees + refunded <> amount"
        ),
        0
    );
    assert_eq!(
        common::count(
            &mut conn,
            "SELECT count(*) AS n FROM (SELECT transaction_id FROM billing.entries \
             GROUP BY transaction_id HAVING sum(amount) <> 0) x"
        ),
        0
    );

    // The renter's invoice: the two purchases, the refunds, the penalty
    // and the sales, each the exact sum of its postings rounded once.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let end = Utc::now();
    let preview = invoices::preview(&db, &s, InvoicePeriod::Monthly, renter, end)
        .await
        .expect("preview");
    let meters: Vec<&str> = preview.lines.iter().map(|l| l.meter.as_str()).collect();
    for m in [
        "reservation",
        "reservation_refund",
        "reservation_penalty",
        "resale_sale",
    ] {
        assert!(meters.contains(&m), "{m} in {meters:?}");
    }
    let purchase = preview
        .lines
        .iter()
        .find(|l| l.meter == "reservation" && l.instance_id.0 == req.reservation_id.0)
        .expect("purchase line");
    assert_eq!(purchase.exact_amount, req.amount);
    assert_eq!(purchase.quantity, 2 * 3 * 3600);
    assert_eq!(purchase.unit, "gpu_second");
    let run = invoices::run_invoices(
        &db,
        &s,
        InvoicePeriod::Monthly,
        contracts::api::RunInvoicesRequest {
            period_end: Some(end),
            tenant_id: Some(renter),
        },
    )
    .await
    .expect("run");
    let invoice = run.invoices.first().expect("the renter's invoice");
    assert_eq!(invoice.lines, preview.lines);
    assert_eq!(invoice.exact_total, preview.exact_total);
    // What the invoice says was charged is what left the renter's balance
    // for reservations.
    #[derive(QueryableByName)]
    struct Sum {
        #[diesel(sql_type = diesel::sql_types::Numeric)]
        s: Decimal,
    }
    let ledger_sum = diesel::sql_query(format!(
        "SELECT -coalesce(sum(e.amount), 0) AS s FROM billing.entries e \
         JOIN billing.accounts a ON a.id = e.account_id \
         JOIN billing.transactions t ON t.id = e.transaction_id \
         WHERE a.kind = 'renter_balance' AND a.tenant_id = '{renter}' AND t.kind <> 'credit' \
           AND t.kind <> 'rounding'"
    ))
    .get_result::<Sum>(&mut conn)
    .expect("sum")
    .s;
    assert_eq!(invoice.exact_total, ledger_sum);
    let csv = billing::focus::csv(invoice);
    assert_eq!(billing::focus::billed_cost_sum(&csv), Some(invoice.total));
    assert!(csv.contains(",Purchase,"), "{csv}");
    assert!(
        csv.contains(&format!(",{},Reserved block,Spend", req.reservation_id)),
        "{csv}"
    );
    // The buyer's: a resale purchase and refunds on its own reservations.
    let buyer_preview = invoices::preview(&db, &s, InvoicePeriod::Monthly, buyer, end)
        .await
        .expect("preview");
    assert!(
        buyer_preview
            .lines
            .iter()
            .any(|l| l.meter == "resale_purchase"
                && l.instance_id.0 == listing.child_reservation_id.0)
    );
    assert!(
        buyer_preview
            .lines
            .iter()
            .any(|l| l.meter == "reservation_refund"
                && l.instance_id.0 == listing.child_reservation_id.0)
    );

    // The host's statement: the machine's reservation line holds the
    // releases, and the penalty is taken from it.
    let statement = billing::statements::preview(&db, &s, InvoicePeriod::Monthly, host, end)
        .await
        .expect("statement");
    let line = statement
        .lines
        .iter()
        .find(|l| l.meter == "reservation")
        .expect("reservation line");
    assert_eq!(line.machine_id, Some(MachineId(Uuid::from_u128(9))));
    let released: Decimal = mine.iter().map(|e| e.released).sum();
    let fees: Decimal = mine.iter().map(|e| e.fees).sum();
    assert_eq!((line.net, line.fee), (released, fees));
    assert_eq!(line.downtime_credits, d("0.75"));
    assert_eq!(
        statement.earnings,
        balance(&mut conn, AccountKind::HostEarnings, Some(host))
    );
    // The set-based statement run makes the same statement.
    let stated = billing::statements::run_statements(
        &db,
        &s,
        InvoicePeriod::Monthly,
        contracts::api::RunStatementsRequest {
            period_end: Some(end),
            host_tenant_id: Some(host),
        },
    )
    .await
    .expect("statement run");
    let stored = stated.statements.first().expect("the host's statement");
    assert_eq!(stored.lines, statement.lines);
    assert_eq!(
        (
            stored.gross,
            stored.fee,
            stored.net,
            stored.downtime_credits,
            stored.earnings
        ),
        (
            statement.gross,
            statement.fee,
            statement.net,
            statement.downtime_credits,
            statement.earnings
        )
    );
    assert_eq!(stored.closing_balance, statement.earnings);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_charges_never_overdraw() {
    let test = TestDb::new("escrow_race");
    let db = platform::Db::connect(test.url(), 4).expect("db");
    let mut conn = test.conn();
    let (renter, host) = (TenantId::new(), TenantId::new());
    let start = Utc.with_ymd_and_hms(2030, 1, 7, 10, 0, 0).unwrap();
    let now = start - chrono::Duration::hours(1);
    // Enough for one block of 6, not two.
    fund(&mut conn, renter, "10");
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let req = block(renter, host, start, 3, "1");
        let db = db.clone();
        tasks.push(tokio::spawn(async move {
            db.tx(move |c| escrow::charge::charge_in(c, &settings(), &req, Some(None), now))
                .await
        }));
    }
    let mut ok = 0;
    for t in tasks {
        match t.await.expect("task") {
            Ok(_) => ok += 1,
            Err(e) => assert_eq!(e.code(), ErrorCode::InsufficientFunds),
        }
    }
    assert_eq!(ok, 1);
    assert_eq!(
        balance(&mut conn, AccountKind::RenterBalance, Some(renter)),
        d("4")
    );
    assert_eq!(
        balance(&mut conn, AccountKind::Escrow, Some(renter)),
        d("6")
    );
}
