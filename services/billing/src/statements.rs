//! Hosts' statements (docs/payouts.md). The postings on a host's
//! `host_earnings` account are the source of truth: a statement line is one
//! machine's usage of one meter, with the exact sums (9 decimals) of the
//! postings' legs: what renters paid (gross), the platform's fee, the host's
//! net and the downtime credits taken from it. Payouts and any other posting
//! on the account are on the statement too (not per machine), so that its
//! totals are exactly the account's movements.
//!
//! There is no rounding posting, unlike invoices: what a host receives is a
//! payout, which takes the minor-unit floor of the earnings and leaves the
//! sub-cent residue in the account for the next one.
//!
//! A posting goes on the host's first statement finalized after it reached
//! the ledger (`statement_items`, keyed by posting): late usage is on the
//! next statement, on an `earlier_period` line. Finalized statements are
//! numbered per host without gaps and never change (the database refuses).
//! The period is the invoices' (`GPUMARKET_INVOICE_PERIOD`).

use std::collections::BTreeMap;

use chrono::{DateTime, SubsecRound, Utc};
use contracts::api;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Numeric, Text, Timestamptz};
use platform::Db;
use rust_decimal::Decimal;
use schema::billing_payouts::{statement_counters, statement_items, statement_lines, statements};
use uuid::Uuid;

use crate::invoices::InvoicePeriod;
use crate::{Error, Settings};

/// Posting assignments written per statement (three parameters each).
const ITEM_BATCH: usize = 5000;

/// Statements a listing returns at most.
const LIST_LIMIT: i64 = 100;

/// The meter of a downtime credit whose instance's usage is unknown.
const DEFAULT_METER: &str = "gpu";

/// One posting on a host's earnings account as a statement sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct EarningsPosting {
    pub transaction_id: String,
    /// The posting's kind: `usage`, `downtime_credit`, `payout`, ...
    pub kind: String,
    /// The host's leg (positive for usage, negative for credits and payouts).
    pub host_amount: Decimal,
    /// The platform's fee leg (usage only).
    pub fee_amount: Decimal,
    pub machine_id: Option<Uuid>,
    pub gpu_model: Option<String>,
    pub meter: String,
    pub seconds: i64,
    /// When the usage ended (the posting's time for anything else).
    pub ended_at: DateTime<Utc>,
}

/// Lines and totals drafted from postings, with the postings of each.
#[derive(Debug, Clone, Default)]
pub struct Draft {
    pub lines: Vec<(api::StatementLine, Vec<String>)>,
    /// Payout and adjustment postings: on the statement, on no line.
    pub other: Vec<String>,
    pub seconds: i64,
    pub gross: Decimal,
    pub fee: Decimal,
    pub net: Decimal,
    pub downtime_credits: Decimal,
    pub earnings: Decimal,
    pub adjustments: Decimal,
    pub payouts: Decimal,
}

impl Draft {
    /// What the statement did to the earnings account: the exact sum of the
    /// host legs of its postings.
    pub fn change(&self) -> Decimal {
        self.earnings + self.adjustments - self.payouts
    }
}

/// Groups postings into lines (whether the usage lies before
/// `period_start`, machine, meter), in a stable order.
pub fn draft(postings: &[EarningsPosting], period_start: DateTime<Utc>) -> Draft {
    type Key = (bool, Option<Uuid>, String);
    let mut groups: BTreeMap<Key, Vec<&EarningsPosting>> = BTreeMap::new();
    let mut d = Draft::default();
    for p in postings {
        match p.kind.as_str() {
            "usage" | "downtime_credit" => groups
                .entry((p.ended_at <= period_start, p.machine_id, p.meter.clone()))
                .or_default()
                .push(p),
            "payout" => {
                d.payouts -= p.host_amount;
                d.other.push(p.transaction_id.clone());
            }
            _ => {
                d.adjustments += p.host_amount;
                d.other.push(p.transaction_id.clone());
            }
        }
    }
    for ((earlier, machine_id, meter), members) in groups {
        let mut line = api::StatementLine {
            machine_id,
            gpu_model: members.iter().filter_map(|p| p.gpu_model.clone()).max(),
            meter,
            earlier_period: earlier,
            seconds: 0,
            gross: Decimal::ZERO,
            fee: Decimal::ZERO,
            net: Decimal::ZERO,
            downtime_credits: Decimal::ZERO,
            amount: Decimal::ZERO,
            postings: i32::try_from(members.len()).unwrap_or(i32::MAX),
        };
        for p in &members {
            if p.kind == "usage" {
                line.seconds += p.seconds;
                line.net += p.host_amount;
                line.fee += p.fee_amount;
            } else {
                line.downtime_credits -= p.host_amount;
            }
        }
        line.gross = line.net + line.fee;
        line.amount = line.net - line.downtime_credits;
        d.seconds += line.seconds;
        d.gross += line.gross;
        d.fee += line.fee;
        d.net += line.net;
        d.downtime_credits += line.downtime_credits;
        d.earnings += line.amount;
        d.lines.push((
            line,
            members.iter().map(|p| p.transaction_id.clone()).collect(),
        ));
    }
    d
}

#[derive(QueryableByName)]
struct PostingRow {
    #[diesel(sql_type = Text)]
    id: String,
    #[diesel(sql_type = Text)]
    kind: String,
    #[diesel(sql_type = Timestamptz)]
    created_at: DateTime<Utc>,
    #[diesel(sql_type = Numeric)]
    host_amount: Decimal,
    #[diesel(sql_type = Numeric)]
    fee_amount: Decimal,
    #[diesel(sql_type = Nullable<diesel::sql_types::Uuid>)]
    machine_id: Option<Uuid>,
    #[diesel(sql_type = Nullable<Text>)]
    gpu_model: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    meter: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    seconds: Option<i64>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    ended_at: Option<DateTime<Utc>>,
}

/// The host's earnings postings on no statement yet that reached the ledger
/// before `before` (all of them when None), oldest first, with the earliest
/// one's time. A downtime credit names an instance, not a machine: its
/// machine is the one the instance's usage for this host ran on.
fn unstated(
    conn: &mut PgConnection,
    host_tenant_id: Uuid,
    currency: &str,
    before: Option<DateTime<Utc>>,
) -> QueryResult<(Vec<EarningsPosting>, Option<DateTime<Utc>>)> {
    let rows: Vec<PostingRow> = diesel::sql_query(
        "SELECT t.id, t.kind, t.created_at, h.amount AS host_amount, \
                COALESCE((SELECT sum(f.amount) FROM billing.entries f \
                          JOIN billing.accounts fa ON fa.id = f.account_id AND fa.kind = 'platform_fee' \
                          WHERE f.transaction_id = t.id), 0) AS fee_amount, \
                COALESCE(d.machine_id, m.machine_id) AS machine_id, \
                COALESCE(d.gpu_model, m.gpu_model) AS gpu_model, \
                COALESCE(d.meter, m.meter) AS meter, \
                d.seconds, d.ended_at \
         FROM billing.entries h \
         JOIN billing.accounts a ON a.id = h.account_id \
              AND a.kind = 'host_earnings' AND a.tenant_id = $1 AND a.currency = $2 \
         JOIN billing.transactions t ON t.id = h.transaction_id \
         LEFT JOIN billing.usage_details d ON d.transaction_id = t.id \
         LEFT JOIN LATERAL ( \
              SELECT d2.machine_id, d2.gpu_model, d2.meter \
              FROM billing.transactions u \
              JOIN billing.usage_details d2 ON d2.transaction_id = u.id \
              WHERE t.kind = 'downtime_credit' AND u.kind = 'usage' \
                AND u.instance_id = t.instance_id AND d2.host_tenant_id = $1 \
              ORDER BY u.created_at DESC LIMIT 1) m ON true \
         WHERE ($3::timestamptz IS NULL OR t.created_at < $3) \
           AND NOT EXISTS (SELECT 1 FROM billing.statement_items s WHERE s.transaction_id = t.id) \
         ORDER BY t.created_at, t.id",
    )
    .bind::<diesel::sql_types::Uuid, _>(host_tenant_id)
    .bind::<Text, _>(currency)
    .bind::<Nullable<Timestamptz>, _>(before)
    .load(conn)?;
    let earliest = rows.first().map(|r| r.created_at);
    let postings = rows
        .into_iter()
        .map(|r| EarningsPosting {
            transaction_id: r.id,
            kind: r.kind,
            host_amount: r.host_amount,
            fee_amount: r.fee_amount,
            machine_id: r.machine_id,
            gpu_model: r.gpu_model,
            meter: r.meter.unwrap_or_else(|| DEFAULT_METER.to_owned()),
            seconds: r.seconds.unwrap_or(0),
            ended_at: r.ended_at.unwrap_or(r.created_at),
        })
        .collect();
    Ok((postings, earliest))
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = statements)]
struct StatementRow {
    id: Uuid,
    host_tenant_id: Uuid,
    number: i64,
    period_start: DateTime<Utc>,
    period_end: DateTime<Utc>,
    status: String,
    currency: String,
    seconds: i64,
    gross: Decimal,
    fee: Decimal,
    net: Decimal,
    downtime_credits: Decimal,
    earnings: Decimal,
    adjustments: Decimal,
    payouts: Decimal,
    opening_balance: Decimal,
    closing_balance: Decimal,
    finalized_at: Option<DateTime<Utc>>,
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = statement_lines)]
struct LineRow {
    statement_id: Uuid,
    machine_id: Option<Uuid>,
    gpu_model: Option<String>,
    meter: String,
    earlier_period: bool,
    seconds: i64,
    gross: Decimal,
    fee: Decimal,
    net: Decimal,
    downtime_credits: Decimal,
    amount: Decimal,
    postings: i32,
}

impl From<LineRow> for api::StatementLine {
    fn from(l: LineRow) -> Self {
        Self {
            machine_id: l.machine_id,
            gpu_model: l.gpu_model,
            meter: l.meter,
            earlier_period: l.earlier_period,
            seconds: l.seconds,
            gross: l.gross,
            fee: l.fee,
            net: l.net,
            downtime_credits: l.downtime_credits,
            amount: l.amount,
            postings: l.postings,
        }
    }
}

/// Stored statements with their lines, in the order given.
fn with_lines(
    conn: &mut PgConnection,
    rows: Vec<StatementRow>,
) -> QueryResult<Vec<api::Statement>> {
    let ids: Vec<Uuid> = rows.iter().map(|r| r.id).collect();
    let mut lines: Vec<LineRow> = statement_lines::table
        .filter(statement_lines::statement_id.eq_any(&ids))
        .order((statement_lines::statement_id, statement_lines::position))
        .select(LineRow::as_select())
        .load(conn)?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let (mine, rest): (Vec<LineRow>, Vec<LineRow>) = std::mem::take(&mut lines)
                .into_iter()
                .partition(|l| l.statement_id == r.id);
            lines = rest;
            api::Statement {
                id: Some(r.id),
                host_tenant_id: r.host_tenant_id,
                number: Some(r.number),
                status: r.status,
                period_start: r.period_start,
                period_end: r.period_end,
                currency: r.currency,
                seconds: r.seconds,
                gross: r.gross,
                fee: r.fee,
                net: r.net,
                downtime_credits: r.downtime_credits,
                earnings: r.earnings,
                adjustments: r.adjustments,
                payouts: r.payouts,
                opening_balance: r.opening_balance,
                closing_balance: r.closing_balance,
                finalized_at: r.finalized_at,
                lines: mine.into_iter().map(Into::into).collect(),
            }
        })
        .collect())
}

fn find(conn: &mut PgConnection, host_tenant_id: Uuid, id: Uuid) -> Result<api::Statement, Error> {
    let row = statements::table
        .filter(statements::id.eq(id))
        .filter(statements::host_tenant_id.eq(host_tenant_id))
        .select(StatementRow::as_select())
        .first(conn)
        .optional()?
        .ok_or_else(|| Error::NotFound(format!("statement {id} not found")))?;
    with_lines(conn, vec![row])?
        .pop()
        .ok_or_else(|| Error::NotFound(format!("statement {id} not found")))
}

/// The closing balance of the host's last statement (zero before the first).
fn last_closing(conn: &mut PgConnection, host_tenant_id: Uuid) -> QueryResult<Decimal> {
    Ok(statements::table
        .filter(statements::host_tenant_id.eq(host_tenant_id))
        .filter(statements::status.eq("finalized"))
        .order(statements::number.desc())
        .select(statements::closing_balance)
        .first::<Decimal>(conn)
        .optional()?
        .unwrap_or(Decimal::ZERO))
}

/// Finalizes the host's statement for the period ending at `period_end`, in
/// the caller's transaction: the same statement when it exists already, None
/// when there is nothing to state.
pub fn finalize_in(
    conn: &mut PgConnection,
    settings: &Settings,
    period: InvoicePeriod,
    host_tenant_id: Uuid,
    period_end: DateTime<Utc>,
) -> Result<Option<api::Statement>, Error> {
    let currency = settings.currency.as_str();
    // Serialises the host's finalizations; the number is taken from here.
    diesel::insert_into(statement_counters::table)
        .values(statement_counters::host_tenant_id.eq(host_tenant_id))
        .on_conflict_do_nothing()
        .execute(conn)?;
    let last_number: i64 = statement_counters::table
        .find(host_tenant_id)
        .select(statement_counters::last_number)
        .for_update()
        .first(conn)?;
    let existing: Option<Uuid> = statements::table
        .filter(statements::host_tenant_id.eq(host_tenant_id))
        .filter(statements::period_end.eq(period_end))
        .select(statements::id)
        .first(conn)
        .optional()?;
    if let Some(id) = existing {
        return find(conn, host_tenant_id, id).map(Some);
    }
    let last_end: Option<DateTime<Utc>> = statements::table
        .filter(statements::host_tenant_id.eq(host_tenant_id))
        .select(diesel::dsl::max(statements::period_end))
        .first(conn)?;
    if let Some(last_end) = last_end.filter(|e| *e > period_end) {
        return Err(Error::Conflict(format!(
            "periodEnd: the host has statements up to {last_end}, after {period_end}"
        )));
    }
    let (postings, earliest) = unstated(conn, host_tenant_id, currency, Some(period_end))?;
    let Some(earliest) = earliest else {
        return Ok(None);
    };
    let period_start = last_end.unwrap_or_else(|| period.start_of(earliest));
    let drafted = draft(&postings, period_start);
    let opening = last_closing(conn, host_tenant_id)?;
    let id = Uuid::now_v7();
    let number = last_number + 1;
    diesel::update(statement_counters::table.find(host_tenant_id))
        .set(statement_counters::last_number.eq(number))
        .execute(conn)?;
    // A draft while its lines are written (the database accepts lines only
    // then), finalized before the transaction ends.
    diesel::insert_into(statements::table)
        .values((
            statements::id.eq(id),
            statements::host_tenant_id.eq(host_tenant_id),
            statements::number.eq(number),
            statements::period_start.eq(period_start),
            statements::period_end.eq(period_end),
            statements::status.eq("draft"),
            statements::currency.eq(currency),
            statements::seconds.eq(drafted.seconds),
            statements::gross.eq(drafted.gross),
            statements::fee.eq(drafted.fee),
            statements::net.eq(drafted.net),
            statements::downtime_credits.eq(drafted.downtime_credits),
            statements::earnings.eq(drafted.earnings),
            statements::adjustments.eq(drafted.adjustments),
            statements::payouts.eq(drafted.payouts),
            statements::opening_balance.eq(opening),
            statements::closing_balance.eq(opening + drafted.change()),
        ))
        .execute(conn)?;
    let mut items: Vec<(String, Option<i64>)> = drafted
        .other
        .iter()
        .map(|txn| (txn.clone(), None))
        .collect();
    for (position, (line, members)) in drafted.lines.iter().enumerate() {
        let line_id: i64 = diesel::insert_into(statement_lines::table)
            .values((
                statement_lines::statement_id.eq(id),
                statement_lines::position.eq(i32::try_from(position).unwrap_or(i32::MAX)),
                statement_lines::machine_id.eq(line.machine_id),
                statement_lines::gpu_model.eq(&line.gpu_model),
                statement_lines::meter.eq(&line.meter),
                statement_lines::earlier_period.eq(line.earlier_period),
                statement_lines::seconds.eq(line.seconds),
                statement_lines::gross.eq(line.gross),
                statement_lines::fee.eq(line.fee),
                statement_lines::net.eq(line.net),
                statement_lines::downtime_credits.eq(line.downtime_credits),
                statement_lines::amount.eq(line.amount),
                statement_lines::postings.eq(line.postings),
            ))
            .returning(statement_lines::id)
            .get_result(conn)?;
        items.extend(members.iter().map(|txn| (txn.clone(), Some(line_id))));
    }
    // Below Postgres's 65535 bind parameters per statement.
    for batch in items.chunks(ITEM_BATCH) {
        let rows: Vec<_> = batch
            .iter()
            .map(|(txn, line_id)| {
                (
                    statement_items::transaction_id.eq(txn),
                    statement_items::statement_id.eq(id),
                    statement_items::line_id.eq(*line_id),
                )
            })
            .collect();
        diesel::insert_into(statement_items::table)
            .values(rows)
            .execute(conn)?;
    }
    diesel::update(statements::table.find(id))
        .set((
            statements::status.eq("finalized"),
            statements::finalized_at.eq(Some(Utc::now())),
        ))
        .execute(conn)?;
    tracing::info!(host.id = %host_tenant_id, statement.id = %id, number, earnings = %drafted.earnings, "statement finalized");
    crate::metrics::statement_finalized(drafted.earnings);
    find(conn, host_tenant_id, id).map(Some)
}

/// Finalizes one host's statement for the period ending at `period_end`.
pub async fn finalize_period(
    db: &Db,
    settings: &Settings,
    period: InvoicePeriod,
    host_tenant_id: Uuid,
    period_end: DateTime<Utc>,
) -> Result<Option<api::Statement>, Error> {
    let period_end = crate::invoices::ended(period_end)?;
    let settings = settings.clone();
    db.tx(move |conn| finalize_in(conn, &settings, period, host_tenant_id, period_end))
        .await
}

/// The statement run for a period end (default: the start of the current
/// period, i.e. the end of the last complete one): every host with earnings
/// postings on no statement, each in its own transaction. Running it again
/// returns the same statements.
pub async fn run_statements(
    db: &Db,
    settings: &Settings,
    period: InvoicePeriod,
    req: api::RunStatementsRequest,
) -> Result<api::RunStatementsResult, Error> {
    let period_end = req
        .period_end
        .unwrap_or_else(|| period.start_of(Utc::now()))
        .trunc_subsecs(6);
    let hosts: Vec<Uuid> = match req.host_tenant_id {
        Some(h) => vec![h],
        None => {
            #[derive(QueryableByName)]
            struct Host {
                #[diesel(sql_type = diesel::sql_types::Uuid)]
                tenant_id: Uuid,
            }
            let currency = settings.currency.clone();
            let rows: Vec<Host> = db
                .run(move |conn| {
                    diesel::sql_query(
                        "SELECT DISTINCT a.tenant_id FROM billing.accounts a \
                         JOIN billing.entries e ON e.account_id = a.id \
                         JOIN billing.transactions t ON t.id = e.transaction_id \
                         WHERE a.kind = 'host_earnings' AND a.currency = $2 \
                           AND a.tenant_id IS NOT NULL AND t.created_at < $1 \
                           AND NOT EXISTS (SELECT 1 FROM billing.statement_items s WHERE s.transaction_id = t.id) \
                         UNION SELECT host_tenant_id FROM billing.statements WHERE period_end = $1",
                    )
                    .bind::<Timestamptz, _>(period_end)
                    .bind::<Text, _>(&currency)
                    .load(conn)
                    .map_err(Error::from)
                })
                .await?;
            rows.into_iter().map(|r| r.tenant_id).collect()
        }
    };
    let mut statements = Vec::new();
    let all_hosts = req.host_tenant_id.is_none();
    for host in hosts {
        match finalize_period(db, settings, period, host, period_end).await {
            Ok(Some(statement)) => statements.push(statement),
            Ok(None) => {}
            // A host already stated past this end (its late postings wait
            // for its next statement) must not stop everyone else's.
            Err(Error::Conflict(reason)) if all_hosts => {
                tracing::info!(host.id = %host, %reason, "host skipped by the statement run");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(api::RunStatementsResult {
        period_end,
        statements,
    })
}

/// What the host's next statement would hold if it were finalized now: every
/// earnings posting on no statement yet. Not stored.
pub async fn preview(
    db: &Db,
    settings: &Settings,
    period: InvoicePeriod,
    host_tenant_id: Uuid,
    now: DateTime<Utc>,
) -> Result<api::Statement, Error> {
    let currency = settings.currency.clone();
    db.run(move |conn| {
        let last_end: Option<DateTime<Utc>> = statements::table
            .filter(statements::host_tenant_id.eq(host_tenant_id))
            .select(diesel::dsl::max(statements::period_end))
            .first(conn)?;
        let (postings, earliest) = unstated(conn, host_tenant_id, &currency, None)?;
        let period_start =
            last_end.unwrap_or_else(|| period.start_of(earliest.unwrap_or(now).min(now)));
        let mut period_end = period.next_start(now);
        if period_end <= period_start {
            period_end = period.next_start(period_start);
        }
        let drafted = draft(&postings, period_start);
        let opening = last_closing(conn, host_tenant_id)?;
        Ok(api::Statement {
            id: None,
            host_tenant_id,
            number: None,
            status: "draft".into(),
            period_start,
            period_end,
            currency,
            seconds: drafted.seconds,
            gross: drafted.gross,
            fee: drafted.fee,
            net: drafted.net,
            downtime_credits: drafted.downtime_credits,
            earnings: drafted.earnings,
            adjustments: drafted.adjustments,
            payouts: drafted.payouts,
            opening_balance: opening,
            closing_balance: opening + drafted.change(),
            finalized_at: None,
            lines: drafted.lines.into_iter().map(|(line, _)| line).collect(),
        })
    })
    .await
}

/// The host's statements, newest first (at most 100).
pub async fn list(db: &Db, host_tenant_id: Uuid) -> Result<Vec<api::Statement>, Error> {
    db.run(move |conn| {
        let rows = statements::table
            .filter(statements::host_tenant_id.eq(host_tenant_id))
            .filter(statements::status.ne("draft"))
            .order(statements::number.desc())
            .limit(LIST_LIMIT)
            .select(StatementRow::as_select())
            .load(conn)?;
        Ok(with_lines(conn, rows)?)
    })
    .await
}

/// One of the host's statements; NOT_FOUND for another host's.
pub async fn get(db: &Db, host_tenant_id: Uuid, id: Uuid) -> Result<api::Statement, Error> {
    db.run(move |conn| find(conn, host_tenant_id, id)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(secs, 0).unwrap_or_default()
    }

    fn posting() -> impl Strategy<Value = EarningsPosting> {
        (
            0usize..4,
            0u8..3,
            0usize..2,
            -5_000i64..200_000,
            -1_000_000_000i64..100_000_000_000,
            0i64..2_000_000,
        )
            .prop_map(|(kind, machine, meter, seconds, nanos, end)| {
                let kind = ["usage", "usage", "downtime_credit", "payout"][kind];
                let amount = Decimal::new(nanos, 9);
                EarningsPosting {
                    transaction_id: String::new(),
                    kind: kind.into(),
                    host_amount: match kind {
                        "usage" => amount,
                        _ => -amount.abs(),
                    },
                    fee_amount: if kind == "usage" {
                        Decimal::new(nanos / 7, 9)
                    } else {
                        Decimal::ZERO
                    },
                    machine_id: (machine > 0).then(|| Uuid::from_u128(u128::from(machine))),
                    gpu_model: (machine > 0).then(|| "RTX 4090".to_owned()),
                    meter: ["gpu", "storage"][meter].into(),
                    seconds,
                    ended_at: at(end),
                }
            })
    }

    proptest! {
        /// Every posting is on exactly one line or among the others; the
        /// lines add up to the totals; and the statement's change is exactly
        /// the sum of the host legs, i.e. the earnings account's movement.
        #[test]
        fn statements_reconcile_with_the_earnings_account(
            postings in proptest::collection::vec(posting(), 0..40),
            period_start in 0i64..2_000_000,
        ) {
            let postings: Vec<EarningsPosting> = postings
                .into_iter()
                .enumerate()
                .map(|(i, p)| EarningsPosting { transaction_id: format!("t{i}"), ..p })
                .collect();
            let d = draft(&postings, at(period_start));
            let ledger: Decimal = postings.iter().map(|p| p.host_amount).sum();
            prop_assert_eq!(d.change(), ledger);
            let covered = d.lines.iter().map(|(_, m)| m.len()).sum::<usize>() + d.other.len();
            prop_assert_eq!(covered, postings.len());
            let lines: Decimal = d.lines.iter().map(|(l, _)| l.amount).sum();
            prop_assert_eq!(lines, d.earnings);
            prop_assert_eq!(d.net - d.downtime_credits, d.earnings);
            prop_assert_eq!(d.net + d.fee, d.gross);
            for (line, members) in &d.lines {
                let net: Decimal = postings
                    .iter()
                    .filter(|p| members.contains(&p.transaction_id) && p.kind == "usage")
                    .map(|p| p.host_amount)
                    .sum();
                prop_assert_eq!(line.net, net);
                prop_assert_eq!(line.gross, line.net + line.fee);
            }
        }
    }

    #[test]
    fn late_usage_is_on_an_earlier_period_line() {
        let p = |id: &str, end: i64| EarningsPosting {
            transaction_id: id.into(),
            kind: "usage".into(),
            host_amount: Decimal::ONE,
            fee_amount: Decimal::new(2, 1),
            machine_id: Some(Uuid::nil()),
            gpu_model: None,
            meter: "gpu".into(),
            seconds: 10,
            ended_at: at(end),
        };
        let d = draft(&[p("a", 50), p("b", 150)], at(100));
        assert_eq!(d.lines.len(), 2);
        assert!(d.lines[1].0.earlier_period);
        assert!(!d.lines[0].0.earlier_period);
        assert_eq!(d.gross, Decimal::new(24, 1));
    }
}
