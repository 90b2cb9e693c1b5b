//! Jobs and their step log. A step row is written as started (and committed)
//! before the driver runs it and stamped finished after; a job that is
//! redelivered after a crash skips finished steps and re-runs the one that
//! was in flight. Provisioning (one job per run of an instance) and
//! deprovisioning (one job per instance) share this machinery; they differ
//! in their steps and in the report they send ordering.

use std::sync::Arc;
use std::time::{Duration, Instant};

use contracts::api::{DeprovisioningResult, Instance, ProvisioningResult};
use contracts::events::{
    DEPROVISION_INSTANCE, DeprovisionInstance, PROVISION_INSTANCE, ProvisionInstance, ProvisionRun,
    STOP_INSTANCE, StopInstance,
};
use contracts::{Envelope, ErrorCode};
use diesel::prelude::*;
use platform::Db;
use platform::consumer::HandlerError;
use platform::internal::InternalClient;
use rand::Rng;
use schema::provisioner::{job_steps, jobs};
use uuid::Uuid;

use crate::Error;
use crate::driver::{Driver, Step};

#[derive(Clone)]
pub struct Worker {
    pub db: Db,
    pub driver: Arc<dyn Driver>,
    pub ordering: InternalClient,
    pub step_attempts: u32,
}

enum Outcome {
    Ready,
    Failed(String),
}

/// What a job carries out.
#[derive(Clone, Copy)]
enum Job<'a> {
    Provision(&'a ProvisionInstance),
    Deprovision(&'a DeprovisionInstance),
}

impl Job<'_> {
    fn instance_id(&self) -> Uuid {
        match self {
            Job::Provision(job) => job.instance_id,
            Job::Deprovision(job) => job.instance_id,
        }
    }

    fn machine_id(&self) -> Uuid {
        match self {
            Job::Provision(job) => job.machine_id,
            Job::Deprovision(job) => job.machine_id,
        }
    }

    fn steps(&self) -> &'static [Step] {
        match self {
            Job::Provision(_) => &Step::PROVISION,
            Job::Deprovision(_) => &Step::DEPROVISION,
        }
    }

    fn payload(&self) -> Result<serde_json::Value, serde_json::Error> {
        match self {
            Job::Provision(job) => serde_json::to_value(job),
            Job::Deprovision(job) => serde_json::to_value(job),
        }
    }

    async fn run(&self, driver: &dyn Driver, step: Step) -> Result<(), Error> {
        match self {
            Job::Provision(job) => driver.run_step(step, job).await,
            Job::Deprovision(job) => driver.deprovision_step(step, job).await,
        }
    }
}

/// The job kind of a provisioning attempt: the order's keeps the plain kind,
/// each start after a stop gets its own job (and step log).
fn provision_kind(attempt: i32) -> String {
    if attempt <= 1 {
        "provision".to_owned()
    } else {
        format!("provision:{attempt}")
    }
}

const DEPROVISION_KIND: &str = "deprovision";

impl Worker {
    pub async fn handle(&self, envelope: Envelope) -> Result<(), HandlerError> {
        let bad =
            |e: serde_json::Error| HandlerError::Permanent(format!("bad {}: {e}", envelope.kind));
        match envelope.kind.as_str() {
            PROVISION_INSTANCE => {
                let job: ProvisionRun = envelope.payload().map_err(bad)?;
                self.provision(job.instance, job.attempt.max(1)).await
            }
            DEPROVISION_INSTANCE => {
                let job: DeprovisionInstance = envelope.payload().map_err(bad)?;
                self.deprovision(job).await
            }
            STOP_INSTANCE => {
                let command: StopInstance = envelope.payload().map_err(bad)?;
                self.driver
                    .stop(&command, envelope.occurred_at)
                    .await
                    .map_err(|e| HandlerError::Transient(e.to_string()))
            }
            other => Err(HandlerError::Permanent(format!("unknown command {other}"))),
        }
    }

    /// Opens (or resumes) the job and runs its unfinished steps; a job that
    /// already ended answers its recorded outcome.
    async fn execute(&self, kind: &str, job: Job<'_>) -> Result<Outcome, HandlerError> {
        let job_id = self.open_job(kind, job).await?;
        Ok(match self.job_status(job_id).await?.as_str() {
            "succeeded" => Outcome::Ready,
            "failed" => Outcome::Failed(self.job_error(job_id).await?),
            _ => self.run_steps(job_id, job).await?,
        })
    }

    async fn provision(&self, job: ProvisionInstance, attempt: i32) -> Result<(), HandlerError> {
        let outcome = self
            .execute(&provision_kind(attempt), Job::Provision(&job))
            .await?;
        let result = match &outcome {
            Outcome::Ready => ProvisioningResult {
                ready: true,
                reason: None,
            },
            Outcome::Failed(reason) => ProvisioningResult {
                ready: false,
                reason: Some(reason.clone()),
            },
        };
        // Until ordering has heard the result, the message stays unacked and
        // comes back; the report is idempotent on ordering's side.
        let reported: Result<Instance, _> = self
            .ordering
            .post(
                &format!(
                    "/internal/instances/{}/provisioning-result?attempt={attempt}",
                    job.instance_id
                ),
                &result,
            )
            .await;
        report(reported, job.instance_id, "provisioning")
    }

    /// Takes the instance off its machine and validates the machine clean;
    /// ordering returns the capacity only on a clean report.
    async fn deprovision(&self, job: DeprovisionInstance) -> Result<(), HandlerError> {
        let outcome = self
            .execute(DEPROVISION_KIND, Job::Deprovision(&job))
            .await?;
        let result = match outcome {
            Outcome::Ready => DeprovisioningResult {
                clean: true,
                reason: None,
            },
            Outcome::Failed(reason) => DeprovisioningResult {
                clean: false,
                reason: Some(reason),
            },
        };
        let reported: Result<Instance, _> = self
            .ordering
            .post(
                &format!(
                    "/internal/instances/{}/deprovisioning-result",
                    job.instance_id
                ),
                &result,
            )
            .await;
        report(reported, job.instance_id, "deprovisioning")
    }

    async fn run_steps(&self, job_id: Uuid, job: Job<'_>) -> Result<Outcome, HandlerError> {
        let done = self.finished_steps(job_id).await?;
        for (position, &step) in job.steps().iter().enumerate() {
            if done.contains(&step.as_str().to_owned()) {
                continue;
            }
            let mut attempt = 0;
            loop {
                attempt += 1;
                self.start_step(job_id, step, position as i32).await?;
                let started = Instant::now();
                let span = tracing::info_span!("step", step = step.as_str(), attempt, instance.id = %job.instance_id());
                let result =
                    tracing::Instrument::instrument(job.run(self.driver.as_ref(), step), span)
                        .await;
                let elapsed_ms = started.elapsed().as_millis() as i64;
                match result {
                    Ok(()) => {
                        platform::metrics::PROVISIONING_STEPS
                            .with_label_values(&[step.as_str(), "ok"])
                            .inc();
                        self.finish_step(job_id, step, elapsed_ms, None).await?;
                        tracing::info!(step = step.as_str(), duration_ms = elapsed_ms, "step done");
                        break;
                    }
                    Err(error) => {
                        platform::metrics::PROVISIONING_STEPS
                            .with_label_values(&[step.as_str(), "error"])
                            .inc();
                        let reason = error.to_string();
                        self.note_step_error(job_id, step, &reason).await?;
                        if attempt >= self.step_attempts {
                            self.fail_job(job_id, &reason).await?;
                            return Ok(Outcome::Failed(reason));
                        }
                        let delay = backoff(attempt);
                        tracing::warn!(step = step.as_str(), %reason, retry_in_ms = delay.as_millis() as u64, "step failed");
                        tokio::time::sleep(delay).await;
                    }
                }
            }
        }
        self.succeed_job(job_id).await?;
        Ok(Outcome::Ready)
    }

    async fn open_job(&self, kind: &str, job: Job<'_>) -> Result<Uuid, HandlerError> {
        let payload = job
            .payload()
            .map_err(|e| HandlerError::Permanent(e.to_string()))?;
        let (instance_id, machine_id) = (job.instance_id(), job.machine_id());
        let kind = kind.to_owned();
        self.db
            .tx(move |conn| -> Result<Uuid, HandlerError> {
                diesel::insert_into(jobs::table)
                    .values((
                        jobs::id.eq(Uuid::now_v7()),
                        jobs::instance_id.eq(instance_id),
                        jobs::kind.eq(&kind),
                        jobs::machine_id.eq(machine_id),
                        jobs::payload.eq(payload),
                        jobs::status.eq("running"),
                    ))
                    .on_conflict((jobs::instance_id, jobs::kind))
                    .do_nothing()
                    .execute(conn)?;
                let id: Uuid = jobs::table
                    .filter(jobs::instance_id.eq(instance_id))
                    .filter(jobs::kind.eq(&kind))
                    .select(jobs::id)
                    .first(conn)?;
                diesel::update(jobs::table.find(id))
                    .set((
                        jobs::attempts.eq(jobs::attempts + 1),
                        jobs::updated_at.eq(diesel::dsl::now),
                    ))
                    .execute(conn)?;
                Ok(id)
            })
            .await
    }

    async fn job_status(&self, job_id: Uuid) -> Result<String, HandlerError> {
        self.db
            .run(move |conn| Ok(jobs::table.find(job_id).select(jobs::status).first(conn)?))
            .await
    }

    async fn job_error(&self, job_id: Uuid) -> Result<String, HandlerError> {
        self.db
            .run(move |conn| {
                let e: Option<String> = jobs::table
                    .find(job_id)
                    .select(jobs::last_error)
                    .first(conn)?;
                Ok(e.unwrap_or_else(|| "job failed".into()))
            })
            .await
    }

    async fn finished_steps(&self, job_id: Uuid) -> Result<Vec<String>, HandlerError> {
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

    async fn start_step(
        &self,
        job_id: Uuid,
        step: Step,
        position: i32,
    ) -> Result<(), HandlerError> {
        self.db
            .run(move |conn| {
                diesel::insert_into(job_steps::table)
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
                    .execute(conn)?;
                Ok(())
            })
            .await
    }

    async fn finish_step(
        &self,
        job_id: Uuid,
        step: Step,
        duration_ms: i64,
        error: Option<String>,
    ) -> Result<(), HandlerError> {
        self.db
            .run(move |conn| {
                diesel::update(job_steps::table.find((job_id, step.as_str())))
                    .set((
                        job_steps::finished_at.eq(diesel::dsl::now),
                        job_steps::duration_ms.eq(duration_ms),
                        job_steps::last_error.eq(error),
                    ))
                    .execute(conn)?;
                Ok(())
            })
            .await
    }

    async fn note_step_error(
        &self,
        job_id: Uuid,
        step: Step,
        reason: &str,
    ) -> Result<(), HandlerError> {
        let reason = reason.to_owned();
        self.db
            .run(move |conn| {
                diesel::update(job_steps::table.find((job_id, step.as_str())))
                    .set(job_steps::last_error.eq(reason))
                    .execute(conn)?;
                Ok(())
            })
            .await
    }

    async fn succeed_job(&self, job_id: Uuid) -> Result<(), HandlerError> {
        self.set_job(job_id, "succeeded", None).await
    }

    async fn fail_job(&self, job_id: Uuid, reason: &str) -> Result<(), HandlerError> {
        self.set_job(job_id, "failed", Some(reason.to_owned()))
            .await
    }

    async fn set_job(
        &self,
        job_id: Uuid,
        status: &'static str,
        error: Option<String>,
    ) -> Result<(), HandlerError> {
        self.db
            .run(move |conn| {
                diesel::update(jobs::table.find(job_id))
                    .set((
                        jobs::status.eq(status),
                        jobs::last_error.eq(error),
                        jobs::finished_at.eq(diesel::dsl::now),
                        jobs::updated_at.eq(diesel::dsl::now),
                    ))
                    .execute(conn)?;
                Ok(())
            })
            .await
    }
}

/// Until ordering has heard a job's result, the message stays unacked and
/// comes back; the reports are idempotent on ordering's side.
fn report(
    reported: Result<Instance, platform::internal::RemoteError>,
    instance_id: Uuid,
    what: &str,
) -> Result<(), HandlerError> {
    match reported {
        Ok(instance) => {
            tracing::info!(instance.id = %instance_id, status = %instance.status, "{what} reported");
            Ok(())
        }
        Err(e) if e.code == ErrorCode::NotFound => Err(HandlerError::Permanent(e.to_string())),
        Err(e) => Err(HandlerError::Transient(e.to_string())),
    }
}

/// Exponential backoff with full jitter, capped at 5 s.
fn backoff(attempt: u32) -> Duration {
    let cap = (100u64 << attempt.min(6)).min(5_000);
    Duration::from_millis(rand::thread_rng().gen_range(cap / 2..=cap))
}

impl From<Error> for HandlerError {
    fn from(e: Error) -> Self {
        HandlerError::Transient(e.to_string())
    }
}
