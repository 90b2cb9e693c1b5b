//! Jobs, leases and the step log (docs/provisioning.md).
//!
//! A delivery on `provisioner.jobs` only records its job — one row per
//! instance and job kind, so a redelivered command finds its job — and is
//! acked. Execution is driven from the database: a worker claims a runnable
//! row with `FOR UPDATE SKIP LOCKED` and holds it under a lease
//! (`owner`, `lease_until`) that it renews while a step runs; every write a
//! worker makes about a job is fenced on still being its owner, so a worker
//! whose lease was taken over cannot overwrite its successor. A killed
//! worker's lease expires and any worker (or the same one restarted) claims
//! the job again and resumes at the first unfinished step.
//!
//! A failed step is retried after an exponential backoff with jitter that is
//! persisted (`next_attempt_at`), so a restart honours it; after
//! `step_attempts` starts of one step the job is dead: `failed`, its command
//! dead-lettered through the outbox, and the failure reported to ordering,
//! which releases everything and charges nothing. A job past its `deadline`
//! dies the same way. Every step start, finish and failure is published as a
//! `provisioner.instance.step` event in the transaction that records it.
//!
//! A worker is woken to claim by the commit of a new job row: its own
//! consumer's (an in-process signal) and any other worker's (a `NOTIFY
//! provisioner_jobs` in the inserting transaction, heard on a `LISTEN`
//! connection, platform::notify). Retries that come due, expired leases and
//! lost notifications are found by the slow poll (`job_poll_ms`).

use contracts::ids::{InstanceId, TenantId};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use contracts::api::{self, DeprovisioningResult, Instance, ProvisioningResult};
use contracts::events::{
    DEPROVISION_INSTANCE, DeprovisionInstance, PROVISION_INSTANCE, PROVISIONING_STEP, ProvisionRun,
    ProvisioningStep, STOP_INSTANCE, StopInstance,
};
use contracts::states::{JobKind, StepStatus};
use contracts::{Envelope, ErrorCode, endpoints};
use diesel::pg::PgConnection;
use diesel::prelude::*;
use diesel::sql_types::{Double, Jsonb, Nullable, Text, Uuid as SqlUuid};
use platform::consumer::HandlerError;
use platform::internal::InternalClient;
use platform::{Db, PlatformError};
use rand::Rng;
use schema::provisioner::{agent_commands, job_steps, jobs};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use uuid::Uuid;

use crate::Error;
use crate::driver::{Driver, Step};

/// How a worker runs jobs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Starts of one step before the job is dead.
    pub step_attempts: u32,
    pub lease: Duration,
    pub poll: Duration,
    /// Where the runner listens for new jobs; None polls only.
    pub listen: Option<platform::notify::Listener>,
    pub deadline: chrono::Duration,
    pub concurrency: usize,
    pub events_exchange: String,
    pub dead_letter_exchange: String,
}

#[derive(Clone)]
pub struct Worker {
    pub db: Db,
    pub driver: Arc<dyn Driver>,
    pub ordering: InternalClient,
    pub settings: Arc<Settings>,
    /// This process's name on the leases it holds.
    pub id: Arc<str>,
    pub wake: Arc<Notify>,
}

/// A stop command with the instant it was decided: the driver undoes only
/// what was bound before it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StopJob {
    command: StopInstance,
    issued_at: DateTime<Utc>,
}

/// What a job carries out, decoded from its row.
enum Work {
    // Boxed: the provisioning command is much the largest payload.
    Provision(Box<ProvisionRun>),
    Deprovision(DeprovisionInstance),
    Stop(StopJob),
    /// Takes a dead first run's leftovers off the machine (its instance is
    /// `failed`; nothing of it may stay).
    Cleanup(DeprovisionInstance),
}

impl Work {
    /// The work of a job row; an unknown kind is an error (the job dies
    /// and its command is dead-lettered), never a guess.
    fn decode(kind: &str, payload: &serde_json::Value) -> Result<Work, String> {
        let payload = payload.clone();
        let bad = |e: serde_json::Error| format!("{kind} payload: {e}");
        Ok(match JobKind::parse(kind) {
            Some(JobKind::Provision(attempt)) => {
                let mut run: ProvisionRun = serde_json::from_value(payload).map_err(bad)?;
                run.attempt = attempt;
                Work::Provision(Box::new(run))
            }
            Some(JobKind::Deprovision) => {
                Work::Deprovision(serde_json::from_value(payload).map_err(bad)?)
            }
            Some(JobKind::Cleanup(_)) => {
                Work::Cleanup(serde_json::from_value(payload).map_err(bad)?)
            }
            Some(JobKind::Stop(_)) => Work::Stop(serde_json::from_value(payload).map_err(bad)?),
            None => return Err(format!("unknown job kind {kind:?}")),
        })
    }

    fn steps(&self) -> &'static [Step] {
        match self {
            Work::Provision(_) => &Step::PROVISION,
            Work::Deprovision(_) | Work::Cleanup(_) => &Step::DEPROVISION,
            Work::Stop(_) => &Step::STOP,
        }
    }

    async fn run(&self, driver: &dyn Driver, step: Step) -> Result<(), Error> {
        match self {
            Work::Provision(run) => driver.run_attempt_step(step, run).await,
            Work::Deprovision(job) | Work::Cleanup(job) => driver.deprovision_step(step, job).await,
            Work::Stop(stop) => driver.stop(&stop.command, stop.issued_at).await,
        }
    }
}

/// Why a job's run ended early.
#[derive(Debug)]
enum Halt {
    /// Another worker (or the deadline reconciler) owns the job now.
    LeaseLost,
    /// The machinery failed (database, broker); the job is released and
    /// tried again later.
    Broken(String),
}

impl From<diesel::result::Error> for Halt {
    fn from(e: diesel::result::Error) -> Self {
        Halt::Broken(e.to_string())
    }
}

impl From<PlatformError> for Halt {
    fn from(e: PlatformError) -> Self {
        Halt::Broken(e.to_string())
    }
}

/// A job row a worker has just claimed.
#[derive(QueryableByName, Debug)]
struct Claimed {
    #[diesel(sql_type = SqlUuid)]
    id: Uuid,
    #[diesel(sql_type = Text)]
    kind: String,
    #[diesel(sql_type = SqlUuid)]
    instance_id: InstanceId,
    #[diesel(sql_type = Jsonb)]
    payload: serde_json::Value,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = Nullable<Text>)]
    last_error: Option<String>,
    #[diesel(sql_type = Nullable<Jsonb>)]
    command: Option<serde_json::Value>,
    #[diesel(sql_type = diesel::sql_types::Integer)]
    attempts: i32,
}

impl Claimed {
    fn tenant_id(&self) -> Option<Uuid> {
        self.command
            .as_ref()
            .and_then(|c| c.get("tenant_id"))
            .and_then(|t| t.as_str())
            .and_then(|t| t.parse().ok())
    }

    fn correlation_id(&self) -> Option<String> {
        self.command
            .as_ref()
            .and_then(|c| c.get("correlation_id"))
            .and_then(|t| t.as_str())
            .map(str::to_owned)
    }
}

/// How a job's steps went.
enum Steps {
    Succeeded,
    Failed(String),
    /// A step failed and will be retried at `next_attempt_at`; the lease is
    /// released.
    Retrying,
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64()
}

impl Worker {
    /// Records the job a command asks for and wakes the runner. The delivery
    /// is acked as soon as this returns: the row, not the message, carries
    /// the job from here.
    pub async fn accept(&self, envelope: Envelope) -> Result<(), HandlerError> {
        let bad =
            |e: serde_json::Error| HandlerError::Permanent(format!("bad {}: {e}", envelope.kind));
        let (kind, instance_id, machine_id, payload) = match envelope.kind.as_str() {
            PROVISION_INSTANCE => {
                let mut run: ProvisionRun = envelope.payload().map_err(bad)?;
                run.attempt = run.attempt.max(1);
                let payload = serde_json::to_value(&run).map_err(bad)?;
                (
                    JobKind::Provision(run.attempt),
                    run.instance.instance_id,
                    run.instance.machine_id,
                    payload,
                )
            }
            DEPROVISION_INSTANCE => {
                let job: DeprovisionInstance = envelope.payload().map_err(bad)?;
                let payload = serde_json::to_value(&job).map_err(bad)?;
                (
                    JobKind::Deprovision,
                    job.instance_id,
                    job.machine_id,
                    payload,
                )
            }
            STOP_INSTANCE => {
                let command: StopInstance = envelope.payload().map_err(bad)?;
                let (instance_id, machine_id) = (command.instance_id, command.machine_id);
                let payload = serde_json::to_value(StopJob {
                    command,
                    issued_at: envelope.occurred_at,
                })
                .map_err(bad)?;
                // One job per stop decision: an instance is stopped once per run.
                (JobKind::Stop(envelope.id), instance_id, machine_id, payload)
            }
            other => return Err(HandlerError::Permanent(format!("unknown command {other}"))),
        };
        let command = serde_json::to_value(&envelope).map_err(bad)?;
        let routing_key = envelope.kind.clone();
        let deadline = Utc::now() + self.settings.deadline;
        let deprovision = kind == JobKind::Deprovision;
        let provision = matches!(kind, JobKind::Provision(_));
        let kind = kind.to_string();
        self.db
            .tx(move |conn| -> Result<(), HandlerError> {
                // A provisioning command that arrives after its instance's
                // destroy (a redelivery) is recorded as cancelled: nothing
                // may be put on the machine for an instance on its way out.
                let destroyed = provision
                    && diesel::select(diesel::dsl::exists(
                        jobs::table
                            .filter(jobs::instance_id.eq(instance_id))
                            .filter(jobs::kind.eq(JobKind::Deprovision.to_string())),
                    ))
                    .get_result::<bool>(conn)?;
                let inserted = diesel::insert_into(jobs::table)
                    .values((
                        jobs::id.eq(Uuid::now_v7()),
                        jobs::instance_id.eq(instance_id),
                        jobs::kind.eq(&kind),
                        jobs::machine_id.eq(machine_id),
                        jobs::payload.eq(payload),
                        jobs::status.eq("running"),
                        jobs::deadline.eq(deadline),
                        jobs::command.eq(command),
                        jobs::routing_key.eq(routing_key),
                    ))
                    .on_conflict((jobs::instance_id, jobs::kind))
                    .do_nothing()
                    .execute(conn)?;
                if inserted == 1 {
                    // Other workers hear of the job at commit; this one is
                    // woken directly below.
                    platform::notify::notify(conn, JOBS_CHANNEL)?;
                }
                if destroyed {
                    cancel_provisioning(conn, instance_id)?;
                }
                tracing::info!(instance.id = %instance_id, kind, new = inserted == 1, "job recorded");
                // A destroy while provisioning: the provisioning jobs of the
                // instance stop (see `cancel_provisioning`).
                if deprovision {
                    let cancelled = cancel_provisioning(conn, instance_id)?;
                    if cancelled > 0 {
                        tracing::info!(instance.id = %instance_id, cancelled, "provisioning cancelled by a destroy");
                    }
                }
                Ok(())
            })
            .await?;
        self.wake.notify_one();
        Ok(())
    }

    /// Claims and runs jobs forever: up to `concurrency` at once, woken by a
    /// delivery, a job committed by another worker, a job ending, or every
    /// poll interval; overdue jobs are failed once per poll interval.
    pub async fn run_jobs(self) {
        let _listener = self.settings.listen.clone().map(|listener| {
            AbortOnDrop(tokio::spawn(platform::notify::listen(
                listener,
                self.wake.clone(),
            )))
        });
        let mut running = tokio::task::JoinSet::new();
        let mut next_sweep = Instant::now();
        loop {
            // Not on every wake-up: it is a transaction of its own, and a
            // claim woken by a new job should not wait behind it.
            if Instant::now() >= next_sweep {
                if let Err(error) = self.fail_overdue().await {
                    tracing::warn!(%error, "deadline sweep failed");
                }
                next_sweep = Instant::now() + self.settings.poll;
            }
            while running.len() < self.settings.concurrency {
                match self.claim().await {
                    Ok(Some(job)) => {
                        let worker = self.clone();
                        running.spawn(async move { worker.run_job(job).await });
                    }
                    Ok(None) => break,
                    Err(error) => {
                        tracing::warn!(%error, "claiming jobs failed");
                        break;
                    }
                }
            }
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(self.settings.poll) => {}
                Some(_) = running.join_next(), if !running.is_empty() => {}
            }
        }
    }

    /// Takes the next runnable job: not yet reported, due, and not under a
    /// live lease (a dead worker's lease has expired).
    async fn claim(&self) -> Result<Option<Claimed>, PlatformError> {
        let owner = self.id.to_string();
        let lease = millis(self.settings.lease);
        self.db
            .run(move |conn| {
                let rows: Vec<Claimed> = diesel::sql_query(
                    "UPDATE provisioner.jobs SET owner = $1, \
                         lease_until = now() + make_interval(secs => $2), \
                         attempts = attempts + 1, updated_at = now() \
                     WHERE id = (SELECT id FROM provisioner.jobs j \
                                 WHERE reported_at IS NULL AND next_attempt_at <= now() \
                                   AND (lease_until IS NULL OR lease_until < now()) \
                                   AND (kind LIKE 'provision%' OR NOT EXISTS ( \
                                       SELECT 1 FROM provisioner.jobs p \
                                       WHERE p.instance_id = j.instance_id AND p.id <> j.id \
                                         AND p.kind LIKE 'provision%' \
                                         AND p.lease_until >= now())) \
                                 ORDER BY next_attempt_at LIMIT 1 FOR UPDATE SKIP LOCKED) \
                     RETURNING id, kind, instance_id, payload, status, last_error, command, attempts",
                )
                .bind::<Text, _>(owner)
                .bind::<Double, _>(lease)
                .load(conn)?;
                Ok(rows.into_iter().next())
            })
            .await
    }

    /// The reconciler's half that needs no owner: a job past its deadline
    /// dies (whoever holds it loses the lease), and is then claimed to
    /// report the failure.
    async fn fail_overdue(&self) -> Result<(), PlatformError> {
        let dlx = self.settings.dead_letter_exchange.clone();
        self.db
            .tx(move |conn| {
                let overdue: Vec<Uuid> = jobs::table
                    .filter(jobs::status.eq("running"))
                    .filter(jobs::deadline.lt(diesel::dsl::now))
                    .select(jobs::id)
                    .limit(20)
                    .for_update()
                    .skip_locked()
                    .load(conn)?;
                for id in overdue {
                    tracing::warn!(job.id = %id, "job past its deadline: failed");
                    die(conn, id, "deadline exceeded before the job finished", &dlx)?;
                    diesel::update(jobs::table.find(id))
                        .set((
                            jobs::owner.eq(None::<String>),
                            jobs::lease_until.eq(None::<DateTime<Utc>>),
                            jobs::next_attempt_at.eq(diesel::dsl::now),
                        ))
                        .execute(conn)?;
                }
                Ok(())
            })
            .await
    }

    async fn run_job(self, job: Claimed) {
        // The order's correlation id, so the worker's calls to ordering (the
        // provisioning result) and its logs follow the order.
        let cid = job.correlation_id().unwrap_or_else(|| job.id.to_string());
        let span = tracing::info_span!("job", job.id = %job.id, job.kind = %job.kind, instance.id = %job.instance_id, correlation_id = %cid);
        let drive = platform::http::with_correlation_id(cid, self.drive(&job));
        let result = tracing::Instrument::instrument(drive, span).await;
        match result {
            Ok(()) => {}
            Err(Halt::LeaseLost) => {
                if self.drop_cancelled(job.id).await {
                    tracing::info!(job.id = %job.id, "job cancelled (its instance was destroyed); stopped")
                } else {
                    tracing::warn!(job.id = %job.id, "lease lost; another worker has the job")
                }
            }
            Err(Halt::Broken(reason)) => {
                tracing::warn!(job.id = %job.id, %reason, "job interrupted; released for a retry");
                let delay = backoff(job.attempts.max(1) as u32);
                if let Err(error) = self.release(job.id, delay).await {
                    // The lease runs out on its own.
                    tracing::warn!(%error, "release failed");
                }
            }
        }
    }

    async fn drive(&self, job: &Claimed) -> Result<(), Halt> {
        let work = match Work::decode(&job.kind, &job.payload) {
            Ok(work) => work,
            Err(e) => {
                // Our own row, unreadable: retrying cannot help.
                let reason = format!("undecodable job: {e}");
                self.fenced(job.id, {
                    let dlx = self.settings.dead_letter_exchange.clone();
                    let id = job.id;
                    move |conn| die(conn, id, &reason, &dlx).map_err(Halt::from)
                })
                .await?;
                return self.mark_reported(job.id).await;
            }
        };
        let outcome = match job.status.as_str() {
            "succeeded" => Steps::Succeeded,
            "failed" => Steps::Failed(
                job.last_error
                    .clone()
                    .unwrap_or_else(|| "job failed".into()),
            ),
            _ => self.run_steps(job, &work).await?,
        };
        match outcome {
            Steps::Retrying => Ok(()),
            Steps::Succeeded => self.report(job, &work, None).await,
            Steps::Failed(reason) => self.report(job, &work, Some(reason)).await,
        }
    }

    async fn run_steps(&self, job: &Claimed, work: &Work) -> Result<Steps, Halt> {
        let done = self.finished_steps(job.id).await?;
        // A step's success is recorded with the next step's start (or the
        // job's success): one commit per step boundary instead of two.
        let mut finished: Option<Finished> = None;
        for (position, &step) in work.steps().iter().enumerate() {
            if done.iter().any(|s| s == step.as_str()) {
                continue;
            }
            let attempt = match self
                .start_step(job, step, position as i32, finished.take())
                .await?
            {
                Started::Attempt(attempt) => attempt,
                Started::Exhausted(reason) => {
                    self.fenced(job.id, {
                        let (id, dlx, reason) = (
                            job.id,
                            self.settings.dead_letter_exchange.clone(),
                            reason.clone(),
                        );
                        move |conn| die(conn, id, &reason, &dlx).map_err(Halt::from)
                    })
                    .await?;
                    return Ok(Steps::Failed(reason));
                }
            };
            let started = Instant::now();
            let span = tracing::info_span!("step", step = step.as_str(), attempt);
            let result = tracing::Instrument::instrument(
                self.with_lease(job.id, work.run(self.driver.as_ref(), step)),
                span,
            )
            .await?;
            let elapsed_ms = started.elapsed().as_millis() as i64;
            match result {
                Ok(()) => {
                    platform::metrics::provisioning_step(step.as_str(), "ok", started.elapsed());
                    finished = Some(Finished {
                        step,
                        attempt,
                        duration_ms: elapsed_ms,
                    });
                    tracing::info!(step = step.as_str(), duration_ms = elapsed_ms, "step done");
                }
                Err(error) => {
                    platform::metrics::provisioning_step(step.as_str(), "error", started.elapsed());
                    let reason = error.to_string();
                    let dead = attempt >= self.settings.step_attempts as i32;
                    let delay = backoff(attempt as u32);
                    tracing::warn!(step = step.as_str(), %reason, attempt, dead, retry_in_ms = delay.as_millis() as u64, "step failed");
                    self.step_failed(job, step, attempt, elapsed_ms, &reason, dead, delay)
                        .await?;
                    return Ok(if dead {
                        Steps::Failed(reason)
                    } else {
                        Steps::Retrying
                    });
                }
            }
        }
        let event = self.event_base(job)?;
        let exchange = self.settings.events_exchange.clone();
        self.fenced(job.id, {
            let id = job.id;
            move |conn| {
                if let Some(last) = finished {
                    last.record(conn, id, &event, &exchange)?;
                }
                diesel::update(jobs::table.find(id))
                    .set((
                        jobs::status.eq("succeeded"),
                        jobs::last_error.eq(None::<String>),
                        jobs::finished_at.eq(diesel::dsl::now),
                    ))
                    .execute(conn)?;
                Ok(())
            }
        })
        .await?;
        Ok(Steps::Succeeded)
    }

    /// Runs `work` while renewing the lease; gives up on it the moment the
    /// lease is found taken.
    async fn with_lease<T>(
        &self,
        job_id: Uuid,
        work: impl std::future::Future<Output = T>,
    ) -> Result<T, Halt> {
        let renew = async {
            loop {
                tokio::time::sleep(self.settings.lease / 3).await;
                match self.fenced(job_id, |_| Ok(())).await {
                    Ok(()) => {}
                    Err(Halt::LeaseLost) => return Halt::LeaseLost,
                    // A database hiccup: the lease has time left; try again.
                    Err(Halt::Broken(reason)) => {
                        tracing::warn!(%reason, "lease renewal failed")
                    }
                }
            }
        };
        tokio::select! {
            result = work => Ok(result),
            halt = renew => Err(halt),
        }
    }

    /// Runs `f` in a transaction that first checks this worker still owns
    /// the job and extends its lease.
    async fn fenced<T, F>(&self, job_id: Uuid, f: F) -> Result<T, Halt>
    where
        F: FnOnce(&mut PgConnection) -> Result<T, Halt> + Send + 'static,
        T: Send + 'static,
    {
        let owner = self.id.to_string();
        let lease = millis(self.settings.lease);
        self.db
            .tx(move |conn| {
                let held = diesel::sql_query(
                    "UPDATE provisioner.jobs SET lease_until = now() + make_interval(secs => $3), \
                         updated_at = now() \
                     WHERE id = $1 AND owner = $2 AND reported_at IS NULL",
                )
                .bind::<SqlUuid, _>(job_id)
                .bind::<Text, _>(owner)
                .bind::<Double, _>(lease)
                .execute(conn)?;
                if held != 1 {
                    return Err(Halt::LeaseLost);
                }
                f(conn)
            })
            .await
    }

    async fn finished_steps(&self, job_id: Uuid) -> Result<Vec<String>, Halt> {
        self.db
            .run(move |conn| {
                Ok(job_steps::table
                    .filter(job_steps::job_id.eq(job_id))
                    .filter(job_steps::finished_at.is_not_null())
                    .select(job_steps::step)
                    .load(conn)?)
            })
            .await
    }

    /// Records the step as started (committed before the driver runs it),
    /// with its event. A step already started `step_attempts` times (by
    /// workers that died in it) is not started again.
    /// `finished`: the previous step's success, recorded in the same
    /// transaction.
    async fn start_step(
        &self,
        job: &Claimed,
        step: Step,
        position: i32,
        finished: Option<Finished>,
    ) -> Result<Started, Halt> {
        let max = self.settings.step_attempts as i32;
        let event = self.event_base(job)?;
        let exchange = self.settings.events_exchange.clone();
        let job_id = job.id;
        self.fenced(job_id, move |conn| {
            if let Some(previous) = finished {
                previous.record(conn, job_id, &event, &exchange)?;
            }
            let before: Option<(i32, Option<String>)> = job_steps::table
                .find((job_id, step.as_str()))
                .select((job_steps::attempts, job_steps::last_error))
                .first(conn)
                .optional()?;
            if let Some((attempts, last_error)) = before
                && attempts >= max
            {
                let last = last_error.unwrap_or_else(|| "the worker running it was lost".into());
                return Ok(Started::Exhausted(format!(
                    "step {} gave up after {attempts} attempts: {last}",
                    step.as_str()
                )));
            }
            let attempt: i32 = diesel::insert_into(job_steps::table)
                .values((
                    job_steps::job_id.eq(job_id),
                    job_steps::step.eq(step.as_str()),
                    job_steps::position.eq(position),
                    job_steps::attempts.eq(1),
                    job_steps::started_at.eq(diesel::dsl::now),
                ))
                .on_conflict((job_steps::job_id, job_steps::step))
                .do_update()
                .set((
                    job_steps::attempts.eq(job_steps::attempts + 1),
                    job_steps::started_at.eq(diesel::dsl::now),
                ))
                .returning(job_steps::attempts)
                .get_result(conn)?;
            event.emit(
                conn,
                &exchange,
                step,
                StepStatus::Started,
                attempt,
                None,
                None,
            )?;
            Ok(Started::Attempt(attempt))
        })
        .await
    }

    /// Records a failed attempt and its event; then either schedules the
    /// retry (releasing the lease) or, after the last attempt, kills the job.
    #[allow(clippy::too_many_arguments)]
    async fn step_failed(
        &self,
        job: &Claimed,
        step: Step,
        attempt: i32,
        duration_ms: i64,
        reason: &str,
        dead: bool,
        delay: Duration,
    ) -> Result<(), Halt> {
        let event = self.event_base(job)?;
        let exchange = self.settings.events_exchange.clone();
        let dlx = self.settings.dead_letter_exchange.clone();
        let job_id = job.id;
        let reason = reason.to_owned();
        self.fenced(job_id, move |conn| {
            diesel::update(job_steps::table.find((job_id, step.as_str())))
                .set((
                    job_steps::duration_ms.eq(duration_ms),
                    job_steps::last_error.eq(&reason),
                ))
                .execute(conn)?;
            event.emit(
                conn,
                &exchange,
                step,
                StepStatus::Failed,
                attempt,
                Some(duration_ms),
                Some(reason.clone()),
            )?;
            if dead {
                die(conn, job_id, &reason, &dlx)?;
            } else {
                diesel::sql_query(
                    "UPDATE provisioner.jobs SET owner = NULL, lease_until = NULL, last_error = $2, \
                         next_attempt_at = now() + make_interval(secs => $3) WHERE id = $1",
                )
                .bind::<SqlUuid, _>(job_id)
                .bind::<Text, _>(&reason)
                .bind::<Double, _>(delay.as_secs_f64())
                .execute(conn)?;
            }
            Ok(())
        })
        .await
    }

    /// Tells ordering how the job ended (stop jobs have no one to tell).
    /// Until ordering has heard it, the job stays unreported and is claimed
    /// again after a backoff; the reports are idempotent on ordering's side.
    async fn report(
        &self,
        job: &Claimed,
        work: &Work,
        failure: Option<String>,
    ) -> Result<(), Halt> {
        let reported: Result<Instance, platform::internal::RemoteError> = match work {
            Work::Stop(_) | Work::Cleanup(_) => {
                if let Some(reason) = &failure {
                    tracing::error!(%reason, "job failed; nobody to report to");
                }
                return self.mark_reported(job.id).await;
            }
            Work::Provision(run) => {
                let connection = if failure.is_none() {
                    self.connection_of(job).await?
                } else {
                    None
                };
                let result = ProvisioningResult {
                    ready: failure.is_none(),
                    reason: failure.clone(),
                    connection,
                    attempt: Some(run.attempt),
                };
                self.ordering
                    .call(
                        endpoints::ordering::PROVISIONING_RESULT,
                        run.instance.instance_id,
                        &result,
                    )
                    .await
            }
            Work::Deprovision(d) => {
                let result = DeprovisioningResult {
                    clean: failure.is_none(),
                    reason: failure.clone(),
                };
                self.ordering
                    .call(
                        endpoints::ordering::DEPROVISIONING_RESULT,
                        d.instance_id,
                        &result,
                    )
                    .await
            }
        };
        match reported {
            Ok(instance) => {
                tracing::info!(status = %instance.status, "outcome reported");
                self.mark_reported(job.id).await
            }
            Err(e) if e.code == ErrorCode::NotFound => {
                tracing::error!(error = %e, "ordering does not know the instance; outcome dropped");
                self.mark_reported(job.id).await
            }
            Err(e) => Err(Halt::Broken(format!("reporting the outcome: {e}"))),
        }
    }

    /// The connection the machine's agent answered this job's readiness
    /// check with (the `agent` driver records it, checked, with the answer);
    /// None from drivers that have none (simulated machines).
    async fn connection_of(&self, job: &Claimed) -> Result<Option<api::Connection>, Halt> {
        let job_id = job.id;
        let instance_id = job.instance_id;
        let detail: Option<Option<serde_json::Value>> = self
            .db
            .run(move |conn| -> Result<_, Halt> {
                let since: DateTime<Utc> = jobs::table
                    .find(job_id)
                    .select(jobs::created_at)
                    .first(conn)?;
                Ok(agent_commands::table
                    .filter(agent_commands::instance_id.eq(instance_id))
                    .filter(agent_commands::step.eq(Step::ReadinessCheck.as_str()))
                    .filter(agent_commands::ok.eq(true))
                    .filter(agent_commands::sent_at.ge(since))
                    .order(agent_commands::answered_at.desc())
                    .select(agent_commands::detail)
                    .first(conn)
                    .optional()?)
            })
            .await?;
        Ok(detail
            .flatten()
            .and_then(|d| serde_json::from_value(d).ok()))
    }

    async fn mark_reported(&self, job_id: Uuid) -> Result<(), Halt> {
        self.fenced(job_id, move |conn| {
            diesel::update(jobs::table.find(job_id))
                // The owner stays, as a record of who finished the job.
                .set((
                    jobs::reported_at.eq(diesel::dsl::now),
                    jobs::lease_until.eq(None::<DateTime<Utc>>),
                ))
                .execute(conn)?;
            Ok(())
        })
        .await
    }

    /// After a lost lease: if the job was cancelled, lets go of its lease at
    /// once, so the instance's deprovisioning (which waits for a live
    /// provisioning lease to end) starts now and not when the lease runs out.
    async fn drop_cancelled(&self, job_id: Uuid) -> bool {
        let owner = self.id.to_string();
        let dropped = self
            .db
            .run(move |conn| {
                diesel::update(jobs::table.find(job_id))
                    .filter(jobs::owner.eq(owner))
                    .filter(jobs::status.eq(CANCELLED))
                    .set(jobs::lease_until.eq(None::<DateTime<Utc>>))
                    .execute(conn)
                    .map_err(PlatformError::from)
            })
            .await;
        match dropped {
            Ok(n) => n == 1,
            Err(error) => {
                tracing::warn!(%error, "could not drop a cancelled job's lease; it runs out");
                false
            }
        }
    }

    /// Gives the job back to be claimed after `delay`.
    async fn release(&self, job_id: Uuid, delay: Duration) -> Result<(), PlatformError> {
        let owner = self.id.to_string();
        self.db
            .run(move |conn| {
                diesel::sql_query(
                    "UPDATE provisioner.jobs SET owner = NULL, lease_until = NULL, \
                         next_attempt_at = now() + make_interval(secs => $3) \
                     WHERE id = $1 AND owner = $2",
                )
                .bind::<SqlUuid, _>(job_id)
                .bind::<Text, _>(owner)
                .bind::<Double, _>(delay.as_secs_f64())
                .execute(conn)?;
                Ok(())
            })
            .await
    }

    fn event_base(&self, job: &Claimed) -> Result<EventBase, Halt> {
        // Decoded before any step ran (`Work::decode`), so this holds.
        let job_kind = JobKind::parse(&job.kind)
            .ok_or_else(|| Halt::Broken(format!("unknown job kind {:?}", job.kind)))?;
        Ok(EventBase {
            instance_id: job.instance_id,
            job_kind,
            tenant_id: job.tenant_id(),
            correlation_id: job.correlation_id(),
        })
    }
}

enum Started {
    Attempt(i32),
    Exhausted(String),
}

/// A step the driver carried out, not yet recorded as finished.
struct Finished {
    step: Step,
    attempt: i32,
    duration_ms: i64,
}

impl Finished {
    /// Marks the step finished, with its event.
    fn record(
        self,
        conn: &mut PgConnection,
        job_id: Uuid,
        event: &EventBase,
        exchange: &str,
    ) -> Result<(), diesel::result::Error> {
        diesel::update(job_steps::table.find((job_id, self.step.as_str())))
            .set((
                job_steps::finished_at.eq(diesel::dsl::now),
                job_steps::duration_ms.eq(self.duration_ms),
                job_steps::last_error.eq(None::<String>),
            ))
            .execute(conn)?;
        event.emit(
            conn,
            exchange,
            self.step,
            StepStatus::Finished,
            self.attempt,
            Some(self.duration_ms),
            None,
        )
    }
}

/// What every step event of one job shares.
struct EventBase {
    instance_id: InstanceId,
    job_kind: JobKind,
    tenant_id: Option<Uuid>,
    correlation_id: Option<String>,
}

impl EventBase {
    #[allow(clippy::too_many_arguments)]
    fn emit(
        &self,
        conn: &mut PgConnection,
        exchange: &str,
        step: Step,
        status: StepStatus,
        attempt: i32,
        duration_ms: Option<i64>,
        error: Option<String>,
    ) -> Result<(), diesel::result::Error> {
        let at = contracts::time::now();
        let payload = ProvisioningStep {
            instance_id: self.instance_id,
            job_kind: self.job_kind,
            step: step.as_str().to_owned(),
            status,
            attempt,
            duration_ms,
            error,
            at,
            detail: None,
        };
        let envelope = Envelope::new(
            contracts::events::kinds::PROVISIONING_STEP,
            at,
            self.tenant_id.map(TenantId),
            self.correlation_id.clone(),
            &payload,
        )
        .map_err(|e| diesel::result::Error::SerializationError(Box::new(e)))?;
        platform::outbox::enqueue(conn, crate::SCHEMA, exchange, PROVISIONING_STEP, &envelope)
    }
}

/// Fails the job for good and dead-letters the command that asked for it
/// (the original envelope, under its original routing key), in one
/// transaction. The job is then claimed once more to report the failure.
/// A dead first provisioning run also gets a cleanup job: its instance will
/// be `failed`, so whatever its finished steps put on the machine must go.
/// (A failed start after a stop keeps the renter's disk; ordering sends the
/// stop that unbinds the rest.)
fn die(
    conn: &mut PgConnection,
    job_id: Uuid,
    reason: &str,
    dead_letter_exchange: &str,
) -> Result<(), diesel::result::Error> {
    #[allow(clippy::type_complexity)]
    let (command, routing_key, dead_lettered, kind, payload): (
        Option<serde_json::Value>,
        Option<String>,
        Option<DateTime<Utc>>,
        String,
        serde_json::Value,
    ) = jobs::table
        .find(job_id)
        .select((
            jobs::command,
            jobs::routing_key,
            jobs::dead_lettered_at,
            jobs::kind,
            jobs::payload,
        ))
        .for_update()
        .first(conn)?;
    if let Some(JobKind::Provision(attempt)) = JobKind::parse(&kind)
        && let Ok(run) = serde_json::from_value::<ProvisionRun>(payload)
        && (attempt <= 1 || run.never_ran)
    {
        let cleanup = DeprovisionInstance {
            instance_id: run.instance.instance_id,
            machine_id: run.instance.machine_id,
            tenant_id: run.instance.tenant_id,
        };
        let cleanup_payload = serde_json::to_value(&cleanup)
            .map_err(|e| diesel::result::Error::SerializationError(Box::new(e)))?;
        diesel::insert_into(jobs::table)
            .values((
                jobs::id.eq(Uuid::now_v7()),
                jobs::instance_id.eq(cleanup.instance_id),
                jobs::kind.eq(JobKind::Cleanup(attempt).to_string()),
                jobs::machine_id.eq(cleanup.machine_id),
                jobs::payload.eq(cleanup_payload),
                jobs::status.eq("running"),
                jobs::command.eq(command.clone()),
            ))
            .on_conflict((jobs::instance_id, jobs::kind))
            .do_nothing()
            .execute(conn)?;
        platform::notify::notify(conn, JOBS_CHANNEL)?;
    }
    diesel::update(jobs::table.find(job_id))
        .set((
            jobs::status.eq("failed"),
            jobs::last_error.eq(reason),
            jobs::finished_at.eq(diesel::dsl::now),
            jobs::next_attempt_at.eq(diesel::dsl::now),
            jobs::dead_lettered_at.eq(diesel::dsl::now),
        ))
        .execute(conn)?;
    if dead_lettered.is_some() {
        return Ok(());
    }
    // Jobs recorded before commands were kept have nothing to dead-letter.
    if let (Some(command), Some(routing_key)) = (command, routing_key) {
        let envelope: Envelope = serde_json::from_value(command)
            .map_err(|e| diesel::result::Error::DeserializationError(Box::new(e)))?;
        platform::outbox::enqueue(
            conn,
            crate::SCHEMA,
            dead_letter_exchange,
            &routing_key,
            &envelope,
        )?;
    }
    Ok(())
}

/// The channel a commit that adds a job notifies (platform::notify).
pub const JOBS_CHANNEL: &str = "provisioner_jobs";

/// Stops the job listener when the runner ends (a stopped stack).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The status of a provisioning job stopped because its instance was
/// destroyed while it ran.
const CANCELLED: &str = "cancelled";

/// Cancels the unfinished provisioning jobs of an instance being destroyed:
/// `cancelled` and reported (ordering asked for it; there is nothing to tell
/// it), so no worker claims them again, and a worker running one loses its
/// lease at its next fenced write or lease renewal and stops between (or in
/// the middle of) steps. The deprovisioning job waits for such a lease to end
/// before it starts (see `claim`), so it never races a step still running,
/// and it undoes whatever the finished steps put on the machine.
fn cancel_provisioning(conn: &mut PgConnection, instance_id: InstanceId) -> QueryResult<usize> {
    diesel::update(jobs::table)
        .filter(jobs::instance_id.eq(instance_id))
        .filter(jobs::kind.like("provision%"))
        .filter(jobs::status.eq("running"))
        .filter(jobs::reported_at.is_null())
        .set((
            jobs::status.eq(CANCELLED),
            jobs::last_error.eq("cancelled: the instance was destroyed while provisioning"),
            jobs::finished_at.eq(diesel::dsl::now),
            jobs::reported_at.eq(diesel::dsl::now),
        ))
        .execute(conn)
}

/// Exponential backoff with full jitter, capped at 5 s.
fn backoff(attempt: u32) -> Duration {
    let cap = (100u64 << attempt.min(6)).min(5_000);
    Duration::from_millis(rand::thread_rng().gen_range(cap / 2..=cap))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_kinds_map_to_text_and_back() {
        assert_eq!(JobKind::Provision(0).to_string(), "provision");
        assert_eq!(JobKind::Provision(1).to_string(), "provision");
        assert_eq!(JobKind::Provision(3).to_string(), "provision:3");
        assert_eq!(JobKind::Cleanup(1).to_string(), "cleanup");
        let id = Uuid::now_v7();
        for kind in [
            JobKind::Provision(1),
            JobKind::Provision(3),
            JobKind::Deprovision,
            JobKind::Cleanup(1),
            JobKind::Cleanup(4),
            JobKind::Stop(id),
        ] {
            assert_eq!(JobKind::parse(&kind.to_string()), Some(kind), "{kind}");
        }
    }

    /// A kind this worker does not know is refused, never run as something
    /// else (it used to become a stop).
    #[test]
    fn an_unknown_job_kind_is_refused_not_guessed() {
        for raw in [
            "reboot",
            "stop",
            "stop:not-a-uuid",
            "provision:1",
            "provision:x",
            "provisioning",
            "deprovision:2",
            "",
        ] {
            assert_eq!(JobKind::parse(raw), None, "{raw:?}");
        }
        let stop = serde_json::json!({
            "command": {
                "instance_id": Uuid::now_v7(),
                "machine_id": Uuid::now_v7(),
                "tenant_id": Uuid::now_v7(),
            },
            "issued_at": Utc::now(),
        });
        let err = Work::decode("reboot", &stop).err().expect("refused");
        assert!(err.contains("unknown job kind"), "{err}");
    }

    #[test]
    fn backoff_grows_and_stays_capped() {
        for attempt in 1..20 {
            let cap = (100u64 << attempt.min(6)).min(5_000);
            let d = backoff(attempt).as_millis() as u64;
            assert!(d >= cap / 2 && d <= cap, "attempt {attempt}: {d}");
        }
    }
}
