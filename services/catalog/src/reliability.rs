//! Reliability: the share of a machine's listed time in the rolling window
//! during which it was heard from, computed in SQL from the listing history
//! (`catalog.listing_periods`) and the heartbeat gaps
//! (`catalog.heartbeat_gaps`), and the offline sweeper that opens gaps for
//! silent machines and keeps `machines.reliability` current.
//!
//! ```text
//! reliability = 1 − (gap seconds ∩ listed periods ∩ window) / (listed periods ∩ window)
//! ```
//!
//! floored to 4 decimal places; NULL when the machine was not listed in the
//! window. docs/host-agent.md states it for hosts.

use contracts::ids::{MachineId, TenantId};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use contracts::events::MachineLiveness;
use diesel::pg::PgConnection;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Numeric, Timestamptz, Uuid as SqlUuid};
use platform::{Config, Db, PlatformError};
use rust_decimal::Decimal;
use uuid::Uuid;

/// The settings heartbeat handling and the sweeper share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// A machine is online iff its last heartbeat is younger than this.
    pub grace_seconds: i64,
    /// The rolling window reliability is computed over.
    pub window_days: i64,
}

impl Settings {
    /// The catalog's settings' heartbeat grace and reliability window.
    pub fn from_config(config: &Config) -> Result<Self, platform::PlatformError> {
        Ok(Self::from(&*config.settings::<crate::CatalogSettings>()?))
    }
}

impl From<&crate::CatalogSettings> for Settings {
    fn from(settings: &crate::CatalogSettings) -> Self {
        Self {
            grace_seconds: settings.heartbeat_grace_seconds.max(1),
            window_days: settings.reliability_window_days.max(1),
        }
    }
}

/// A machine is online iff this holds, over `catalog.machines`.
pub fn online_sql(grace_seconds: i64) -> String {
    format!(
        "coalesce(catalog.machines.last_heartbeat_at > now() - make_interval(secs => {}), false)",
        grace_seconds.max(0)
    )
}

/// A machine is verified iff this holds, over `catalog.machines`
/// (docs/host-agent.md, "Verification"). NULLs count as not verified. The
/// host's verdict is a primary-key lookup rather than a join, so the offer
/// search can walk an index in price order and stop at a page.
pub const VERIFIED_SQL: &str = "coalesce(\
     (SELECT hp.verification FROM catalog.host_profiles hp \
       WHERE hp.tenant_id = catalog.machines.host_tenant_id) = 'verified' \
     AND catalog.machines.cuda_version_code >= 12000 \
     AND catalog.machines.reliability >= 0.90 \
     AND catalog.machines.download_mbps >= greatest(100, catalog.machines.gpu_count * catalog.machines.vram_gib) \
     AND catalog.machines.upload_mbps >= 50 \
     AND catalog.machines.self_test_passed_at > now() - interval '7 days', false)";

/// Listed time and downtime per machine in the window ending at `$1` (now
/// when NULL; `$2` days long), for one machine (`$3`) or all (`$3` NULL). Listing
/// periods of a machine never overlap, nor do its gaps, so the sum of the
/// pairwise intersections is the measure of their intersection.
const COMPUTED: &str = "
WITH w AS (
    SELECT coalesce($1::timestamptz, now()) AS we,
           coalesce($1::timestamptz, now()) - make_interval(days => $2::int) AS ws
),
p AS (
    SELECT lp.machine_id,
           greatest(lp.started_at, w.ws) AS s,
           least(coalesce(lp.ended_at, w.we), w.we) AS e
    FROM catalog.listing_periods lp CROSS JOIN w
    WHERE lp.started_at < w.we
      AND coalesce(lp.ended_at, w.we) > w.ws
      AND ($3::uuid IS NULL OR lp.machine_id = $3::uuid)
),
listed AS (
    SELECT machine_id, sum(extract(epoch FROM e - s)) AS secs
    FROM p WHERE e > s GROUP BY machine_id
),
down AS (
    SELECT p.machine_id,
           sum(extract(epoch FROM least(coalesce(g.ended_at, w.we), p.e) - greatest(g.started_at, p.s))) AS secs
    FROM p CROSS JOIN w
    JOIN catalog.heartbeat_gaps g
      ON g.machine_id = p.machine_id
     AND g.started_at < p.e
     AND coalesce(g.ended_at, w.we) > p.s
    GROUP BY p.machine_id
),
computed AS (
    SELECT l.machine_id,
           CASE WHEN l.secs > 0
                THEN floor(greatest(0, 1 - coalesce(d.secs, 0) / l.secs) * 10000) / 10000
           END AS reliability
    FROM listed l LEFT JOIN down d USING (machine_id)
)
";

#[derive(QueryableByName)]
struct Computed {
    #[diesel(sql_type = Nullable<Numeric>)]
    reliability: Option<Decimal>,
}

/// The machine's reliability as of `as_of` (None when it was not listed in
/// the window). A pure function of the listing history and the gaps.
pub fn compute(
    conn: &mut PgConnection,
    machine_id: MachineId,
    as_of: DateTime<Utc>,
    window_days: i64,
) -> QueryResult<Option<Decimal>> {
    let rows: Vec<Computed> =
        diesel::sql_query(format!("{COMPUTED} SELECT reliability FROM computed"))
            .bind::<Nullable<Timestamptz>, _>(Some(as_of))
            .bind::<BigInt, _>(window_days)
            .bind::<Nullable<SqlUuid>, _>(Some(machine_id))
            .load(conn)?;
    Ok(rows.into_iter().next().and_then(|r| r.reliability))
}

/// Writes the current reliability into `machines.reliability`, for one
/// machine or all; returns the rows changed. Rows whose value did not change
/// are not written.
pub fn recompute(
    conn: &mut PgConnection,
    machine_id: Option<Uuid>,
    window_days: i64,
) -> QueryResult<usize> {
    let changed = diesel::sql_query(format!(
        "{COMPUTED}
         UPDATE catalog.machines m SET reliability = c.reliability
         FROM computed c
         WHERE m.id = c.machine_id AND m.reliability IS DISTINCT FROM c.reliability"
    ))
    .bind::<Nullable<Timestamptz>, _>(None::<DateTime<Utc>>)
    .bind::<BigInt, _>(window_days)
    .bind::<Nullable<SqlUuid>, _>(machine_id)
    .execute(conn)?;
    // Not listed at all in the window: nothing to measure.
    let cleared = diesel::sql_query(
        "UPDATE catalog.machines m SET reliability = NULL
         WHERE m.reliability IS NOT NULL
           AND ($2::uuid IS NULL OR m.id = $2::uuid)
           AND NOT EXISTS (
               SELECT 1 FROM catalog.listing_periods lp
               WHERE lp.machine_id = m.id
                 AND coalesce(lp.ended_at, now()) > now() - make_interval(days => $1::int))",
    )
    .bind::<BigInt, _>(window_days)
    .bind::<Nullable<SqlUuid>, _>(machine_id)
    .execute(conn)?;
    Ok(changed + cleared)
}

/// Opens a gap for every listed machine silent for longer than the grace
/// period (since its last heartbeat, or since it was listed when it never
/// reported) that has none open. Machines locked by a heartbeat being applied
/// are skipped until the next sweep. Returns the gaps opened.
pub fn open_gaps(conn: &mut PgConnection, grace_seconds: i64) -> QueryResult<Vec<OpenedGap>> {
    diesel::sql_query(
        "WITH silent AS (
             SELECT m.id, coalesce(m.last_heartbeat_at, lp.started_at) AS since
             FROM catalog.machines m
             JOIN catalog.listing_periods lp ON lp.machine_id = m.id AND lp.ended_at IS NULL
             WHERE m.listed
               AND coalesce(m.last_heartbeat_at, lp.started_at)
                   < now() - make_interval(secs => $1::double precision)
               AND NOT EXISTS (
                   SELECT 1 FROM catalog.heartbeat_gaps g
                   WHERE g.machine_id = m.id AND g.ended_at IS NULL)
             FOR UPDATE OF m SKIP LOCKED
         )
         , opened AS (
             INSERT INTO catalog.heartbeat_gaps (machine_id, started_at, detected_by)
             SELECT id, since, 'sweeper' FROM silent
             ON CONFLICT DO NOTHING
             RETURNING machine_id, started_at
         )
         SELECT o.machine_id, o.started_at, m.host_tenant_id
         FROM opened o JOIN catalog.machines m ON m.id = o.machine_id",
    )
    .bind::<BigInt, _>(grace_seconds)
    .load(conn)
}

/// A gap the sweeper opened: the machine went offline.
#[derive(Debug, QueryableByName)]
pub struct OpenedGap {
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub machine_id: MachineId,
    #[diesel(sql_type = diesel::sql_types::Timestamptz)]
    pub started_at: DateTime<Utc>,
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub host_tenant_id: TenantId,
}

/// Unlists machines whose listing end date has passed; returns how many.
pub fn unlist_expired(conn: &mut PgConnection) -> QueryResult<usize> {
    use schema::catalog::machines;
    diesel::update(machines::table)
        .filter(machines::listed.eq(true))
        .filter(machines::list_until.le(diesel::dsl::now))
        .set((
            machines::listed.eq(false),
            machines::updated_at.eq(diesel::dsl::now),
        ))
        .execute(conn)
}

/// One sweep: open the gaps of silent machines, then recompute every
/// machine's reliability. Returns (gaps opened, reliabilities changed).
pub async fn sweep(
    db: &Db,
    settings: Settings,
    events_exchange: &str,
) -> Result<(usize, usize), PlatformError> {
    let exchange = events_exchange.to_owned();
    db.tx(move |conn| {
        // A listing past its end date is over: unlisting it also closes its
        // listing period, so reliability stops counting that time.
        let expired = unlist_expired(conn)?;
        if expired > 0 {
            tracing::info!(machines = expired, "expired listings unlisted");
        }
        let opened = open_gaps(conn, settings.grace_seconds)?;
        for gap in &opened {
            announce_liveness(
                conn,
                &exchange,
                MachineLiveness {
                    host_tenant_id: gap.host_tenant_id,
                    machine_id: gap.machine_id,
                    online: false,
                    silent_since: gap.started_at,
                    back_at: None,
                    at: contracts::time::now(),
                    sequence: 0,
                },
            )?;
        }
        let changed = recompute(conn, None, settings.window_days)?;
        Ok((opened.len(), changed))
    })
    .await
}

/// `catalog.machine.offline` or `.online`, for the host (its webhooks,
/// docs/webhooks.md), in the caller's transaction, with the machine's next
/// event number (its `sequence`; the caller's value is replaced).
pub fn announce_liveness(
    conn: &mut PgConnection,
    exchange: &str,
    mut event: MachineLiveness,
) -> Result<(), PlatformError> {
    event.sequence = machine_sequence(conn, event.machine_id.into())?;
    let kind = if event.online {
        contracts::events::kinds::MACHINE_ONLINE
    } else {
        contracts::events::kinds::MACHINE_OFFLINE
    };
    let envelope = contracts::Envelope::new(
        kind,
        event.at,
        Some(event.host_tenant_id),
        platform::http::current_correlation_id(),
        &event,
    )?;
    platform::outbox::enqueue(conn, crate::SCHEMA, exchange, kind.name(), &envelope)?;
    Ok(())
}

/// The next number of a machine's webhook-facing events, liveness and
/// rentals alike (so a receiver orders a machine's online, offline, rented
/// and released by it), in the caller's transaction. Every caller holds the
/// machine's row lock already, so taking the counter adds no lock order.
pub fn machine_sequence(
    conn: &mut PgConnection,
    machine_id: uuid::Uuid,
) -> Result<i64, diesel::result::Error> {
    platform::sequence::next(
        conn,
        crate::SCHEMA,
        &contracts::events::resource::machine(machine_id),
    )
}

/// Sweeps every `offline_sweep_ms` forever: finds listed machines silent
/// past the grace period, opens their gaps (so the downtime counts while it
/// lasts) and recomputes reliability (which also moves as the window slides).
pub async fn run_offline_sweeper(
    config: Arc<Config>,
    db: Db,
) -> Result<(), platform::PlatformError> {
    let catalog = config.settings::<crate::CatalogSettings>()?;
    let settings = Settings::from(&*catalog);
    let every = catalog.offline_sweep;
    tracing::info!(
        grace_seconds = settings.grace_seconds,
        window_days = settings.window_days,
        every_ms = every.as_millis() as u64,
        "offline sweeper started"
    );
    loop {
        match sweep(&db, settings, &config.events_exchange).await {
            Ok((opened, changed)) if opened > 0 || changed > 0 => {
                tracing::info!(
                    gaps_opened = opened,
                    reliability_changed = changed,
                    "offline sweep"
                );
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "offline sweep failed"),
        }
        tokio::time::sleep(every).await;
    }
}

/// One gap as evidence: `seconds` runs to now while it is open.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, QueryableByName)]
pub struct Gap {
    #[diesel(sql_type = Timestamptz)]
    pub started_at: DateTime<Utc>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub ended_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = BigInt)]
    pub seconds: i64,
}

/// The machine's gaps that overlap the window, newest first.
pub fn gaps(
    conn: &mut PgConnection,
    machine_id: MachineId,
    window_days: i64,
) -> QueryResult<Vec<Gap>> {
    diesel::sql_query(
        "SELECT started_at, ended_at,
                floor(extract(epoch FROM coalesce(ended_at, now()) - started_at))::bigint AS seconds
         FROM catalog.heartbeat_gaps
         WHERE machine_id = $1
           AND coalesce(ended_at, now()) > now() - make_interval(days => $2::int)
         ORDER BY started_at DESC
         LIMIT 1000",
    )
    .bind::<SqlUuid, _>(machine_id)
    .bind::<BigInt, _>(window_days)
    .load(conn)
}
