//! Lifecycle rules, enforced by the server rather than the renter's scripts:
//! a maximum run duration, stop after the GPUs were idle for a while, and
//! destroy after being stopped for a while (all in seconds).
//!
//! A periodic task ([`run`]) looks for instances whose rule is due. Each
//! rule is announced by a `rule_warning` event (with the rule, the action and
//! the due instant) once the due instant is within the configured lead time;
//! it acts only at or after the due instant and only when the warning was
//! recorded in an earlier round, so the warning always precedes the action,
//! and the action is announced by `rule_enforced` before the transition it
//! causes. Both events are keyed by rule and due instant, so a round repeated
//! by a second replica (or after a crash) records nothing twice; candidates
//! are locked with `FOR UPDATE SKIP LOCKED`, so replicas share the work, and
//! the actions (stop, destroy) are idempotent.
//!
//! Idle: catalog keeps the busiest GPU's utilisation of every heartbeat of a
//! machine; the instance is idle since the later of the start of its run,
//! the last change of its rules and the machine's last heartbeat at or above
//! the threshold. It is stopped once that lasted the window *and* a
//! heartbeat at or after the due instant confirms it (a machine that stops
//! reporting is not called idle; it is the offline detector's business).
//! Utilisation is per machine: another renter's busy GPU on the same machine
//! keeps the instance running, never the reverse.

use chrono::{DateTime, TimeDelta, Utc};
use contracts::api::{self, GpuActivity, GpuActivityQuery, InstanceRules};
use contracts::endpoints;
use contracts::events::RuleNotice;
use contracts::ids::{MachineId, TenantId};
use diesel::prelude::*;
use platform::Db;
use schema::ordering::{instance_rules, instances};
use uuid::Uuid;

use crate::events::{Detail, record};
use crate::{Deps, Error};
use contracts::states::{InstanceEventKind, InstanceState, LifecycleRule, RuleAction};

/// Ten years: longer durations are certainly a unit mistake.
const MAX_SECONDS: i64 = 10 * 365 * 24 * 3600;

pub fn validate(rules: &InstanceRules, retention_seconds: i64) -> Result<(), Error> {
    let positive = |field: &str, value: Option<i64>| match value {
        Some(v) if !(1..=MAX_SECONDS).contains(&v) => Err(Error::Validation(format!(
            "rules.{field}: 1 to {MAX_SECONDS} seconds"
        ))),
        _ => Ok(()),
    };
    positive("maxDurationSeconds", rules.max_duration_seconds)?;
    positive("idleStopAfterSeconds", rules.idle_stop_after_seconds)?;
    positive(
        "autoDestroyAfterStoppedSeconds",
        rules.auto_destroy_after_stopped_seconds,
    )?;
    match (rules.idle_stop_after_seconds, rules.idle_threshold_percent) {
        (None, None) => {}
        (Some(window), Some(threshold)) => {
            if !(1..=100).contains(&threshold) {
                return Err(Error::Validation(
                    "rules.idleThresholdPercent: 1 to 100".into(),
                ));
            }
            if window > retention_seconds {
                return Err(Error::Validation(format!(
                    "rules.idleStopAfterSeconds: at most {retention_seconds} seconds (the utilisation history kept)"
                )));
            }
        }
        _ => {
            return Err(Error::Validation(
                "rules: idleStopAfterSeconds and idleThresholdPercent go together".into(),
            ));
        }
    }
    Ok(())
}

#[derive(Queryable, Clone, Debug)]
struct RulesRow {
    max_duration_seconds: Option<i64>,
    idle_stop_after_seconds: Option<i64>,
    idle_threshold_percent: Option<i32>,
    auto_destroy_after_stopped_seconds: Option<i64>,
    updated_at: DateTime<Utc>,
}

impl From<RulesRow> for InstanceRules {
    fn from(r: RulesRow) -> Self {
        InstanceRules {
            max_duration_seconds: r.max_duration_seconds,
            idle_stop_after_seconds: r.idle_stop_after_seconds,
            idle_threshold_percent: r.idle_threshold_percent,
            auto_destroy_after_stopped_seconds: r.auto_destroy_after_stopped_seconds,
        }
    }
}

type RulesColumns = (
    instance_rules::max_duration_seconds,
    instance_rules::idle_stop_after_seconds,
    instance_rules::idle_threshold_percent,
    instance_rules::auto_destroy_after_stopped_seconds,
    instance_rules::updated_at,
);

const RULES_COLUMNS: RulesColumns = (
    instance_rules::max_duration_seconds,
    instance_rules::idle_stop_after_seconds,
    instance_rules::idle_threshold_percent,
    instance_rules::auto_destroy_after_stopped_seconds,
    instance_rules::updated_at,
);

fn load_rules(conn: &mut PgConnection, id: Uuid) -> QueryResult<Option<RulesRow>> {
    instance_rules::table
        .find(id)
        .select(RULES_COLUMNS)
        .first(conn)
        .optional()
}

fn describe(rules: &InstanceRules) -> String {
    let mut parts = Vec::new();
    if let Some(s) = rules.max_duration_seconds {
        parts.push(format!("max duration {s} s"));
    }
    if let (Some(s), Some(p)) = (rules.idle_stop_after_seconds, rules.idle_threshold_percent) {
        parts.push(format!("stop after {s} s below {p} % GPU utilisation"));
    }
    if let Some(s) = rules.auto_destroy_after_stopped_seconds {
        parts.push(format!("destroy after {s} s stopped"));
    }
    if parts.is_empty() {
        "no lifecycle rules".into()
    } else {
        format!("rules: {}", parts.join(", "))
    }
}

/// Writes the instance's rules (under its row lock) and records a
/// `rules_changed` event. Writing the rules it already has changes nothing.
fn write(
    conn: &mut PgConnection,
    id: Uuid,
    rules: &InstanceRules,
    at: DateTime<Utc>,
) -> Result<(), Error> {
    if load_rules(conn, id)?.map(InstanceRules::from).as_ref() == Some(rules) {
        return Ok(());
    }
    diesel::insert_into(instance_rules::table)
        .values((
            instance_rules::instance_id.eq(id),
            instance_rules::max_duration_seconds.eq(rules.max_duration_seconds),
            instance_rules::idle_stop_after_seconds.eq(rules.idle_stop_after_seconds),
            instance_rules::idle_threshold_percent.eq(rules.idle_threshold_percent),
            instance_rules::auto_destroy_after_stopped_seconds
                .eq(rules.auto_destroy_after_stopped_seconds),
            instance_rules::updated_at.eq(at),
        ))
        .on_conflict(instance_rules::instance_id)
        .do_update()
        .set((
            instance_rules::max_duration_seconds.eq(rules.max_duration_seconds),
            instance_rules::idle_stop_after_seconds.eq(rules.idle_stop_after_seconds),
            instance_rules::idle_threshold_percent.eq(rules.idle_threshold_percent),
            instance_rules::auto_destroy_after_stopped_seconds
                .eq(rules.auto_destroy_after_stopped_seconds),
            instance_rules::updated_at.eq(at),
        ))
        .execute(conn)?;
    let reason = describe(rules);
    record(
        conn,
        id,
        InstanceEventKind::RulesChanged,
        Detail {
            reason: Some(&reason),
            ..Detail::default()
        },
        at,
    )?;
    Ok(())
}

/// `setInstanceRules`: replaces the instance's rules (absent fields clear
/// theirs). Refused once the instance is on its way out.
pub async fn set(
    db: &Db,
    deps: &Deps,
    id: Uuid,
    tenant_id: TenantId,
    rules: InstanceRules,
) -> Result<InstanceRules, Error> {
    validate(&rules, deps.settings.gpu_activity_retention_seconds)?;
    db.tx(move |conn| {
        let row = crate::instances::lock(conn, id)?;
        if row.tenant_id != tenant_id {
            return Err(Error::NotFound(format!("instance {id} not found")));
        }
        let state = row.state;
        if matches!(
            state,
            InstanceState::Deprovisioning | InstanceState::Destroyed | InstanceState::Failed
        ) {
            return Err(Error::Conflict(format!(
                "instance is {state}; its rules can no longer change"
            )));
        }
        write(conn, id, &rules, contracts::time::now())?;
        Ok(rules)
    })
    .await
}

/// The rules an order asked for, given to the instance it created. The
/// same order repeated (same idempotency key) finds them there; with other
/// rules it is refused, as the rules are part of the request.
pub async fn attach_to_order(
    db: &Db,
    id: Uuid,
    tenant_id: TenantId,
    rules: InstanceRules,
) -> Result<(), Error> {
    db.tx(move |conn| {
        let row = crate::instances::lock(conn, id)?;
        if row.tenant_id != tenant_id {
            return Err(Error::NotFound(format!("instance {id} not found")));
        }
        match load_rules(conn, id)?.map(InstanceRules::from) {
            Some(current) if current == rules => Ok(()),
            Some(_) => Err(Error::Conflict(
                "idempotencyKey: already used with other rules".into(),
            )),
            None => write(conn, id, &rules, contracts::time::now()),
        }
    })
    .await
}

pub async fn get(db: &Db, id: Uuid, tenant_id: TenantId) -> Result<InstanceRules, Error> {
    db.run(move |conn| {
        let owner: Option<Uuid> = instances::table
            .find(id)
            .select(instances::tenant_id)
            .first(conn)
            .optional()?;
        if owner != Some(tenant_id.into()) {
            return Err(Error::NotFound(format!("instance {id} not found")));
        }
        Ok(load_rules(conn, id)?.map(Into::into).unwrap_or_default())
    })
    .await
}

/// What a rule will do to an instance, and when.
#[derive(Debug, Clone, PartialEq)]
pub struct Due {
    pub rule: LifecycleRule,
    pub action: RuleAction,
    pub due_at: DateTime<Utc>,
    /// Idle only: the newest heartbeat, which must reach `due_at` before
    /// the rule acts.
    pub confirmed_until: Option<DateTime<Utc>>,
}

impl Due {
    fn may_act(&self, now: DateTime<Utc>) -> bool {
        now >= self.due_at && self.confirmed_until.is_none_or(|seen| seen >= self.due_at)
    }
}

/// One instance as the rules see it.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub id: Uuid,
    pub tenant_id: TenantId,
    pub machine_id: MachineId,
    pub state: String,
    pub running_at: Option<DateTime<Utc>>,
    /// When it entered its current state.
    pub since: DateTime<Utc>,
    pub rules: InstanceRules,
    pub rules_at: DateTime<Utc>,
}

/// The instant from which idleness counts for `c`.
fn idle_from(c: &Candidate) -> DateTime<Utc> {
    c.running_at.unwrap_or(c.since).max(c.rules_at)
}

/// The earliest-due rule of a candidate, given the machine's GPU activity
/// since [`idle_from`] (None when unknown: the idle rule waits).
pub fn next_due(c: &Candidate, activity: Option<&GpuActivity>) -> Option<Due> {
    let secs = TimeDelta::seconds;
    let mut dues = Vec::new();
    match c.state.as_str() {
        "running" => {
            if let (Some(max), Some(t0)) = (c.rules.max_duration_seconds, c.running_at) {
                dues.push(Due {
                    rule: LifecycleRule::MaxDuration,
                    action: RuleAction::Stop,
                    due_at: t0 + secs(max),
                    confirmed_until: None,
                });
            }
            if let (Some(window), Some(activity)) = (c.rules.idle_stop_after_seconds, activity)
                && let Some(last_sample) = activity.last_sample_at
            {
                let idle_since = activity
                    .last_busy_at
                    .map_or(idle_from(c), |busy| busy.max(idle_from(c)));
                dues.push(Due {
                    rule: LifecycleRule::Idle,
                    action: RuleAction::Stop,
                    due_at: idle_since + secs(window),
                    confirmed_until: Some(last_sample),
                });
            }
        }
        "stopped" => {
            if let Some(after) = c.rules.auto_destroy_after_stopped_seconds {
                dues.push(Due {
                    rule: LifecycleRule::AutoDestroy,
                    action: RuleAction::Destroy,
                    due_at: c.since + secs(after),
                    confirmed_until: None,
                });
            }
        }
        _ => {}
    }
    dues.into_iter().min_by_key(|d| d.due_at)
}

type CandidateRow = (
    Uuid,
    Uuid,
    Uuid,
    String,
    Option<DateTime<Utc>>,
    DateTime<Utc>,
    RulesRow,
);

fn candidate(row: CandidateRow) -> Candidate {
    let (id, tenant_id, machine_id, state, running_at, since, rules) = row;
    Candidate {
        id,
        tenant_id: TenantId(tenant_id),
        machine_id: MachineId(machine_id),
        state,
        running_at,
        since,
        rules_at: rules.updated_at,
        rules: rules.into(),
    }
}

/// Candidates are read in pages of this many, by id.
const PAGE: i64 = 500;

/// Instances with a rule that can apply in their state: the one `only`, or
/// the next page after `after`.
fn candidates(
    conn: &mut PgConnection,
    only: Option<Uuid>,
    after: Option<Uuid>,
) -> QueryResult<Vec<Candidate>> {
    let mut query = instances::table
        .inner_join(instance_rules::table)
        .filter(
            instances::state
                .eq("running")
                .and(
                    instance_rules::max_duration_seconds
                        .is_not_null()
                        .or(instance_rules::idle_stop_after_seconds.is_not_null()),
                )
                .or(instances::state
                    .eq("stopped")
                    .and(instance_rules::auto_destroy_after_stopped_seconds.is_not_null())),
        )
        .select((
            instances::id,
            instances::tenant_id,
            instances::machine_id,
            instances::state,
            instances::running_at,
            instances::updated_at,
            RULES_COLUMNS,
        ))
        .order(instances::id)
        .limit(PAGE)
        .into_boxed();
    if let Some(id) = only {
        query = query.filter(instances::id.eq(id));
    }
    if let Some(after) = after {
        query = query.filter(instances::id.gt(after));
    }
    Ok(query
        .load::<CandidateRow>(conn)?
        .into_iter()
        .map(candidate)
        .collect())
}

/// Runs the rules every `rules_tick_ms` forever.
pub async fn run(deps: Deps, db: Db) {
    let tick = deps.settings.rules_tick;
    loop {
        if let Err(error) = round(&db, &deps).await {
            tracing::warn!(%error, "lifecycle rules round failed");
        }
        tokio::time::sleep(tick).await;
    }
}

/// One look at every instance with rules.
pub async fn round(db: &Db, deps: &Deps) -> Result<(), Error> {
    let mut after = None;
    loop {
        let page = db
            .run(move |conn| Ok::<_, Error>(candidates(conn, None, after)?))
            .await?;
        let full = page.len() as i64 == PAGE;
        after = page.last().map(|c| c.id);
        for c in page {
            consider_candidate(db, deps, c).await;
        }
        if !full {
            return Ok(());
        }
    }
}

/// Fetches what the candidate's idle rule needs, then [`consider`]s it.
async fn consider_candidate(db: &Db, deps: &Deps, c: Candidate) {
    let activity = match (c.state.as_str(), &c.rules) {
        (
            "running",
            InstanceRules {
                idle_stop_after_seconds: Some(_),
                idle_threshold_percent: Some(threshold),
                ..
            },
        ) => match activity(deps, c.machine_id, *threshold, idle_from(&c)).await {
            Ok(a) => Some((*threshold, idle_from(&c), a)),
            Err(error) => {
                tracing::warn!(instance.id = %c.id, %error, "GPU activity unavailable; idle rule waits");
                None
            }
        },
        _ => None,
    };
    if let Err(error) = consider(db, deps, c.id, activity).await {
        tracing::warn!(instance.id = %c.id, %error, "lifecycle rule not applied");
    }
}

async fn activity(
    deps: &Deps,
    machine_id: MachineId,
    threshold: i32,
    since: DateTime<Utc>,
) -> Result<GpuActivity, Error> {
    Ok(deps
        .catalog
        .call(
            endpoints::catalog::GPU_ACTIVITY,
            machine_id,
            &GpuActivityQuery { threshold, since },
        )
        .await?)
}

/// Warns about, or enforces, the due rule of one instance; the instance row
/// is locked (skipped when another replica holds it) while the events are
/// recorded, then the action runs on its own.
async fn consider(
    db: &Db,
    deps: &Deps,
    id: Uuid,
    // The threshold and start of the window the activity was asked for.
    activity: Option<(i32, DateTime<Utc>, GpuActivity)>,
) -> Result<(), Error> {
    let lead = deps.settings.rules_warning_lead;
    let act = db
        .tx(move |conn| -> Result<Option<(Candidate, Due)>, Error> {
            let locked = instances::table
                .find(id)
                .select(instances::id)
                .for_update()
                .skip_locked()
                .first::<Uuid>(conn)
                .optional()?;
            if locked.is_none() {
                return Ok(None);
            }
            // Re-read under the lock: the state or the rules may have moved.
            let Some(c) = candidates(conn, Some(id), None)?.into_iter().next() else {
                return Ok(None);
            };
            // Activity read for other rules than the current ones says nothing.
            let activity = activity
                .as_ref()
                .filter(|(threshold, since, _)| {
                    c.rules.idle_threshold_percent == Some(*threshold) && idle_from(&c) == *since
                })
                .map(|(_, _, a)| a);
            let Some(due) = next_due(&c, activity) else {
                return Ok(None);
            };
            let now = contracts::time::now();
            if now < due.due_at - lead {
                return Ok(None);
            }
            let notice = RuleNotice {
                rule: due.rule,
                action: due.action,
                due_at: due.due_at,
            };
            let stamp = due.due_at.timestamp_micros();
            let warned_now = record(
                conn,
                id,
                InstanceEventKind::RuleWarning,
                Detail {
                    reason: Some(&format!(
                        "rule {} will {} the instance at {}",
                        due.rule,
                        due.action,
                        due.due_at
                            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
                    )),
                    rule: Some(&notice),
                    dedupe_key: Some(format!("warn:{}:{stamp}", due.rule)),
                    ..Detail::default()
                },
                now,
            )?
            .is_some();
            // The warning must be out before the rule acts.
            if warned_now || !due.may_act(now) {
                return Ok(None);
            }
            record(
                conn,
                id,
                InstanceEventKind::RuleEnforced,
                Detail {
                    reason: Some(&format!("rule {} acts: {}", due.rule, due.action)),
                    rule: Some(&notice),
                    dedupe_key: Some(format!("enforce:{}:{stamp}", due.rule)),
                    ..Detail::default()
                },
                now,
            )?;
            Ok(Some((c, due)))
        })
        .await?;
    let Some((c, due)) = act else {
        return Ok(());
    };
    tracing::info!(instance.id = %id, rule = %due.rule, action = %due.action, "lifecycle rule enforced");
    let _: api::Instance = match due.rule {
        LifecycleRule::MaxDuration => {
            crate::instances::stop_because(
                db,
                deps,
                id,
                c.tenant_id,
                "stopped by rule: maximum duration reached",
            )
            .await?
        }
        LifecycleRule::Idle => {
            crate::instances::stop_because(db, deps, id, c.tenant_id, "stopped by rule: GPUs idle")
                .await?
        }
        LifecycleRule::AutoDestroy => crate::lifecycle::destroy(db, deps, id, c.tenant_id).await?,
    };
    Ok(())
}

/// Starts the rules task for this service.
pub fn spawn(deps: Deps, db: Db) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run(deps, db))
}

/// For the tests of [`next_due`].
#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    fn running(rules: InstanceRules) -> Candidate {
        Candidate {
            id: Uuid::now_v7(),
            tenant_id: TenantId::new(),
            machine_id: MachineId::new(),
            state: "running".into(),
            running_at: Some(at(0)),
            since: at(0),
            rules,
            rules_at: at(-10),
        }
    }

    #[test]
    fn max_duration_is_due_from_the_start_of_the_run() {
        let c = running(InstanceRules {
            max_duration_seconds: Some(60),
            ..Default::default()
        });
        let due = next_due(&c, None).unwrap();
        assert_eq!((due.rule, due.due_at), (LifecycleRule::MaxDuration, at(60)));
        assert!(due.may_act(at(60)) && !due.may_act(at(59)));
    }

    #[test]
    fn idle_counts_from_the_last_busy_heartbeat_and_waits_for_a_confirming_one() {
        let c = running(InstanceRules {
            idle_stop_after_seconds: Some(30),
            idle_threshold_percent: Some(10),
            ..Default::default()
        });
        let busy = GpuActivity {
            machine_id: c.machine_id,
            last_sample_at: Some(at(40)),
            last_busy_at: Some(at(20)),
        };
        let due = next_due(&c, Some(&busy)).unwrap();
        assert_eq!((due.rule, due.due_at), (LifecycleRule::Idle, at(50)));
        // Time has passed, but no heartbeat has shown the GPUs idle until then.
        assert!(!due.may_act(at(55)));
        let confirmed = GpuActivity {
            last_sample_at: Some(at(51)),
            ..busy
        };
        assert!(next_due(&c, Some(&confirmed)).unwrap().may_act(at(55)));
        // Never heard from: no idle verdict at all.
        let silent = GpuActivity {
            machine_id: c.machine_id,
            last_sample_at: None,
            last_busy_at: None,
        };
        assert_eq!(next_due(&c, Some(&silent)), None);
        assert_eq!(next_due(&c, None), None);
    }

    #[test]
    fn auto_destroy_counts_from_the_stop_and_the_earliest_rule_wins() {
        let mut c = running(InstanceRules {
            max_duration_seconds: Some(100),
            idle_stop_after_seconds: Some(30),
            idle_threshold_percent: Some(10),
            auto_destroy_after_stopped_seconds: Some(5),
        });
        let idle = GpuActivity {
            machine_id: c.machine_id,
            last_sample_at: Some(at(31)),
            last_busy_at: None,
        };
        assert_eq!(next_due(&c, Some(&idle)).unwrap().rule, LifecycleRule::Idle);
        c.state = "stopped".into();
        c.since = at(200);
        let due = next_due(&c, Some(&idle)).unwrap();
        assert_eq!(
            (due.rule, due.action, due.due_at),
            (LifecycleRule::AutoDestroy, RuleAction::Destroy, at(205))
        );
    }

    #[test]
    fn bad_rules_are_refused_with_the_field_named() {
        let bad = |rules: InstanceRules| match validate(&rules, 3600) {
            Err(Error::Validation(m)) => m,
            other => panic!("expected a validation error, got {other:?}"),
        };
        assert!(
            bad(InstanceRules {
                max_duration_seconds: Some(0),
                ..Default::default()
            })
            .contains("maxDurationSeconds")
        );
        assert!(
            bad(InstanceRules {
                idle_stop_after_seconds: Some(10),
                ..Default::default()
            })
            .contains("go together")
        );
        assert!(
            bad(InstanceRules {
                idle_stop_after_seconds: Some(10),
                idle_threshold_percent: Some(101),
                ..Default::default()
            })
            .contains("idleThresholdPercent")
        );
        assert!(
            bad(InstanceRules {
                idle_stop_after_seconds: Some(7200),
                idle_threshold_percent: Some(5),
                ..Default::default()
            })
            .contains("idleStopAfterSeconds")
        );
        assert!(validate(&InstanceRules::default(), 3600).is_ok());
    }
}
