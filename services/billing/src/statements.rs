//! Hosts' statements (docs/payouts.md). The postings on a host's
//! `host_earnings` account are the source of truth: a statement line is one
//! machine's usage of one meter, with the exact sums (9 decimals) of the
//! postings' legs: what renters paid (gross), the platform's fee, the host's
//! net and the downtime credits taken from it. A reserved block's escrow
//! releases are its machine's `reservation` line (gross, fee, net, the
//! seconds heard), and a penalty for cancelling one is taken from that
//! line like a downtime credit. Payouts and any other posting
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

use contracts::ids::{MachineId, StatementId, TenantId};
use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, SubsecRound, Utc};
use contracts::api;
use contracts::states::StatementStatus;
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Numeric, Text, Timestamptz};
use platform::Db;
use rust_decimal::Decimal;
use schema::billing_payouts::{statement_lines, statements};
use uuid::Uuid;

use crate::invoices::InvoicePeriod;
use crate::{Error, Settings};

/// Hosts finalized per transaction by the run (as for invoices).
pub const RUN_CHUNK: usize = 1000;

/// Statements read back per query when a run returns them.
const LOAD_BATCH: usize = 1000;

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
            "usage" | "downtime_credit" | "escrow_release" | "escrow_penalty" => groups
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
            machine_id: machine_id.map(MachineId),
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
            // A reserved block's release is its machine's usage; the
            // host's penalty for cancelling one is taken from its earnings
            // like a downtime credit.
            if p.kind == "usage" || p.kind == "escrow_release" {
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
    host_tenant_id: TenantId,
    currency: &str,
    before: Option<DateTime<Utc>>,
) -> QueryResult<(Vec<EarningsPosting>, Option<DateTime<Utc>>)> {
    let rows: Vec<PostingRow> = diesel::sql_query(
        "SELECT t.id, t.kind, t.created_at, h.amount AS host_amount, \
                COALESCE((SELECT sum(f.amount) FROM billing.entries f \
                          JOIN billing.accounts fa ON fa.id = f.account_id AND fa.kind = 'platform_fee' \
                          WHERE f.transaction_id = t.id), 0) AS fee_amount, \
                COALESCE(d.machine_id, x.machine_id, m.machine_id) AS machine_id, \
                COALESCE(d.gpu_model, m.gpu_model) AS gpu_model, \
                COALESCE(d.meter, CASE WHEN x.transaction_id IS NOT NULL THEN 'reservation' END, m.meter) \
                    AS meter, \
                COALESCE(d.seconds, x.heard_seconds) AS seconds, \
                COALESCE(d.ended_at, x.ended_at) AS ended_at \
         FROM billing.entries h \
         JOIN billing.accounts a ON a.id = h.account_id \
              AND a.kind = 'host_earnings' AND a.tenant_id = $1 AND a.currency = $2 \
         JOIN billing.transactions t ON t.id = h.transaction_id \
         LEFT JOIN billing.usage_details d ON d.transaction_id = t.id \
         LEFT JOIN billing.escrow_postings x ON x.transaction_id = t.id \
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
    host_tenant_id: TenantId,
    number: i64,
    period_start: DateTime<Utc>,
    period_end: DateTime<Utc>,
    status: StatementStatus,
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
            machine_id: l.machine_id.map(MachineId),
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

/// Stored statements with their lines, in the order given (lines grouped by
/// statement in one pass: a run's thousands load in linear time).
fn with_lines(
    conn: &mut PgConnection,
    rows: Vec<StatementRow>,
) -> QueryResult<Vec<api::Statement>> {
    let ids: Vec<Uuid> = rows.iter().map(|r| r.id).collect();
    let mut lines: HashMap<Uuid, Vec<LineRow>> = HashMap::new();
    for line in statement_lines::table
        .filter(statement_lines::statement_id.eq_any(&ids))
        .order((statement_lines::statement_id, statement_lines::position))
        .select(LineRow::as_select())
        .load::<LineRow>(conn)?
    {
        lines.entry(line.statement_id).or_default().push(line);
    }
    Ok(rows
        .into_iter()
        .map(|r| {
            let mine = lines.remove(&r.id).unwrap_or_default();
            api::Statement {
                id: Some(StatementId(r.id)),
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

/// Stored statements by id, in the order given, a batch at a time.
fn load_many(conn: &mut PgConnection, ids: &[Uuid]) -> QueryResult<Vec<api::Statement>> {
    let mut out = Vec::with_capacity(ids.len());
    for batch in ids.chunks(LOAD_BATCH) {
        let mut rows: HashMap<Uuid, StatementRow> = statements::table
            .filter(statements::id.eq_any(batch))
            .select(StatementRow::as_select())
            .load::<StatementRow>(conn)?
            .into_iter()
            .map(|r| (r.id, r))
            .collect();
        let ordered: Vec<StatementRow> = batch.iter().filter_map(|id| rows.remove(id)).collect();
        out.extend(with_lines(conn, ordered)?);
    }
    Ok(out)
}

fn find(
    conn: &mut PgConnection,
    host_tenant_id: TenantId,
    id: Uuid,
) -> Result<api::Statement, Error> {
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
fn last_closing(conn: &mut PgConnection, host_tenant_id: TenantId) -> QueryResult<Decimal> {
    Ok(statements::table
        .filter(statements::host_tenant_id.eq(host_tenant_id))
        .filter(statements::status.eq(StatementStatus::Finalized))
        .order(statements::number.desc())
        .select(statements::closing_balance)
        .first::<Decimal>(conn)
        .optional()?
        .unwrap_or(Decimal::ZERO))
}

/// Finalizes the host's statement for the period ending at `period_end`, in
/// the caller's transaction: the same statement when it exists already, None
/// when there is nothing to state. The run's set-based finalization with
/// one host, so that both make the same statement.
pub fn finalize_in(
    conn: &mut PgConnection,
    settings: &Settings,
    period: InvoicePeriod,
    host_tenant_id: TenantId,
    period_end: DateTime<Utc>,
) -> Result<Option<api::Statement>, Error> {
    let outcome = finalize_chunk(conn, settings, period, &[host_tenant_id.into()], period_end)?;
    if let Some((_, last_end)) = outcome.conflicts.first() {
        return Err(Error::Conflict(format!(
            "periodEnd: the host has statements up to {last_end}, after {period_end}"
        )));
    }
    match outcome.statements.first() {
        Some(id) => find(conn, host_tenant_id, *id).map(Some),
        None => Ok(None),
    }
}

/// What finalizing one chunk of hosts did.
#[derive(Debug, Default)]
struct ChunkOutcome {
    /// The chunk's statements ending at the period end, new or found, in
    /// host order.
    statements: Vec<Uuid>,
    finalized: usize,
    /// Hosts with statements past the period end already.
    conflicts: Vec<(Uuid, DateTime<Utc>)>,
}

#[derive(QueryableByName)]
struct HostState {
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    host_tenant_id: TenantId,
    #[diesel(sql_type = BigInt)]
    last_number: i64,
    #[diesel(sql_type = Nullable<diesel::sql_types::Uuid>)]
    existing: Option<Uuid>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    last_end: Option<DateTime<Utc>>,
    #[diesel(sql_type = Numeric)]
    opening: Decimal,
}

#[derive(QueryableByName)]
struct Earliest {
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    host_tenant_id: TenantId,
    #[diesel(sql_type = Timestamptz)]
    earliest: DateTime<Utc>,
}

#[derive(QueryableByName)]
struct Finalized {
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    id: Uuid,
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    host_tenant_id: TenantId,
    #[diesel(sql_type = BigInt)]
    number: i64,
    #[diesel(sql_type = Numeric)]
    earnings: Decimal,
    #[diesel(sql_type = Timestamptz)]
    period_start: DateTime<Utc>,
    #[diesel(sql_type = Timestamptz)]
    period_end: DateTime<Utc>,
}

/// The working tables of one chunk, private to the session and gone at
/// commit; dropped first in case the caller's transaction ran a chunk
/// already.
const STATEMENT_RUN_TABLES: &str = "\
    DROP TABLE IF EXISTS pg_temp.statement_run_postings, pg_temp.statement_run_statements, \
        pg_temp.statement_run_lines; \
    CREATE TEMP TABLE statement_run_postings ( \
        host uuid NOT NULL, id text NOT NULL, kind text NOT NULL, created_at timestamptz NOT NULL, \
        host_amount numeric NOT NULL, fee_amount numeric NOT NULL, machine_id uuid, gpu_model text, \
        meter text NOT NULL, seconds bigint NOT NULL, ended_at timestamptz NOT NULL \
    ) ON COMMIT DROP; \
    CREATE TEMP TABLE statement_run_statements ( \
        id uuid PRIMARY KEY, host uuid NOT NULL UNIQUE, number bigint NOT NULL, \
        period_start timestamptz NOT NULL, opening numeric NOT NULL \
    ) ON COMMIT DROP; \
    CREATE TEMP TABLE statement_run_lines ( \
        id bigint NOT NULL, statement_id uuid NOT NULL, position int NOT NULL, machine_id uuid, \
        gpu_model text, meter text NOT NULL, earlier boolean NOT NULL, seconds bigint NOT NULL, \
        fee numeric NOT NULL, net numeric NOT NULL, downtime_credits numeric NOT NULL, postings int NOT NULL \
    ) ON COMMIT DROP;";

/// Finalizes the statements of `hosts` for the period ending at
/// `period_end` in the caller's transaction, with a fixed number of
/// statements whatever the number of hosts: the statements `draft`
/// describes (lines by period side, machine and meter; payouts and
/// adjustments on no line), numbered from each host's counter row, opening
/// at the host's last closing balance.
fn finalize_chunk(
    conn: &mut PgConnection,
    settings: &Settings,
    period: InvoicePeriod,
    hosts: &[Uuid],
    period_end: DateTime<Utc>,
) -> Result<ChunkOutcome, Error> {
    use diesel::sql_types::Array;
    type UuidT = diesel::sql_types::Uuid;

    let currency = settings.currency.as_str();
    let mut hosts = hosts.to_vec();
    hosts.sort_unstable();
    hosts.dedup();
    // The counter rows serialise each host's finalizations and give the
    // numbers; created and locked in host order (no deadlock between runs).
    diesel::sql_query(
        "INSERT INTO billing.statement_counters (host_tenant_id) \
         SELECT h FROM unnest($1::uuid[]) h ORDER BY h ON CONFLICT DO NOTHING",
    )
    .bind::<Array<UuidT>, _>(&hosts)
    .execute(conn)?;
    diesel::sql_query(
        "SELECT 1 FROM billing.statement_counters WHERE host_tenant_id = ANY($1) \
         ORDER BY host_tenant_id FOR UPDATE",
    )
    .bind::<Array<UuidT>, _>(&hosts)
    .execute(conn)?;
    // Read after the locks (a new snapshot).
    let states: Vec<HostState> = diesel::sql_query(
        "SELECT c.host_tenant_id, c.last_number, \
                (SELECT s.id FROM billing.statements s \
                 WHERE s.host_tenant_id = c.host_tenant_id AND s.period_end = $2) AS existing, \
                (SELECT max(s.period_end) FROM billing.statements s \
                 WHERE s.host_tenant_id = c.host_tenant_id) AS last_end, \
                coalesce((SELECT s.closing_balance FROM billing.statements s \
                          WHERE s.host_tenant_id = c.host_tenant_id AND s.status = 'finalized' \
                          ORDER BY s.number DESC LIMIT 1), 0) AS opening \
         FROM billing.statement_counters c WHERE c.host_tenant_id = ANY($1) \
         ORDER BY c.host_tenant_id",
    )
    .bind::<Array<UuidT>, _>(&hosts)
    .bind::<Timestamptz, _>(period_end)
    .load(conn)?;

    let mut outcome = ChunkOutcome::default();
    let mut existing: HashMap<Uuid, Uuid> = HashMap::new();
    let mut open: HashMap<Uuid, (i64, Option<DateTime<Utc>>, Decimal)> = HashMap::new();
    for s in states {
        if let Some(id) = s.existing {
            existing.insert(s.host_tenant_id.into(), id);
        } else if let Some(last_end) = s.last_end.filter(|e| *e > period_end) {
            outcome.conflicts.push((s.host_tenant_id.into(), last_end));
        } else {
            open.insert(
                s.host_tenant_id.into(),
                (s.last_number, s.last_end, s.opening),
            );
        }
    }
    let candidates: Vec<Uuid> = hosts
        .iter()
        .copied()
        .filter(|h| open.contains_key(h))
        .collect();

    let mut created: HashMap<Uuid, Uuid> = HashMap::new();
    if !candidates.is_empty() {
        conn.batch_execute(STATEMENT_RUN_TABLES)?;
        // The platform's fee accounts, looked up once: a posting's fee leg is
        // then found among its own few entries (joining the accounts made
        // the planner scan every fee entry for each posting).
        let fee_accounts: Vec<Uuid> = schema::billing::accounts::table
            .filter(schema::billing::accounts::kind.eq("platform_fee"))
            .select(schema::billing::accounts::id)
            .load(conn)?;
        // The candidates' earnings postings on no statement yet, as
        // `unstated` reads them for one host. A reserved block's release
        // counts as usage and a cancellation penalty as a credit taken
        // from the host (as `draft` counts them), on the machine's
        // `reservation` line.
        let postings = diesel::sql_query(
            "INSERT INTO statement_run_postings \
             SELECT a.tenant_id, t.id, \
                    CASE t.kind WHEN 'escrow_release' THEN 'usage' \
                                WHEN 'escrow_penalty' THEN 'downtime_credit' ELSE t.kind END, \
                    t.created_at, h.amount, \
                    COALESCE((SELECT sum(f.amount) FILTER (WHERE f.account_id = ANY($5)) \
                              FROM billing.entries f WHERE f.transaction_id = t.id), 0), \
                    COALESCE(d.machine_id, x.machine_id, m.machine_id), COALESCE(d.gpu_model, m.gpu_model), \
                    COALESCE(d.meter, CASE WHEN x.transaction_id IS NOT NULL THEN 'reservation' END, m.meter, $4), \
                    coalesce(d.seconds, x.heard_seconds, 0), \
                    coalesce(d.ended_at, x.ended_at, t.created_at) \
             FROM billing.entries h \
             JOIN billing.accounts a ON a.id = h.account_id \
                  AND a.kind = 'host_earnings' AND a.tenant_id = ANY($1) AND a.currency = $2 \
             JOIN billing.transactions t ON t.id = h.transaction_id \
             LEFT JOIN billing.usage_details d ON d.transaction_id = t.id \
             LEFT JOIN billing.escrow_postings x ON x.transaction_id = t.id \
             LEFT JOIN LATERAL ( \
                  SELECT d2.machine_id, d2.gpu_model, d2.meter \
                  FROM billing.transactions u \
                  JOIN billing.usage_details d2 ON d2.transaction_id = u.id \
                  WHERE t.kind = 'downtime_credit' AND u.kind = 'usage' \
                    AND u.instance_id = t.instance_id AND d2.host_tenant_id = a.tenant_id \
                  ORDER BY u.created_at DESC LIMIT 1) m ON true \
             WHERE t.created_at < $3 \
               AND NOT EXISTS (SELECT 1 FROM billing.statement_items s WHERE s.transaction_id = t.id)",
        )
        .bind::<Array<UuidT>, _>(&candidates)
        .bind::<Text, _>(currency)
        .bind::<Timestamptz, _>(period_end)
        .bind::<Text, _>(DEFAULT_METER)
        .bind::<Array<UuidT>, _>(&fee_accounts)
        .execute(conn)?;
        if postings > 0 {
            // Statistics for the planner: without them it guesses a handful
            // of rows and joins the chunk's postings by nested loops.
            conn.batch_execute("ANALYZE statement_run_postings")?;
            created = write_statements(conn, settings, period, &open, period_end)?;
        }
    }
    for h in &hosts {
        if let Some(id) = existing.get(h).or_else(|| created.get(h)) {
            outcome.statements.push(*id);
        }
    }
    outcome.finalized = created.len();
    Ok(outcome)
}

/// Writes the statements of the postings in `statement_run_postings`
/// (hosts in `open`: last number, last period end, opening balance);
/// returns the new statement of each host.
fn write_statements(
    conn: &mut PgConnection,
    settings: &Settings,
    period: InvoicePeriod,
    open: &HashMap<Uuid, (i64, Option<DateTime<Utc>>, Decimal)>,
    period_end: DateTime<Utc>,
) -> Result<HashMap<Uuid, Uuid>, Error> {
    use diesel::sql_types::Array;
    type UuidT = diesel::sql_types::Uuid;

    let earliest: Vec<Earliest> = diesel::sql_query(
        "SELECT host AS host_tenant_id, min(created_at) AS earliest FROM statement_run_postings \
         GROUP BY host ORDER BY host",
    )
    .load(conn)?;
    let mut created = HashMap::with_capacity(earliest.len());
    let (mut ids, mut host_ids, mut numbers, mut starts, mut openings) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for e in earliest {
        let Some((last_number, last_end, opening)) = open.get(&e.host_tenant_id.0) else {
            continue;
        };
        let id = Uuid::now_v7();
        ids.push(id);
        host_ids.push(e.host_tenant_id);
        numbers.push(last_number + 1);
        starts.push(last_end.unwrap_or_else(|| period.start_of(e.earliest)));
        openings.push(*opening);
        created.insert(e.host_tenant_id.into(), id);
    }
    diesel::sql_query(
        "INSERT INTO statement_run_statements (id, host, number, period_start, opening) \
         SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::bigint[], $4::timestamptz[], $5::numeric[])",
    )
    .bind::<Array<UuidT>, _>(&ids)
    .bind::<Array<UuidT>, _>(&host_ids)
    .bind::<Array<BigInt>, _>(&numbers)
    .bind::<Array<Timestamptz>, _>(&starts)
    .bind::<Array<Numeric>, _>(&openings)
    .execute(conn)?;
    conn.batch_execute("ANALYZE statement_run_statements")?;

    // Lines: `draft`'s grouping and order (period side, machine with none
    // first, meter by bytes); ids taken here so that postings are assigned
    // without reading the lines back.
    diesel::sql_query(
        "INSERT INTO statement_run_lines \
         SELECT nextval(pg_get_serial_sequence('billing.statement_lines', 'id')), g.statement_id, \
                (row_number() OVER (PARTITION BY g.statement_id \
                     ORDER BY g.earlier, g.machine_id NULLS FIRST, g.meter COLLATE \"C\") - 1)::int, \
                g.machine_id, g.gpu_model, g.meter, g.earlier, g.seconds, g.fee, g.net, \
                g.downtime_credits, g.postings \
         FROM (SELECT v.id AS statement_id, p.ended_at <= v.period_start AS earlier, p.machine_id, p.meter, \
                      max(p.gpu_model COLLATE \"C\") AS gpu_model, \
                      coalesce(sum(p.seconds) FILTER (WHERE p.kind = 'usage'), 0)::bigint AS seconds, \
                      coalesce(sum(p.fee_amount) FILTER (WHERE p.kind = 'usage'), 0) AS fee, \
                      coalesce(sum(p.host_amount) FILTER (WHERE p.kind = 'usage'), 0) AS net, \
                      coalesce(-sum(p.host_amount) FILTER (WHERE p.kind = 'downtime_credit'), 0) \
                          AS downtime_credits, \
                      count(*)::int AS postings \
               FROM statement_run_postings p JOIN statement_run_statements v ON v.host = p.host \
               WHERE p.kind IN ('usage', 'downtime_credit') \
               GROUP BY 1, 2, 3, 4) g",
    )
    .execute(conn)?;
    conn.batch_execute("ANALYZE statement_run_lines")?;
    // A draft while its lines are written (the database accepts lines only
    // then), finalized before the transaction ends. The totals are the
    // postings' exact sums: no rounding on a statement.
    diesel::sql_query(
        "INSERT INTO billing.statements \
             (id, host_tenant_id, number, period_start, period_end, status, currency, seconds, gross, \
              fee, net, downtime_credits, earnings, adjustments, payouts, opening_balance, closing_balance) \
         SELECT v.id, v.host, v.number, v.period_start, $1, 'draft', $2, s.seconds, s.net + s.fee, \
                s.fee, s.net, s.dc, s.net - s.dc, s.adjustments, s.payouts, v.opening, \
                v.opening + (s.net - s.dc) + s.adjustments - s.payouts \
         FROM statement_run_statements v \
         JOIN (SELECT p.host, \
                      coalesce(sum(p.seconds) FILTER (WHERE p.kind = 'usage'), 0)::bigint AS seconds, \
                      coalesce(sum(p.fee_amount) FILTER (WHERE p.kind = 'usage'), 0) AS fee, \
                      coalesce(sum(p.host_amount) FILTER (WHERE p.kind = 'usage'), 0) AS net, \
                      coalesce(-sum(p.host_amount) FILTER (WHERE p.kind = 'downtime_credit'), 0) AS dc, \
                      coalesce(-sum(p.host_amount) FILTER (WHERE p.kind = 'payout'), 0) AS payouts, \
                      coalesce(sum(p.host_amount) FILTER \
                          (WHERE p.kind NOT IN ('usage', 'downtime_credit', 'payout')), 0) AS adjustments \
               FROM statement_run_postings p GROUP BY p.host) s ON s.host = v.host",
    )
    .bind::<Timestamptz, _>(period_end)
    .bind::<Text, _>(settings.currency.as_str())
    .execute(conn)?;
    diesel::sql_query(
        "INSERT INTO billing.statement_lines \
             (id, statement_id, position, machine_id, gpu_model, meter, earlier_period, seconds, gross, \
              fee, net, downtime_credits, amount, postings) \
         SELECT id, statement_id, position, machine_id, gpu_model, meter, earlier, seconds, net + fee, \
                fee, net, downtime_credits, net - downtime_credits, postings \
         FROM statement_run_lines ORDER BY statement_id, position",
    )
    .execute(conn)?;
    // Usage and downtime credits on their line; payouts and adjustments on
    // the statement only.
    diesel::sql_query(
        "INSERT INTO billing.statement_items (transaction_id, statement_id, line_id) \
         SELECT p.id, v.id, l.id \
         FROM statement_run_postings p \
         JOIN statement_run_statements v ON v.host = p.host \
         LEFT JOIN statement_run_lines l ON p.kind IN ('usage', 'downtime_credit') \
              AND l.statement_id = v.id AND l.earlier = (p.ended_at <= v.period_start) \
              AND coalesce(l.machine_id, '00000000-0000-0000-0000-000000000000'::uuid) \
                  = coalesce(p.machine_id, '00000000-0000-0000-0000-000000000000'::uuid) \
              AND l.meter = p.meter",
    )
    .execute(conn)?;
    let finalized: Vec<Finalized> = diesel::sql_query(
        "UPDATE billing.statements s SET status = 'finalized', finalized_at = now() \
         FROM statement_run_statements v WHERE s.id = v.id \
         RETURNING s.id, s.host_tenant_id, s.number, s.earnings, s.period_start, s.period_end",
    )
    .load(conn)?;
    diesel::sql_query(
        "UPDATE billing.statement_counters c SET last_number = v.number \
         FROM statement_run_statements v WHERE c.host_tenant_id = v.host",
    )
    .execute(conn)?;
    for f in &finalized {
        tracing::info!(host.id = %f.host_tenant_id, statement.id = %f.id, number = f.number, earnings = %f.earnings, "statement finalized");
        crate::metrics::statement_finalized(f.earnings);
    }
    // Hosts' webhooks: one `billing.statement.finalized` each, one statement.
    let at = contracts::time::now();
    let resources: Vec<String> = finalized
        .iter()
        .map(|f| contracts::events::resource::statement(f.id))
        .collect();
    let sequences = platform::sequence::next_many(conn, crate::SCHEMA, &resources)?;
    let events: Vec<_> = finalized
        .iter()
        .zip(sequences)
        .map(|(f, sequence)| {
            (
                contracts::events::kinds::STATEMENT_FINALIZED,
                f.host_tenant_id,
                contracts::events::StatementFinalized {
                    host_tenant_id: f.host_tenant_id,
                    statement_id: StatementId(f.id),
                    number: f.number,
                    earnings: f.earnings,
                    currency: settings.currency.clone(),
                    period_start: f.period_start,
                    period_end: f.period_end,
                    at,
                    sequence,
                },
            )
        })
        .collect();
    crate::events::publish_all(conn, &settings.events_exchange, &events)?;
    Ok(created)
}

/// Finalizes one host's statement for the period ending at `period_end`.
pub async fn finalize_period(
    db: &Db,
    settings: &Settings,
    period: InvoicePeriod,
    host_tenant_id: TenantId,
    period_end: DateTime<Utc>,
) -> Result<Option<api::Statement>, Error> {
    let period_end = crate::invoices::ended(period_end)?;
    let settings = settings.clone();
    db.tx(move |conn| finalize_in(conn, &settings, period, host_tenant_id, period_end))
        .await
}

/// The statement run for a period end (default: the start of the current
/// period, i.e. the end of the last complete one): every host with earnings
/// postings on no statement. Set-based like the invoicing run: hosts in
/// chunks of `RUN_CHUNK`, each chunk one transaction with a fixed number of
/// statements. Running it again returns the same statements.
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
    if let Some(host) = req.host_tenant_id {
        let statement = finalize_period(db, settings, period, host, period_end).await?;
        return Ok(api::RunStatementsResult {
            period_end,
            statements: statement.into_iter().collect(),
        });
    }
    let period_end = crate::invoices::ended(period_end)?;
    #[derive(QueryableByName)]
    struct Host {
        #[diesel(sql_type = diesel::sql_types::Uuid)]
        tenant_id: TenantId,
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
                 UNION SELECT host_tenant_id FROM billing.statements WHERE period_end = $1 \
                 ORDER BY 1",
            )
            .bind::<Timestamptz, _>(period_end)
            .bind::<Text, _>(&currency)
            .load(conn)
            .map_err(Error::from)
        })
        .await?;
    let hosts: Vec<Uuid> = rows.into_iter().map(|r| r.tenant_id.into_uuid()).collect();
    let mut ids = Vec::with_capacity(hosts.len());
    let mut finalized = 0usize;
    for chunk in hosts.chunks(RUN_CHUNK) {
        let (chunk, settings) = (chunk.to_vec(), settings.clone());
        let outcome = db
            .tx(move |conn| finalize_chunk(conn, &settings, period, &chunk, period_end))
            .await?;
        // A host already stated past this end (its late postings wait for
        // its next statement) must not stop everyone else's.
        for (host, last_end) in &outcome.conflicts {
            tracing::info!(host.id = %host, %last_end, "host skipped by the statement run: stated past this end");
        }
        finalized += outcome.finalized;
        ids.extend(outcome.statements);
    }
    tracing::info!(%period_end, hosts = hosts.len(), finalized, statements = ids.len(), "statement run done");
    let statements = db
        .run(move |conn| load_many(conn, &ids).map_err(Error::from))
        .await?;
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
    host_tenant_id: TenantId,
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
            status: StatementStatus::Draft,
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
pub async fn list(db: &Db, host_tenant_id: TenantId) -> Result<Vec<api::Statement>, Error> {
    db.run(move |conn| {
        let rows = statements::table
            .filter(statements::host_tenant_id.eq(host_tenant_id))
            .filter(statements::status.ne(StatementStatus::Draft))
            .order(statements::number.desc())
            .limit(LIST_LIMIT)
            .select(StatementRow::as_select())
            .load(conn)?;
        Ok(with_lines(conn, rows)?)
    })
    .await
}

/// One of the host's statements; NOT_FOUND for another host's.
pub async fn get(db: &Db, host_tenant_id: TenantId, id: Uuid) -> Result<api::Statement, Error> {
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
