//! Renters' invoices (docs/invoices.md). The ledger's usage postings are the
//! source of truth: a line is the exact sum of the renter legs of its
//! postings (one instance, meter and hourly price), rounded half-even once to
//! the currency's minor unit; the difference goes to the rounding account in
//! the finalization's own transaction, so invoice, ledger and rounding
//! reconcile to the cent.
//!
//! Reserved blocks' postings (a purchase into escrow, refunds of silent or
//! cancelled hours, the host's penalty, resale purchases and sales) are on
//! the invoice the same way, each by its renter leg: a line per
//! reservation and kind, the reservation where an instance would be, the
//! kind where a meter would be, GPU-seconds at a price per GPU-hour (facts
//! in `escrow_postings`). Each such posting has one renter leg and is made
//! under that renter's tenant (`escrow::postings`), so the run's set-based
//! statements take them with one more insert into its working table.
//!
//! A posting goes on the tenant's first invoice finalized after it reached
//! the ledger (`invoice_items`, keyed by posting): usage that arrives after
//! its period's invoice was finalized is billed on the next one, as a delta.
//! Finalized invoices are numbered per tenant without gaps and never change
//! but for their status (the database refuses the rest).

use contracts::ids::{InstanceId, InvoiceId, TenantId};
use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Datelike, Days, Months, NaiveTime, SubsecRound, TimeZone, Utc};
use contracts::events::{InvoiceChanged, kinds};
use contracts::states::InvoiceStatus;
use contracts::{api, money};
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Numeric, Text, Timestamptz};
use platform::Db;
use rust_decimal::Decimal;
use schema::billing_invoices::{credit_notes, invoice_counters, invoice_lines, invoices};
use uuid::Uuid;

use crate::ledger::{self, AccountKind, Posting};
use crate::{Error, Settings};

/// The unit of a GPU line's quantity: seconds are what metering measures
/// exactly; an hourly quantity would be a repeating decimal.
pub const UNIT: &str = "second";

/// What a line of `meter` counts (docs/metering.md): GiB-seconds of
/// storage (priced per GB-month), bytes of bandwidth (priced per TB), and
/// seconds otherwise (priced per hour). The posting's `usage_details` hold
/// the quantity in that unit and the price in its own.
pub fn unit_of(meter: &str) -> &'static str {
    if crate::escrow_kinds::is_reservation_line(meter) {
        // A reserved block's lines count its GPUs' seconds, priced per
        // GPU-hour (docs/invoices.md, "Reserved blocks").
        return RESERVATION_UNIT;
    }
    contracts::meters::unit(meter)
}

/// The unit of a reservation line's quantity.
pub const RESERVATION_UNIT: &str = "gpu_second";

/// Tenants finalized per transaction by the run: enough that a chunk's
/// statements amortise, few enough that no transaction holds everything.
pub const RUN_CHUNK: usize = 1000;

/// Invoices read back per query when a run returns them.
const LOAD_BATCH: usize = 1000;

/// Invoices a listing returns at most.
const LIST_LIMIT: i64 = 100;

/// How long an invoice period is (`GPUMARKET_INVOICE_PERIOD`), in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvoicePeriod {
    Monthly,
    Weekly,
    Daily,
}

impl InvoicePeriod {
    pub fn parse(raw: &str) -> Result<Self, Error> {
        match raw.trim() {
            "monthly" => Ok(Self::Monthly),
            "weekly" => Ok(Self::Weekly),
            "daily" => Ok(Self::Daily),
            other => Err(Error::Validation(format!(
                "GPUMARKET_INVOICE_PERIOD: {other:?} is not monthly, weekly or daily"
            ))),
        }
    }

    /// The start of the period `at` falls in.
    pub fn start_of(self, at: DateTime<Utc>) -> DateTime<Utc> {
        let day = at.date_naive();
        let first = match self {
            Self::Monthly => day.with_day(1).unwrap_or(day),
            Self::Weekly => day
                .checked_sub_days(Days::new(u64::from(day.weekday().num_days_from_monday())))
                .unwrap_or(day),
            Self::Daily => day,
        };
        Utc.from_utc_datetime(&first.and_time(NaiveTime::MIN))
    }

    /// The start of the period after the one `at` falls in.
    pub fn next_start(self, at: DateTime<Utc>) -> DateTime<Utc> {
        let start = self.start_of(at);
        let next = match self {
            Self::Monthly => start.checked_add_months(Months::new(1)),
            Self::Weekly => start.checked_add_days(Days::new(7)),
            Self::Daily => start.checked_add_days(Days::new(1)),
        };
        // Only at the end of chrono's range; the period then never ends.
        next.unwrap_or(DateTime::<Utc>::MAX_UTC)
    }
}

/// One usage posting as an invoice sees it: the renter's charge (positive)
/// and what it was for.
#[derive(Debug, Clone, PartialEq)]
pub struct UsagePosting {
    pub transaction_id: String,
    pub instance_id: InstanceId,
    pub meter: String,
    pub seconds: i64,
    pub price_per_hour: Decimal,
    pub started_at: DateTime<Utc>,
    pub ended_at: DateTime<Utc>,
    pub amount: Decimal,
}

/// Lines drafted from postings, with the postings of each line.
#[derive(Debug, Clone)]
pub struct Draft {
    pub lines: Vec<(api::InvoiceLine, Vec<String>)>,
    /// Sum of the rounded lines: what the renter is billed.
    pub total: Decimal,
    /// Exact sum of the postings.
    pub exact_total: Decimal,
    /// `total − exact_total`, the sum of the lines' rounding residues.
    pub rounding: Decimal,
}

/// Groups postings into lines (instance, meter, hourly price, and whether
/// the usage lies before `period_start`), each rounded once, half-even, to
/// the currency's minor unit. Lines come in a stable order.
pub fn draft(postings: &[UsagePosting], period_start: DateTime<Utc>, currency: &str) -> Draft {
    type Key = (bool, Uuid, String, Decimal);
    let mut groups: BTreeMap<Key, Vec<&UsagePosting>> = BTreeMap::new();
    for p in postings {
        let earlier = p.ended_at <= period_start;
        groups
            .entry((
                earlier,
                p.instance_id.into(),
                p.meter.clone(),
                p.price_per_hour,
            ))
            .or_default()
            .push(p);
    }
    let mut lines = Vec::with_capacity(groups.len());
    let (mut total, mut exact_total) = (minor(Decimal::ZERO, currency), Decimal::ZERO);
    for ((earlier, instance_id, meter, price), members) in groups {
        let unit = unit_of(&meter);
        let exact: Decimal = members.iter().map(|p| p.amount).sum();
        let amount = minor(money::round_to_minor(exact, currency), currency);
        let start = members.iter().map(|p| p.started_at).min();
        let end = members.iter().map(|p| p.ended_at).max();
        let (Some(start), Some(end)) = (start, end) else {
            continue;
        };
        total += amount;
        exact_total += exact;
        lines.push((
            api::InvoiceLine {
                instance_id: InstanceId(instance_id),
                meter,
                quantity: members.iter().map(|p| p.seconds).sum(),
                unit: unit.to_owned(),
                unit_price_per_hour: price,
                earlier_period: earlier,
                charge_period_start: start,
                charge_period_end: end,
                postings: i32::try_from(members.len()).unwrap_or(i32::MAX),
                exact_amount: exact,
                amount,
            },
            members.iter().map(|p| p.transaction_id.clone()).collect(),
        ));
    }
    Draft {
        lines,
        total,
        exact_total,
        rounding: total - exact_total,
    }
}

/// A minor-unit amount written with exactly the minor unit's digits (the
/// database hands back 9), so that 0.8 reads 0.80.
fn minor(amount: Decimal, currency: &str) -> Decimal {
    let mut a = amount;
    a.rescale(money::minor_unit_digits(currency));
    a
}

#[derive(QueryableByName)]
struct PostingRow {
    #[diesel(sql_type = Text)]
    id: String,
    #[diesel(sql_type = Nullable<diesel::sql_types::Uuid>)]
    instance_id: Option<Uuid>,
    #[diesel(sql_type = Numeric)]
    amount: Decimal,
    #[diesel(sql_type = Nullable<Text>)]
    meter: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    seconds: Option<i64>,
    #[diesel(sql_type = Nullable<Numeric>)]
    price_per_hour: Option<Decimal>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    started_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    ended_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Timestamptz)]
    created_at: DateTime<Utc>,
}

/// The tenant's usage and reservation postings on no invoice yet that
/// reached the ledger before `before` (all of them when None), oldest
/// first. A reservation posting is read like usage from its facts
/// (`escrow_postings`): the reservation stands where the instance does, its
/// line kind where the meter does.
fn uninvoiced(
    conn: &mut PgConnection,
    tenant_id: TenantId,
    currency: &str,
    before: Option<DateTime<Utc>>,
) -> QueryResult<(Vec<UsagePosting>, Option<DateTime<Utc>>)> {
    let rows: Vec<PostingRow> = diesel::sql_query(
        format!(
            "SELECT t.id, coalesce(t.instance_id, x.reservation_id) AS instance_id, \
                    -e.amount AS amount, coalesce(d.meter, x.line) AS meter, \
                    coalesce(d.quantity, d.seconds, x.quantity) AS seconds, \
                    coalesce(d.unit_price, d.price_per_hour, x.unit_price) AS price_per_hour, \
                    coalesce(d.started_at, x.started_at) AS started_at, \
                    coalesce(d.ended_at, x.ended_at) AS ended_at, t.created_at \
             FROM billing.transactions t \
             JOIN billing.entries e ON e.transaction_id = t.id \
             JOIN billing.accounts a ON a.id = e.account_id \
                  AND a.kind = 'renter_balance' AND a.tenant_id = t.tenant_id \
             LEFT JOIN billing.usage_details d ON d.transaction_id = t.id \
             LEFT JOIN billing.escrow_postings x ON x.transaction_id = t.id \
             WHERE t.kind IN ('usage', {escrow}) AND t.tenant_id = $1 AND a.currency = $2 \
               AND ($3::timestamptz IS NULL OR t.created_at < $3) \
               AND NOT EXISTS (SELECT 1 FROM billing.invoice_items i WHERE i.transaction_id = t.id) \
             ORDER BY t.created_at, t.id",
            escrow = crate::escrow_kinds::KINDS_SQL
        ),
    )
    .bind::<diesel::sql_types::Uuid, _>(tenant_id)
    .bind::<Text, _>(currency)
    .bind::<Nullable<Timestamptz>, _>(before)
    .load(conn)?;
    let earliest = rows.first().map(|r| r.created_at);
    // A posting older than `usage_details` whose description did not parse
    // keeps its amount (the truth) with what is known of the rest.
    let postings = rows
        .into_iter()
        .map(|r| UsagePosting {
            transaction_id: r.id,
            instance_id: InstanceId(r.instance_id.unwrap_or_default()),
            meter: r.meter.unwrap_or_else(|| "unknown".into()),
            seconds: r.seconds.unwrap_or(0),
            price_per_hour: r.price_per_hour.unwrap_or_default(),
            started_at: r.started_at.unwrap_or(r.created_at),
            ended_at: r.ended_at.unwrap_or(r.created_at),
            amount: r.amount,
        })
        .collect();
    Ok((postings, earliest))
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = invoices)]
struct InvoiceRow {
    id: Uuid,
    tenant_id: TenantId,
    number: i64,
    period_start: DateTime<Utc>,
    period_end: DateTime<Utc>,
    status: InvoiceStatus,
    currency: String,
    subtotal: Decimal,
    total: Decimal,
    exact_total: Decimal,
    rounding: Decimal,
    finalized_at: Option<DateTime<Utc>>,
    paid_at: Option<DateTime<Utc>>,
    voided_at: Option<DateTime<Utc>>,
    void_reason: Option<String>,
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = credit_notes)]
struct CreditNoteRow {
    id: Uuid,
    tenant_id: TenantId,
    invoice_id: Uuid,
    number: i64,
    amount: Decimal,
    currency: String,
    reason: String,
    created_at: DateTime<Utc>,
}

impl From<CreditNoteRow> for api::CreditNote {
    fn from(c: CreditNoteRow) -> Self {
        let amount = minor(c.amount, &c.currency);
        Self {
            id: c.id,
            tenant_id: c.tenant_id,
            invoice_id: InvoiceId(c.invoice_id),
            number: c.number,
            amount,
            currency: c.currency,
            reason: c.reason,
            created_at: c.created_at,
        }
    }
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = invoice_lines)]
struct LineRow {
    invoice_id: Uuid,
    instance_id: InstanceId,
    meter: String,
    quantity: i64,
    unit: String,
    unit_price_per_hour: Decimal,
    earlier_period: bool,
    charge_period_start: DateTime<Utc>,
    charge_period_end: DateTime<Utc>,
    postings: i32,
    exact_amount: Decimal,
    amount: Decimal,
}

impl From<LineRow> for api::InvoiceLine {
    fn from(l: LineRow) -> Self {
        Self {
            instance_id: l.instance_id,
            meter: l.meter,
            quantity: l.quantity,
            unit: l.unit,
            unit_price_per_hour: l.unit_price_per_hour,
            earlier_period: l.earlier_period,
            charge_period_start: l.charge_period_start,
            charge_period_end: l.charge_period_end,
            postings: l.postings,
            exact_amount: l.exact_amount,
            amount: l.amount,
        }
    }
}

/// Stored invoices with their lines, in the order given (lines and notes
/// grouped by invoice in one pass, so that a run's thousands of invoices
/// load in linear time).
fn with_lines(conn: &mut PgConnection, rows: Vec<InvoiceRow>) -> QueryResult<Vec<api::Invoice>> {
    let ids: Vec<Uuid> = rows.iter().map(|r| r.id).collect();
    let mut lines: HashMap<Uuid, Vec<LineRow>> = HashMap::new();
    for line in invoice_lines::table
        .filter(invoice_lines::invoice_id.eq_any(&ids))
        .order((invoice_lines::invoice_id, invoice_lines::position))
        .select(LineRow::as_select())
        .load::<LineRow>(conn)?
    {
        lines.entry(line.invoice_id).or_default().push(line);
    }
    let mut notes: HashMap<Uuid, Vec<CreditNoteRow>> = HashMap::new();
    for note in credit_notes::table
        .filter(credit_notes::invoice_id.eq_any(&ids))
        .order(credit_notes::number)
        .select(CreditNoteRow::as_select())
        .load::<CreditNoteRow>(conn)?
    {
        notes.entry(note.invoice_id).or_default().push(note);
    }
    Ok(rows
        .into_iter()
        .map(|r| {
            let mine = lines.remove(&r.id).unwrap_or_default();
            let my_notes = notes.remove(&r.id).unwrap_or_default();
            let currency = r.currency.clone();
            api::Invoice {
                id: Some(InvoiceId(r.id)),
                tenant_id: r.tenant_id,
                number: Some(r.number),
                status: r.status,
                period_start: r.period_start,
                period_end: r.period_end,
                currency: r.currency,
                subtotal: minor(r.subtotal, &currency),
                total: minor(r.total, &currency),
                exact_total: r.exact_total,
                rounding: r.rounding,
                finalized_at: r.finalized_at,
                paid_at: r.paid_at,
                voided_at: r.voided_at,
                void_reason: r.void_reason,
                credit_notes: my_notes.into_iter().map(Into::into).collect(),
                lines: mine
                    .into_iter()
                    .map(|l| {
                        let amount = minor(l.amount, &currency);
                        api::InvoiceLine { amount, ..l.into() }
                    })
                    .collect(),
            }
        })
        .collect())
}

/// Stored invoices by id, in the order given, loaded a batch at a time.
fn load_many(conn: &mut PgConnection, ids: &[Uuid]) -> QueryResult<Vec<api::Invoice>> {
    let mut out = Vec::with_capacity(ids.len());
    for batch in ids.chunks(LOAD_BATCH) {
        let mut rows: HashMap<Uuid, InvoiceRow> = invoices::table
            .filter(invoices::id.eq_any(batch))
            .select(InvoiceRow::as_select())
            .load::<InvoiceRow>(conn)?
            .into_iter()
            .map(|r| (r.id, r))
            .collect();
        let ordered: Vec<InvoiceRow> = batch.iter().filter_map(|id| rows.remove(id)).collect();
        out.extend(with_lines(conn, ordered)?);
    }
    Ok(out)
}

fn find(conn: &mut PgConnection, tenant_id: TenantId, id: Uuid) -> Result<api::Invoice, Error> {
    let row = invoices::table
        .filter(invoices::id.eq(id))
        .filter(invoices::tenant_id.eq(tenant_id))
        .select(InvoiceRow::as_select())
        .first(conn)
        .optional()?
        .ok_or_else(|| Error::NotFound(format!("invoice {id} not found")))?;
    with_lines(conn, vec![row])?
        .pop()
        .ok_or_else(|| Error::NotFound(format!("invoice {id} not found")))
}

/// Finalizes the tenant's invoice for the period ending at `period_end`, in
/// the caller's transaction: the same invoice when it exists already, None
/// when there is nothing to invoice. The run's set-based finalization with
/// one tenant, so that both make the same invoice.
pub fn finalize_in(
    conn: &mut PgConnection,
    settings: &Settings,
    period: InvoicePeriod,
    tenant_id: TenantId,
    period_end: DateTime<Utc>,
) -> Result<Option<api::Invoice>, Error> {
    let outcome = finalize_chunk(conn, settings, period, &[tenant_id.into()], period_end)?;
    if let Some((_, last_end)) = outcome.conflicts.first() {
        return Err(Error::Conflict(format!(
            "periodEnd: the tenant is invoiced up to {last_end}, after {period_end}"
        )));
    }
    match outcome.invoices.first() {
        Some(id) => find(conn, tenant_id, *id).map(Some),
        None => Ok(None),
    }
}

/// What finalizing one chunk of tenants did.
#[derive(Debug, Default)]
pub(crate) struct ChunkOutcome {
    /// The chunk's invoices ending at the period end, finalized now or
    /// found finalized, in tenant order.
    pub invoices: Vec<Uuid>,
    /// How many of them this chunk finalized.
    pub finalized: usize,
    /// Tenants invoiced past the period end already (their last end): their
    /// postings wait for their next invoice.
    pub conflicts: Vec<(Uuid, DateTime<Utc>)>,
}

#[derive(QueryableByName)]
struct TenantState {
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    tenant_id: TenantId,
    #[diesel(sql_type = BigInt)]
    last_number: i64,
    #[diesel(sql_type = Nullable<diesel::sql_types::Uuid>)]
    existing: Option<Uuid>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    last_end: Option<DateTime<Utc>>,
}

#[derive(QueryableByName)]
struct Earliest {
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    tenant_id: TenantId,
    #[diesel(sql_type = Timestamptz)]
    earliest: DateTime<Utc>,
}

#[derive(QueryableByName)]
struct MeterRow {
    #[diesel(sql_type = Text)]
    meter: String,
}

#[derive(QueryableByName)]
struct Finalized {
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    id: Uuid,
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    tenant_id: TenantId,
    #[diesel(sql_type = BigInt)]
    number: i64,
    #[diesel(sql_type = Numeric)]
    total: Decimal,
    #[diesel(sql_type = Text)]
    status: InvoiceStatus,
    #[diesel(sql_type = Timestamptz)]
    period_start: DateTime<Utc>,
    #[diesel(sql_type = Timestamptz)]
    period_end: DateTime<Utc>,
}

impl Finalized {
    fn event(&self, currency: &str) -> InvoiceChanged {
        InvoiceChanged {
            tenant_id: self.tenant_id,
            invoice_id: InvoiceId(self.id),
            number: self.number,
            total: self.total,
            currency: currency.to_owned(),
            status: self.status,
            period_start: self.period_start,
            period_end: self.period_end,
            at: contracts::time::now(),
            // Numbered by `announce`.
            sequence: 0,
        }
    }
}

/// `billing.invoice.finalized` for each invoice, and `billing.invoice.paid`
/// for those paid now, in one statement (renters' webhooks), each numbered
/// within its invoice (an invoice paid at finalization: 1 then 2).
fn announce(
    conn: &mut PgConnection,
    settings: &Settings,
    invoices: &[Finalized],
    finalized: bool,
) -> Result<(), diesel::result::Error> {
    let currency = settings.currency.as_str();
    let mut events = Vec::new();
    for i in invoices {
        if finalized {
            events.push((kinds::INVOICE_FINALIZED, i.tenant_id, i.event(currency)));
        }
        if i.status == InvoiceStatus::Paid {
            events.push((kinds::INVOICE_PAID, i.tenant_id, i.event(currency)));
        }
    }
    let resources: Vec<String> = events
        .iter()
        .map(|(_, _, e)| contracts::events::resource::invoice(e.invoice_id.into()))
        .collect();
    let sequences = platform::sequence::next_many(conn, crate::SCHEMA, &resources)?;
    for ((_, _, event), sequence) in events.iter_mut().zip(sequences) {
        event.sequence = sequence;
    }
    crate::events::publish_all(conn, &settings.events_exchange, &events)
}

/// SQL for `x` rounded half-even to `digits` decimals, as
/// `money::round_to_minor` does (Postgres's `round` goes half away from
/// zero): a tie goes to the even neighbour.
pub fn half_even_sql(x: &str, digits: u32) -> String {
    let unit = Decimal::new(1, digits);
    let half = Decimal::new(5, digits + 1);
    let scale = Decimal::from(10i64.pow(digits));
    format!(
        "(CASE WHEN abs({x} - trunc({x}, {digits})) = {half} \
              THEN trunc({x}, {digits}) + CASE WHEN mod(trunc({x} * {scale}), 2) = 0 THEN 0 \
                                               ELSE sign({x}) * {unit} END \
              ELSE round({x}, {digits}) END)"
    )
}

/// The working tables of one chunk, private to the session and gone at
/// commit; dropped first in case the caller's transaction ran a chunk
/// already.
const INVOICE_RUN_TABLES: &str = "\
    DROP TABLE IF EXISTS pg_temp.invoice_run_postings, pg_temp.invoice_run_invoices, pg_temp.invoice_run_lines; \
    CREATE TEMP TABLE invoice_run_postings ( \
        tenant_id uuid NOT NULL, id text NOT NULL, amount numeric NOT NULL, instance_id uuid NOT NULL, \
        meter text NOT NULL, quantity bigint NOT NULL, price numeric NOT NULL, \
        started_at timestamptz NOT NULL, ended_at timestamptz NOT NULL, created_at timestamptz NOT NULL \
    ) ON COMMIT DROP; \
    CREATE TEMP TABLE invoice_run_invoices ( \
        id uuid PRIMARY KEY, tenant_id uuid NOT NULL UNIQUE, number bigint NOT NULL, period_start timestamptz NOT NULL \
    ) ON COMMIT DROP; \
    CREATE TEMP TABLE invoice_run_lines ( \
        id bigint NOT NULL, invoice_id uuid NOT NULL, position int NOT NULL, instance_id uuid NOT NULL, \
        meter text NOT NULL, quantity bigint NOT NULL, price numeric NOT NULL, earlier boolean NOT NULL, \
        charge_start timestamptz NOT NULL, charge_end timestamptz NOT NULL, postings int NOT NULL, \
        exact numeric NOT NULL, amount numeric NOT NULL \
    ) ON COMMIT DROP;";

/// Finalizes the invoices of `tenants` for the period ending at
/// `period_end` in the caller's transaction, with a fixed number of
/// statements whatever the number of tenants: the same invoices
/// `draft` describes (lines grouped by period side, instance, meter and
/// price, each rounded half-even once), numbered from each tenant's counter
/// row, with the rounding postings. A tenant's invoice for this end that
/// exists already is returned as it is.
pub(crate) fn finalize_chunk(
    conn: &mut PgConnection,
    settings: &Settings,
    period: InvoicePeriod,
    tenants: &[Uuid],
    period_end: DateTime<Utc>,
) -> Result<ChunkOutcome, Error> {
    use diesel::sql_types::Array;
    type UuidT = diesel::sql_types::Uuid;

    let currency = settings.currency.as_str();
    let mut tenants = tenants.to_vec();
    tenants.sort_unstable();
    tenants.dedup();
    // The counter rows serialise each tenant's finalizations and give the
    // numbers. Created and locked in tenant order, so that two runs over
    // overlapping chunks cannot deadlock.
    diesel::sql_query(
        "INSERT INTO billing.invoice_counters (tenant_id) \
         SELECT t FROM unnest($1::uuid[]) t ORDER BY t ON CONFLICT DO NOTHING",
    )
    .bind::<Array<UuidT>, _>(&tenants)
    .execute(conn)?;
    diesel::sql_query(
        "SELECT 1 FROM billing.invoice_counters WHERE tenant_id = ANY($1) \
         ORDER BY tenant_id FOR UPDATE",
    )
    .bind::<Array<UuidT>, _>(&tenants)
    .execute(conn)?;
    // Read after the locks (a new snapshot): a finalization that held one
    // has committed its invoice by now.
    let states: Vec<TenantState> = diesel::sql_query(
        "SELECT c.tenant_id, c.last_number, \
                (SELECT i.id FROM billing.invoices i \
                 WHERE i.tenant_id = c.tenant_id AND i.period_end = $2) AS existing, \
                (SELECT max(i.period_end) FROM billing.invoices i \
                 WHERE i.tenant_id = c.tenant_id) AS last_end \
         FROM billing.invoice_counters c WHERE c.tenant_id = ANY($1) ORDER BY c.tenant_id",
    )
    .bind::<Array<UuidT>, _>(&tenants)
    .bind::<Timestamptz, _>(period_end)
    .load(conn)?;

    let mut outcome = ChunkOutcome::default();
    let mut existing: HashMap<Uuid, Uuid> = HashMap::new();
    let mut open: HashMap<Uuid, (i64, Option<DateTime<Utc>>)> = HashMap::new();
    for s in states {
        if let Some(id) = s.existing {
            existing.insert(s.tenant_id.into(), id);
        } else if let Some(last_end) = s.last_end.filter(|e| *e > period_end) {
            outcome.conflicts.push((s.tenant_id.into(), last_end));
        } else {
            open.insert(s.tenant_id.into(), (s.last_number, s.last_end));
        }
    }
    let candidates: Vec<Uuid> = tenants
        .iter()
        .copied()
        .filter(|t| open.contains_key(t))
        .collect();

    let mut created: HashMap<Uuid, Uuid> = HashMap::new();
    if !candidates.is_empty() {
        conn.batch_execute(INVOICE_RUN_TABLES)?;
        // The candidates' usage postings on no invoice yet, as `uninvoiced`
        // reads them for one tenant. Each posting's legs are found by its
        // own id (three rows; the fence `OFFSET 0` keeps the planner from
        // reaching them through the renter's account instead, whose entries
        // grow with its whole history), and the accounts by the chunk's
        // tenants, so that a chunk costs what it holds and a run over many
        // chunks stays linear in the postings.
        let postings = diesel::sql_query(
            "INSERT INTO invoice_run_postings \
             SELECT t.tenant_id, t.id, -e.amount, \
                    coalesce(t.instance_id, '00000000-0000-0000-0000-000000000000'::uuid), \
                    coalesce(d.meter, 'unknown'), coalesce(d.quantity, d.seconds, 0), \
                    coalesce(d.unit_price, d.price_per_hour, 0), \
                    coalesce(d.started_at, t.created_at), coalesce(d.ended_at, t.created_at), \
                    t.created_at \
             FROM billing.transactions t \
             CROSS JOIN LATERAL (SELECT e.amount, e.account_id FROM billing.entries e \
                                 WHERE e.transaction_id = t.id OFFSET 0) e \
             JOIN billing.accounts a ON a.id = e.account_id \
                  AND a.kind = 'renter_balance' AND a.tenant_id = t.tenant_id \
                  AND a.tenant_id = ANY($1) \
             LEFT JOIN billing.usage_details d ON d.transaction_id = t.id \
             WHERE t.kind = 'usage' AND t.tenant_id = ANY($1) AND a.currency = $2 \
               AND t.created_at < $3 \
               AND NOT EXISTS (SELECT 1 FROM billing.invoice_items i WHERE i.transaction_id = t.id)",
        )
        .bind::<Array<UuidT>, _>(&candidates)
        .bind::<Text, _>(currency)
        .bind::<Timestamptz, _>(period_end)
        .execute(conn)?;
        // Reservation postings (purchases, refunds, penalties, resales) the
        // same way, each by its renter leg, with its facts: its own
        // statement, so the usage one above keeps its plan.
        let reserved = diesel::sql_query(format!(
            "INSERT INTO invoice_run_postings \
             SELECT t.tenant_id, t.id, -e.amount, x.reservation_id, x.line, x.quantity, \
                    x.unit_price, x.started_at, x.ended_at, t.created_at \
             FROM billing.transactions t \
             CROSS JOIN LATERAL (SELECT e.amount, e.account_id FROM billing.entries e \
                                 WHERE e.transaction_id = t.id OFFSET 0) e \
             JOIN billing.accounts a ON a.id = e.account_id \
                  AND a.kind = 'renter_balance' AND a.tenant_id = t.tenant_id \
                  AND a.tenant_id = ANY($1) \
             JOIN billing.escrow_postings x ON x.transaction_id = t.id \
             WHERE t.kind IN ({escrow}) AND t.tenant_id = ANY($1) AND a.currency = $2 \
               AND t.created_at < $3 \
               AND NOT EXISTS (SELECT 1 FROM billing.invoice_items i WHERE i.transaction_id = t.id)",
            escrow = crate::escrow_kinds::KINDS_SQL
        ))
        .bind::<Array<UuidT>, _>(&candidates)
        .bind::<Text, _>(currency)
        .bind::<Timestamptz, _>(period_end)
        .execute(conn)?;
        if postings + reserved > 0 {
            // Statistics for the planner: without them it guesses a handful
            // of rows and joins the chunk's postings by nested loops.
            conn.batch_execute("ANALYZE invoice_run_postings")?;
            created = write_invoices(conn, settings, period, &open, period_end)?;
        }
    }
    for t in &tenants {
        if let Some(id) = existing.get(t).or_else(|| created.get(t)) {
            outcome.invoices.push(*id);
        }
    }
    outcome.finalized = created.len();
    Ok(outcome)
}

/// Writes the invoices of the postings in `invoice_run_postings` (tenants
/// in `open`: their last number and last period end); returns the new
/// invoice of each tenant.
fn write_invoices(
    conn: &mut PgConnection,
    settings: &Settings,
    period: InvoicePeriod,
    open: &HashMap<Uuid, (i64, Option<DateTime<Utc>>)>,
    period_end: DateTime<Utc>,
) -> Result<HashMap<Uuid, Uuid>, Error> {
    use diesel::sql_types::Array;
    type UuidT = diesel::sql_types::Uuid;

    let currency = settings.currency.as_str();
    let digits = money::minor_unit_digits(currency);
    // Each invoice starts where the tenant's last one ended, or at the
    // start of the period of its earliest posting; numbered from the
    // counter. Decided here so that one `InvoicePeriod` rule serves both.
    let earliest: Vec<Earliest> = diesel::sql_query(
        "SELECT tenant_id, min(created_at) AS earliest FROM invoice_run_postings \
         GROUP BY tenant_id ORDER BY tenant_id",
    )
    .load(conn)?;
    let mut created = HashMap::with_capacity(earliest.len());
    let (mut ids, mut tenant_ids, mut numbers, mut starts) = (
        Vec::with_capacity(earliest.len()),
        Vec::with_capacity(earliest.len()),
        Vec::with_capacity(earliest.len()),
        Vec::with_capacity(earliest.len()),
    );
    for e in earliest {
        let Some((last_number, last_end)) = open.get(&e.tenant_id.0) else {
            continue;
        };
        let id = Uuid::now_v7();
        ids.push(id);
        tenant_ids.push(e.tenant_id);
        numbers.push(last_number + 1);
        starts.push(last_end.unwrap_or_else(|| period.start_of(e.earliest)));
        created.insert(e.tenant_id.into(), id);
    }
    diesel::sql_query(
        "INSERT INTO invoice_run_invoices (id, tenant_id, number, period_start) \
         SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::bigint[], $4::timestamptz[])",
    )
    .bind::<Array<UuidT>, _>(&ids)
    .bind::<Array<UuidT>, _>(&tenant_ids)
    .bind::<Array<BigInt>, _>(&numbers)
    .bind::<Array<Timestamptz>, _>(&starts)
    .execute(conn)?;
    conn.batch_execute("ANALYZE invoice_run_invoices")?;

    // Lines: `draft`'s grouping and order (period side, instance, meter by
    // bytes, price), each the exact sum rounded once. Their ids are taken
    // here so that the postings can be assigned without reading them back.
    diesel::sql_query(format!(
        "INSERT INTO invoice_run_lines \
         SELECT nextval(pg_get_serial_sequence('billing.invoice_lines', 'id')), g.invoice_id, \
                (row_number() OVER (PARTITION BY g.invoice_id \
                     ORDER BY g.earlier, g.instance_id, g.meter COLLATE \"C\", g.price) - 1)::int, \
                g.instance_id, g.meter, g.quantity, g.price, g.earlier, g.charge_start, g.charge_end, \
                g.postings, g.exact, {rounded} \
         FROM (SELECT v.id AS invoice_id, p.ended_at <= v.period_start AS earlier, p.instance_id, \
                      p.meter, p.price, sum(p.quantity)::bigint AS quantity, \
                      min(p.started_at) AS charge_start, max(p.ended_at) AS charge_end, \
                      count(*)::int AS postings, sum(p.amount) AS exact \
               FROM invoice_run_postings p JOIN invoice_run_invoices v ON v.tenant_id = p.tenant_id \
               GROUP BY 1, 2, 3, 4, 5) g",
        rounded = half_even_sql("g.exact", digits),
    ))
    .execute(conn)?;
    conn.batch_execute("ANALYZE invoice_run_lines")?;
    // The unit of each meter, from the one rule `unit_of`.
    let meters: Vec<MeterRow> =
        diesel::sql_query("SELECT DISTINCT meter FROM invoice_run_lines").load(conn)?;
    let units: Vec<&str> = meters.iter().map(|m| unit_of(&m.meter)).collect();
    let meters: Vec<&str> = meters.iter().map(|m| m.meter.as_str()).collect();

    // A draft while its lines are written (the database accepts lines only
    // then), finalized before the transaction ends.
    diesel::sql_query(
        "INSERT INTO billing.invoices \
             (id, tenant_id, number, period_start, period_end, status, currency, \
              subtotal, total, exact_total, rounding) \
         SELECT v.id, v.tenant_id, v.number, v.period_start, $1, 'draft', $2, \
                l.total, l.total, l.exact, l.total - l.exact \
         FROM invoice_run_invoices v \
         JOIN (SELECT invoice_id, sum(amount) AS total, sum(exact) AS exact \
               FROM invoice_run_lines GROUP BY invoice_id) l ON l.invoice_id = v.id",
    )
    .bind::<Timestamptz, _>(period_end)
    .bind::<Text, _>(currency)
    .execute(conn)?;
    diesel::sql_query(
        "INSERT INTO billing.invoice_lines \
             (id, invoice_id, position, instance_id, meter, quantity, unit, unit_price_per_hour, \
              earlier_period, charge_period_start, charge_period_end, postings, exact_amount, amount) \
         SELECT l.id, l.invoice_id, l.position, l.instance_id, l.meter, l.quantity, \
                coalesce(u.unit, 'second'), l.price, l.earlier, l.charge_start, l.charge_end, \
                l.postings, l.exact, l.amount \
         FROM invoice_run_lines l \
         LEFT JOIN unnest($1::text[], $2::text[]) u(meter, unit) ON u.meter = l.meter \
         ORDER BY l.invoice_id, l.position",
    )
    .bind::<Array<Text>, _>(&meters)
    .bind::<Array<Text>, _>(&units)
    .execute(conn)?;
    diesel::sql_query(
        "INSERT INTO billing.invoice_items (transaction_id, invoice_id, line_id) \
         SELECT p.id, v.id, l.id \
         FROM invoice_run_postings p \
         JOIN invoice_run_invoices v ON v.tenant_id = p.tenant_id \
         JOIN invoice_run_lines l ON l.invoice_id = v.id \
              AND l.earlier = (p.ended_at <= v.period_start) AND l.instance_id = p.instance_id \
              AND l.meter = p.meter AND l.price = p.price",
    )
    .execute(conn)?;

    // The renter is billed the rounded lines; the ledger charged the exact
    // amounts. The residue moves between the renter and the rounding account
    // so that the renter's usage debits equal the invoice to the cent: one
    // balanced posting per invoice, as `ledger::post` writes it.
    #[derive(QueryableByName)]
    struct Any {
        #[diesel(sql_type = diesel::sql_types::Bool)]
        any: bool,
    }
    let any_rounding = diesel::sql_query(
        "SELECT EXISTS (SELECT 1 FROM invoice_run_lines WHERE amount <> exact) AS any",
    )
    .get_result::<Any>(conn)?
    .any;
    if !any_rounding {
        return finish_invoices(conn, settings, created);
    }
    let rounding = ledger::account(conn, AccountKind::Rounding, None, currency)?;
    diesel::sql_query(
        "INSERT INTO billing.transactions (id, kind, tenant_id, description) \
         SELECT 'invoice_rounding:' || i.id, 'rounding', i.tenant_id, \
                'rounding of invoice ' || i.number || ' to the ' || $1 || ' minor unit' \
         FROM billing.invoices i JOIN invoice_run_invoices v ON v.id = i.id \
         WHERE i.rounding <> 0 ORDER BY i.tenant_id",
    )
    .bind::<Text, _>(currency)
    .execute(conn)?;
    diesel::sql_query(
        "INSERT INTO billing.entries (transaction_id, account_id, amount) \
         SELECT 'invoice_rounding:' || i.id, x.account_id, x.amount \
         FROM billing.invoices i JOIN invoice_run_invoices v ON v.id = i.id \
         JOIN billing.accounts a ON a.kind = 'renter_balance' AND a.tenant_id = i.tenant_id \
              AND a.currency = $1 \
         CROSS JOIN LATERAL (VALUES (a.id, -i.rounding, 0), ($2, i.rounding, 1)) x(account_id, amount, leg) \
         WHERE i.rounding <> 0 ORDER BY i.tenant_id, x.leg",
    )
    .bind::<Text, _>(currency)
    .bind::<UuidT, _>(rounding)
    .execute(conn)?;
    // The accounts are locked in id order first, as usage ingest and
    // `ledger::move_balances` lock them (an `UPDATE ... FROM` locks in its
    // plan's order), so a run and a concurrent ingest batch queue instead of
    // deadlocking on a renter's account and the rounding account.
    diesel::sql_query(
        "SELECT a.id FROM billing.accounts a \
         WHERE a.id = $2 OR a.id IN ( \
               SELECT r.id FROM billing.invoices i JOIN invoice_run_invoices v ON v.id = i.id \
               JOIN billing.accounts r ON r.kind = 'renter_balance' AND r.tenant_id = i.tenant_id \
                    AND r.currency = $1 \
               WHERE i.rounding <> 0) \
         ORDER BY a.id FOR NO KEY UPDATE",
    )
    .bind::<Text, _>(currency)
    .bind::<UuidT, _>(rounding)
    .execute(conn)?;
    diesel::sql_query(
        "UPDATE billing.accounts a SET balance = a.balance + d.delta \
         FROM (SELECT r.id AS account_id, -i.rounding AS delta \
               FROM billing.invoices i JOIN invoice_run_invoices v ON v.id = i.id \
               JOIN billing.accounts r ON r.kind = 'renter_balance' AND r.tenant_id = i.tenant_id \
                    AND r.currency = $1 \
               WHERE i.rounding <> 0 \
               UNION ALL \
               SELECT $2, sum(i.rounding) \
               FROM billing.invoices i JOIN invoice_run_invoices v ON v.id = i.id \
               WHERE i.rounding <> 0 HAVING count(*) > 0) d \
         WHERE a.id = d.account_id",
    )
    .bind::<Text, _>(currency)
    .bind::<UuidT, _>(rounding)
    .execute(conn)?;
    finish_invoices(conn, settings, created)
}

/// Finalizes the chunk's drafts (paid unless the renter is overdrawn) and
/// bumps the counters.
fn finish_invoices(
    conn: &mut PgConnection,
    settings: &Settings,
    created: HashMap<Uuid, Uuid>,
) -> Result<HashMap<Uuid, Uuid>, Error> {
    let currency = settings.currency.as_str();
    // Prepaid: the balance already paid for the usage unless it is
    // overdrawn, in which case the invoice stays open until a top-up covers
    // it.
    let finalized: Vec<Finalized> = diesel::sql_query(
        "UPDATE billing.invoices i SET \
             status = CASE WHEN coalesce(a.balance, 0) >= 0 THEN 'paid' ELSE 'finalized' END, \
             finalized_at = now(), \
             paid_at = CASE WHEN coalesce(a.balance, 0) >= 0 THEN now() END, \
             rounding_transaction_id = CASE WHEN i.rounding <> 0 THEN 'invoice_rounding:' || i.id END \
         FROM invoice_run_invoices v \
         LEFT JOIN billing.accounts a ON a.kind = 'renter_balance' AND a.tenant_id = v.tenant_id \
              AND a.currency = $1 \
         WHERE i.id = v.id \
         RETURNING i.id, i.tenant_id, i.number, i.total, i.status, i.period_start, i.period_end",
    )
    .bind::<Text, _>(currency)
    .load(conn)?;
    diesel::sql_query(
        "UPDATE billing.invoice_counters c SET last_number = v.number \
         FROM invoice_run_invoices v WHERE c.tenant_id = v.tenant_id",
    )
    .execute(conn)?;
    for f in &finalized {
        tracing::info!(tenant.id = %f.tenant_id, invoice.id = %f.id, number = f.number, total = %f.total, "invoice finalized");
        crate::metrics::invoice_finalized(f.total);
    }
    announce(conn, settings, &finalized, true)?;
    Ok(created)
}

/// Finalizes one tenant's invoice for the period ending at `period_end`.
pub async fn finalize_period(
    db: &Db,
    settings: &Settings,
    period: InvoicePeriod,
    tenant_id: TenantId,
    period_end: DateTime<Utc>,
) -> Result<Option<api::Invoice>, Error> {
    let period_end = ended(period_end)?;
    let settings = settings.clone();
    db.tx(move |conn| finalize_in(conn, &settings, period, tenant_id, period_end))
        .await
}

/// A period end to finalize (an invoice or a statement): cut to the
/// microseconds the database keeps, so a repeat with the same instant finds
/// what it stored, and refused when it is still ahead (usage could still
/// arrive within it).
pub fn ended(period_end: DateTime<Utc>) -> Result<DateTime<Utc>, Error> {
    let period_end = period_end.trunc_subsecs(6);
    if period_end > Utc::now() {
        return Err(Error::Validation(
            "periodEnd: a period that has not ended cannot be finalized".into(),
        ));
    }
    Ok(period_end)
}

/// The invoicing run for a period end (default: the start of the current
/// period, i.e. the end of the last complete one): every tenant with usage
/// (or reservation postings) not yet invoiced. Set-based: tenants go in
/// chunks of `RUN_CHUNK`, each chunk one transaction with a fixed number of
/// statements (docs/architecture.md), so a run killed half-way keeps the
/// chunks it committed and a re-run finalizes only the rest. Running it
/// again returns the same invoices.
pub async fn run_invoices(
    db: &Db,
    settings: &Settings,
    period: InvoicePeriod,
    req: api::RunInvoicesRequest,
) -> Result<api::RunInvoicesResult, Error> {
    let period_end = req
        .period_end
        .unwrap_or_else(|| period.start_of(Utc::now()))
        .trunc_subsecs(6);
    if let Some(tenant_id) = req.tenant_id {
        let invoice = finalize_period(db, settings, period, tenant_id, period_end).await?;
        return Ok(api::RunInvoicesResult {
            period_end,
            invoices: invoice.into_iter().collect(),
        });
    }
    let ids = finalize_all(db, settings, period, period_end).await?;
    let invoices = db
        .run(move |conn| load_many(conn, &ids).map_err(Error::from))
        .await?;
    Ok(api::RunInvoicesResult {
        period_end,
        invoices,
    })
}

/// Finalizes every tenant's invoice for the period ending at `period_end`
/// (see `run_invoices`); the ids of the invoices ending there, new or found,
/// in tenant order.
pub async fn finalize_all(
    db: &Db,
    settings: &Settings,
    period: InvoicePeriod,
    period_end: DateTime<Utc>,
) -> Result<Vec<Uuid>, Error> {
    let period_end = ended(period_end)?;
    #[derive(QueryableByName)]
    struct Tenant {
        #[diesel(sql_type = diesel::sql_types::Uuid)]
        tenant_id: TenantId,
    }
    let rows: Vec<Tenant> = db
        .run(move |conn| {
            // Reservation postings count when they have a renter leg (an
            // escrow release without a refund has none, and is on no
            // invoice).
            diesel::sql_query(format!(
                "SELECT DISTINCT t.tenant_id FROM billing.transactions t \
                 WHERE t.kind = 'usage' AND t.tenant_id IS NOT NULL AND t.created_at < $1 \
                   AND NOT EXISTS (SELECT 1 FROM billing.invoice_items i WHERE i.transaction_id = t.id) \
                 UNION SELECT DISTINCT t.tenant_id FROM billing.transactions t \
                 WHERE t.kind IN ({escrow}) AND t.tenant_id IS NOT NULL AND t.created_at < $1 \
                   AND EXISTS (SELECT 1 FROM billing.entries e \
                               JOIN billing.accounts a ON a.id = e.account_id \
                               WHERE e.transaction_id = t.id AND a.kind = 'renter_balance' \
                                 AND a.tenant_id = t.tenant_id) \
                   AND NOT EXISTS (SELECT 1 FROM billing.invoice_items i WHERE i.transaction_id = t.id) \
                 UNION SELECT tenant_id FROM billing.invoices WHERE period_end = $1 \
                 ORDER BY 1",
                escrow = crate::escrow_kinds::KINDS_SQL
            ))
            .bind::<Timestamptz, _>(period_end)
            .load(conn)
            .map_err(Error::from)
        })
        .await?;
    let tenants: Vec<Uuid> = rows.into_iter().map(|r| r.tenant_id.into_uuid()).collect();
    let mut ids = Vec::with_capacity(tenants.len());
    let mut finalized = 0usize;
    for chunk in tenants.chunks(RUN_CHUNK) {
        let (chunk, settings) = (chunk.to_vec(), settings.clone());
        let outcome = db
            .tx(move |conn| finalize_chunk(conn, &settings, period, &chunk, period_end))
            .await?;
        // A tenant already invoiced past this end (its late postings wait
        // for its next invoice) must not stop everyone else's.
        for (tenant_id, last_end) in &outcome.conflicts {
            tracing::info!(tenant.id = %tenant_id, %last_end, "tenant skipped by the invoicing run: invoiced past this end");
        }
        finalized += outcome.finalized;
        ids.extend(outcome.invoices);
    }
    tracing::info!(%period_end, tenants = tenants.len(), finalized, invoices = ids.len(), "invoicing run done");
    Ok(ids)
}

/// What the tenant's next invoice would hold if it were finalized now: every
/// posting not invoiced yet. Not stored.
pub async fn preview(
    db: &Db,
    settings: &Settings,
    period: InvoicePeriod,
    tenant_id: TenantId,
    now: DateTime<Utc>,
) -> Result<api::Invoice, Error> {
    let settings = settings.clone();
    db.run(move |conn| {
        let currency = settings.currency.clone();
        let last_end: Option<DateTime<Utc>> = invoices::table
            .filter(invoices::tenant_id.eq(tenant_id))
            .select(diesel::dsl::max(invoices::period_end))
            .first(conn)?;
        let (postings, earliest) = uninvoiced(conn, tenant_id, &currency, None)?;
        let period_start =
            last_end.unwrap_or_else(|| period.start_of(earliest.unwrap_or(now).min(now)));
        let mut period_end = period.next_start(now);
        if period_end <= period_start {
            period_end = period.next_start(period_start);
        }
        let drafted = draft(&postings, period_start, &currency);
        Ok(api::Invoice {
            id: None,
            tenant_id,
            number: None,
            status: InvoiceStatus::Draft,
            period_start,
            period_end,
            currency,
            subtotal: drafted.total,
            total: drafted.total,
            exact_total: drafted.exact_total,
            rounding: drafted.rounding,
            finalized_at: None,
            paid_at: None,
            voided_at: None,
            void_reason: None,
            lines: drafted.lines.into_iter().map(|(line, _)| line).collect(),
            credit_notes: Vec::new(),
        })
    })
    .await
}

/// The tenant's invoices, newest first (at most 100).
pub async fn list(db: &Db, tenant_id: TenantId) -> Result<Vec<api::Invoice>, Error> {
    db.run(move |conn| {
        let rows = invoices::table
            .filter(invoices::tenant_id.eq(tenant_id))
            .filter(invoices::status.ne(InvoiceStatus::Draft))
            .order(invoices::number.desc())
            .limit(LIST_LIMIT)
            .select(InvoiceRow::as_select())
            .load(conn)?;
        Ok(with_lines(conn, rows)?)
    })
    .await
}

/// Marks an open invoice paid (an operator, once a top-up or credit brought
/// the overdrawn balance back): refused while the balance is still negative.
pub async fn mark_paid(db: &Db, settings: &Settings, id: Uuid) -> Result<api::Invoice, Error> {
    let currency = settings.currency.clone();
    let settings = settings.clone();
    db.tx(move |conn| {
        let (tenant_id, status): (Uuid, InvoiceStatus) = invoices::table
            .find(id)
            .select((invoices::tenant_id, invoices::status))
            .for_update()
            .first(conn)
            .optional()?
            .ok_or_else(|| Error::NotFound(format!("invoice {id} not found")))?;
        match status {
            InvoiceStatus::Paid => return find(conn, TenantId(tenant_id), id),
            InvoiceStatus::Finalized => {}
            other => {
                return Err(Error::Conflict(format!(
                    "invoice {id} is {other} and cannot be paid"
                )));
            }
        }
        let balance = ledger::balance(
            conn,
            AccountKind::RenterBalance,
            TenantId(tenant_id),
            &currency,
        )?;
        if balance < Decimal::ZERO {
            return Err(Error::Conflict(format!(
                "the tenant's balance is still {balance} {currency}; a top-up must cover it first"
            )));
        }
        let paid: Vec<Finalized> = diesel::sql_query(
            "UPDATE billing.invoices SET status = 'paid', paid_at = now() WHERE id = $1 \
             RETURNING id, tenant_id, number, total, status, period_start, period_end",
        )
        .bind::<diesel::sql_types::Uuid, _>(id)
        .load(conn)?;
        announce(conn, &settings, &paid, false)?;
        find(conn, TenantId(tenant_id), id)
    })
    .await
}

/// Issues a credit note against an invoice, in the caller's transaction: a
/// refund or SLA credit of `amount` (at most what is not credited yet),
/// posted from the platform's fee revenue to the renter's balance (the
/// platform bears refunds; the host keeps its earnings). The same
/// idempotency key with the same invoice, amount and reason returns the same
/// note; with anything else it is a CONFLICT.
fn credit_note_in(
    conn: &mut PgConnection,
    settings: &Settings,
    req: &api::CreditNoteRequest,
) -> Result<api::CreditNote, Error> {
    let currency = settings.currency.as_str();
    let (tenant_id, status, total): (Uuid, InvoiceStatus, Decimal) = invoices::table
        .find(req.invoice_id)
        .select((invoices::tenant_id, invoices::status, invoices::total))
        .first(conn)
        .optional()?
        .ok_or_else(|| Error::NotFound(format!("invoice {} not found", req.invoice_id)))?;
    // The tenant's counter row serialises its credit notes (and invoices).
    diesel::insert_into(invoice_counters::table)
        .values(invoice_counters::tenant_id.eq(tenant_id))
        .on_conflict_do_nothing()
        .execute(conn)?;
    let last_number: i64 = invoice_counters::table
        .find(tenant_id)
        .select(invoice_counters::last_credit_note_number)
        .for_update()
        .first(conn)?;
    let existing: Option<CreditNoteRow> = credit_notes::table
        .filter(credit_notes::tenant_id.eq(tenant_id))
        .filter(credit_notes::idempotency_key.eq(&req.idempotency_key))
        .select(CreditNoteRow::as_select())
        .first(conn)
        .optional()?;
    if let Some(note) = existing {
        if note.invoice_id != req.invoice_id
            || note.amount != req.amount
            || note.reason != req.reason
        {
            return Err(Error::Conflict(
                "idempotencyKey: already used for another credit note".into(),
            ));
        }
        return Ok(note.into());
    }
    if !matches!(status, InvoiceStatus::Finalized | InvoiceStatus::Paid) {
        return Err(Error::Conflict(format!(
            "invoice {} is {status}: nothing to credit",
            req.invoice_id
        )));
    }
    let credited: Option<Decimal> = credit_notes::table
        .filter(credit_notes::invoice_id.eq(req.invoice_id))
        .select(diesel::dsl::sum(credit_notes::amount))
        .first(conn)?;
    let creditable = total - credited.unwrap_or_default();
    if req.amount > creditable {
        return Err(Error::Validation(format!(
            "amount: at most {} {currency} of this invoice is not credited yet",
            minor(creditable, currency)
        )));
    }
    let id = Uuid::now_v7();
    let number = last_number + 1;
    let txn = format!("credit_note:{id}");
    let renter = ledger::account(conn, AccountKind::RenterBalance, Some(tenant_id), currency)?;
    let platform = ledger::account(conn, AccountKind::PlatformFee, None, currency)?;
    let description = format!("credit note {number}: {}", req.reason);
    ledger::post(
        conn,
        &Posting {
            id: &txn,
            kind: "credit_note",
            tenant_id: Some(tenant_id),
            instance_id: None,
            fee_rate: None,
            description: &description,
            legs: &[(platform, -req.amount), (renter, req.amount)],
        },
    )?;
    diesel::update(invoice_counters::table.find(tenant_id))
        .set(invoice_counters::last_credit_note_number.eq(number))
        .execute(conn)?;
    let note: CreditNoteRow = diesel::insert_into(credit_notes::table)
        .values((
            credit_notes::id.eq(id),
            credit_notes::tenant_id.eq(tenant_id),
            credit_notes::invoice_id.eq(req.invoice_id),
            credit_notes::number.eq(number),
            credit_notes::amount.eq(req.amount),
            credit_notes::currency.eq(currency),
            credit_notes::reason.eq(&req.reason),
            credit_notes::idempotency_key.eq(&req.idempotency_key),
            credit_notes::transaction_id.eq(&txn),
        ))
        .returning(CreditNoteRow::as_returning())
        .get_result(conn)?;
    tracing::info!(tenant.id = %tenant_id, invoice.id = %req.invoice_id, number, amount = %req.amount, "credit note issued");
    Ok(note.into())
}

fn check_credit_note(settings: &Settings, req: &api::CreditNoteRequest) -> Result<(), Error> {
    let digits = money::minor_unit_digits(&settings.currency);
    if req.amount <= Decimal::ZERO || req.amount.normalize().scale() > digits {
        return Err(Error::Validation(format!(
            "amount: a positive amount with at most {digits} decimals"
        )));
    }
    if req.reason.trim().is_empty() || req.reason.len() > 500 {
        return Err(Error::Validation("reason: 1 to 500 characters".into()));
    }
    if req.idempotency_key.is_empty() || req.idempotency_key.len() > 200 {
        return Err(Error::Validation(
            "idempotencyKey: 1 to 200 characters".into(),
        ));
    }
    Ok(())
}

/// Issues a credit note (operators).
pub async fn credit_note(
    db: &Db,
    settings: &Settings,
    req: api::CreditNoteRequest,
) -> Result<api::CreditNote, Error> {
    check_credit_note(settings, &req)?;
    let settings = settings.clone();
    db.tx(move |conn| credit_note_in(conn, &settings, &req))
        .await
}

/// Voids an invoice (operators): what is not credited yet is given back by
/// a credit note (key `void:{id}`), and the status becomes `void`. Its
/// postings stay on it: voided usage is forgiven, never billed again.
pub async fn void(
    db: &Db,
    settings: &Settings,
    id: Uuid,
    reason: String,
) -> Result<api::Invoice, Error> {
    if reason.trim().is_empty() || reason.len() > 500 {
        return Err(Error::Validation("reason: 1 to 500 characters".into()));
    }
    let settings = settings.clone();
    db.tx(move |conn| {
        let (tenant_id, status, total): (Uuid, InvoiceStatus, Decimal) = invoices::table
            .find(id)
            .select((invoices::tenant_id, invoices::status, invoices::total))
            .for_update()
            .first(conn)
            .optional()?
            .ok_or_else(|| Error::NotFound(format!("invoice {id} not found")))?;
        match status {
            InvoiceStatus::Void => return find(conn, TenantId(tenant_id), id),
            InvoiceStatus::Finalized | InvoiceStatus::Paid => {}
            other => {
                return Err(Error::Conflict(format!("invoice {id} is {other}")));
            }
        }
        let credited: Option<Decimal> = credit_notes::table
            .filter(credit_notes::invoice_id.eq(id))
            .select(diesel::dsl::sum(credit_notes::amount))
            .first(conn)?;
        let rest = total - credited.unwrap_or_default();
        if rest > Decimal::ZERO {
            credit_note_in(
                conn,
                &settings,
                &api::CreditNoteRequest {
                    invoice_id: InvoiceId(id),
                    amount: rest,
                    reason: format!("void: {reason}"),
                    idempotency_key: format!("void:{id}"),
                },
            )?;
        }
        diesel::update(invoices::table.find(id))
            .set((
                invoices::status.eq(InvoiceStatus::Void),
                invoices::voided_at.eq(Some(Utc::now())),
                invoices::void_reason.eq(Some(&reason)),
            ))
            .execute(conn)?;
        find(conn, TenantId(tenant_id), id)
    })
    .await
}

/// One of the tenant's invoices; NOT_FOUND for another tenant's.
pub async fn get(db: &Db, tenant_id: TenantId, id: Uuid) -> Result<api::Invoice, Error> {
    db.run(move |conn| find(conn, tenant_id, id)).await
}

/// Renters are prepaid: a credit (a Stripe top-up, an operator's grant)
/// that brings an overdrawn renter's balance back to zero or above pays the
/// invoices left open by the overdraft. Runs in the credit's transaction,
/// so an invoice is never paid by money that was not posted. Returns how
/// many invoices it marked paid.
pub fn pay_open_invoices(
    conn: &mut PgConnection,
    tenant_id: TenantId,
    settings: &Settings,
) -> Result<usize, diesel::result::Error> {
    let currency = settings.currency.as_str();
    let balance = ledger::balance(conn, AccountKind::RenterBalance, tenant_id, currency)?;
    if balance < Decimal::ZERO {
        return Ok(0);
    }
    let paid: Vec<Finalized> = diesel::sql_query(
        "UPDATE billing.invoices SET status = 'paid', paid_at = now() \
         WHERE tenant_id = $1 AND status = 'finalized' \
         RETURNING id, tenant_id, number, total, status, period_start, period_end",
    )
    .bind::<diesel::sql_types::Uuid, _>(tenant_id)
    .load(conn)?;
    if !paid.is_empty() {
        tracing::info!(tenant.id = %tenant_id, invoices = paid.len(), "open invoices paid by a credit");
        announce(conn, settings, &paid, false)?;
    }
    Ok(paid.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(secs, 0).unwrap_or_default()
    }

    #[test]
    fn periods_start_at_utc_boundaries() {
        // 2026-12-03T07:10:00Z, a Thursday.
        let t = at(1_796_281_800);
        assert_eq!(
            InvoicePeriod::Monthly.start_of(t).to_rfc3339(),
            "2026-12-01T00:00:00+00:00"
        );
        assert_eq!(
            InvoicePeriod::Monthly.next_start(t).to_rfc3339(),
            "2027-01-01T00:00:00+00:00"
        );
        assert_eq!(
            InvoicePeriod::Weekly.start_of(t).to_rfc3339(),
            "2026-11-30T00:00:00+00:00"
        );
        assert_eq!(
            InvoicePeriod::Daily.next_start(t).to_rfc3339(),
            "2026-12-04T00:00:00+00:00"
        );
        assert!(InvoicePeriod::parse("yearly").is_err());
    }

    #[test]
    fn a_line_is_rounded_once_not_per_posting() {
        // Three postings of 0.004 each: rounded one by one they would bill
        // 0.00; their sum, 0.012, bills 0.01.
        let posting = |n: i64| UsagePosting {
            transaction_id: format!("usage:x:{n}:1"),
            instance_id: InstanceId::default(),
            meter: "gpu".into(),
            seconds: 1,
            price_per_hour: Decimal::new(1440, 2),
            started_at: at(1000 + n),
            ended_at: at(1001 + n),
            amount: Decimal::new(4, 3),
        };
        let d = draft(&[posting(0), posting(1), posting(2)], at(0), "USD");
        assert_eq!(d.lines.len(), 1);
        assert_eq!(d.total, Decimal::new(1, 2));
        assert_eq!(d.exact_total, Decimal::new(12, 3));
        assert_eq!(d.rounding, Decimal::new(-2, 3));
        assert_eq!(d.lines[0].0.quantity, 3);
        assert!(!d.lines[0].0.earlier_period);
    }

    fn posting() -> impl Strategy<Value = UsagePosting> {
        (
            0u8..4,
            0usize..2,
            0i64..3,
            -5_000i64..200_000,
            -1_000_000_000i64..100_000_000_000,
            0i64..2_000_000,
        )
            .prop_map(
                |(instance, meter, price, seconds, nanos, start)| UsagePosting {
                    transaction_id: format!("usage:{instance}:{start}:{seconds}"),
                    instance_id: InstanceId(Uuid::from_u128(u128::from(instance))),
                    meter: ["gpu", "storage"][meter].into(),
                    seconds,
                    price_per_hour: Decimal::new(45 + price * 100, 2),
                    started_at: at(start),
                    ended_at: at(start + seconds.abs()),
                    // Amounts with 9 decimals, corrections (negative) included.
                    amount: Decimal::new(nanos, 9),
                },
            )
    }

    proptest! {
        /// Each line is its postings' exact sum rounded half-even once; the
        /// lines plus the rounding residue are exactly the ledger's sum; the
        /// total is the sum of the lines; every posting is on one line; the
        /// FOCUS export's BilledCost adds up to the total.
        #[test]
        fn lines_and_rounding_reconcile_with_the_ledger(
            postings in proptest::collection::vec(posting(), 0..40),
            period_start in 0i64..2_000_000,
            currency in proptest::sample::select(vec!["USD", "JPY", "KWD"]),
        ) {
            let postings: Vec<UsagePosting> = postings
                .into_iter()
                .enumerate()
                .map(|(i, p)| UsagePosting { transaction_id: format!("t{i}"), ..p })
                .collect();
            let d = draft(&postings, at(period_start), currency);
            let ledger: Decimal = postings.iter().map(|p| p.amount).sum();
            let digits = money::minor_unit_digits(currency);
            let mut lines_sum = Decimal::ZERO;
            let mut covered = 0usize;
            for (line, members) in &d.lines {
                let exact: Decimal = postings
                    .iter()
                    .filter(|p| members.contains(&p.transaction_id)
                        && p.instance_id == line.instance_id
                        && p.meter == line.meter
                        && p.price_per_hour == line.unit_price_per_hour)
                    .map(|p| p.amount)
                    .sum();
                prop_assert_eq!(line.exact_amount, exact);
                prop_assert_eq!(line.amount, money::round_to_minor(exact, currency));
                prop_assert!(line.amount.normalize().scale() <= digits);
                lines_sum += line.amount;
                covered += members.len();
            }
            prop_assert_eq!(covered, postings.len());
            prop_assert_eq!(d.total, lines_sum);
            prop_assert_eq!(d.exact_total, ledger);
            prop_assert_eq!(d.total - d.rounding, ledger);

            let invoice = api::Invoice {
                id: Some(InvoiceId(Uuid::nil())),
                tenant_id: TenantId(Uuid::nil()),
                number: Some(1),
                status: InvoiceStatus::Paid,
                period_start: at(period_start),
                period_end: at(period_start + 1),
                currency: currency.into(),
                subtotal: d.total,
                total: d.total,
                exact_total: d.exact_total,
                rounding: d.rounding,
                finalized_at: None,
                paid_at: None,
                voided_at: None,
                void_reason: None,
                lines: d.lines.iter().map(|(l, _)| l.clone()).collect(),
                credit_notes: Vec::new(),
            };
            prop_assert_eq!(crate::focus::billed_cost_sum(&crate::focus::csv(&invoice)), Some(d.total));
        }
    }
}
