//! The `agent` driver: each step goes as a command to the machine's own queue
//! `cmd.<machine_id>` (declared by its agent on connect) and the machine's
//! host agent carries it out and
//! answers on `gpumarket.agents` (`agent.<machine_id>.step_result`). Any
//! worker's results consumer records an answer against the command it
//! answers (only a command sent to that same machine counts); the worker
//! that sent the command waits for the answer in the database, up to the
//! step timeout. A silent agent makes the step fail as transient: it is
//! retried with a new command and, past the bound, the job dies. So does a
//! command the broker will not take: no queue ("machine <id> is not
//! connected": the agent is gone, or never came) or a full one ("command
//! queue of machine <id> is full").
//!
//! Commands carry the timeout as their AMQP expiration and as a deadline in
//! the body, so an agent that comes back late does not act on commands the
//! worker has given up on.

use contracts::ids::{InstanceId, MachineId};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use contracts::agent::{self as protocol, AgentCommand, StepProgress, StepResult};
use contracts::events::{
    DeprovisionInstance, MAX_PROGRESS_DETAIL, PROVISIONING_STEP, ProvisionInstance, ProvisionRun,
    ProvisioningStep, StopInstance,
};
use diesel::prelude::*;
use lapin::Confirmation;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::ShortString;
use lapin::{BasicProperties, Channel, Connection};
use platform::consumer::{HandlerError, RawMessage};
use platform::{Config, Db};
use schema::provisioner::{agent_commands, job_steps, jobs};
use serde::Serialize;
use tokio::sync::Mutex;
use uuid::Uuid;

use crate::Error;
use crate::driver::{BoxFuture, Driver, Step};

/// How often a waiting worker looks for the agent's answer.
const ANSWER_POLL: Duration = Duration::from_millis(100);

pub struct AgentDriver {
    db: Db,
    amqp_url: String,
    timeout: Duration,
    link: Mutex<Option<(Connection, Channel)>>,
}

impl AgentDriver {
    pub fn new(db: Db, config: &Config) -> Result<Self, Error> {
        Ok(Self {
            db,
            amqp_url: config.amqp_url.clone(),
            timeout: config
                .settings::<crate::ProvisionerSettings>()?
                .agent_step_timeout,
            link: Mutex::new(None),
        })
    }

    /// A confirming channel, reconnected after a failure.
    async fn channel(&self) -> Result<Channel, Error> {
        let mut link = self.link.lock().await;
        if let Some((conn, channel)) = link.as_ref()
            && conn.status().connected()
            && channel.status().connected()
        {
            return Ok(channel.clone());
        }
        let conn = tokio::time::timeout(self.timeout, platform::broker::connect(&self.amqp_url))
            .await
            .map_err(|_| broker("connecting to the broker timed out"))?;
        let channel = conn.create_channel().await.map_err(broker)?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(broker)?;
        *link = Some((conn, channel.clone()));
        Ok(channel)
    }

    async fn command<T: Serialize>(
        &self,
        step: Step,
        action: &str,
        machine_id: MachineId,
        instance_id: InstanceId,
        job: &T,
        issued_at: DateTime<Utc>,
    ) -> Result<(), Error> {
        let fail = |reason: String| Error::Step {
            step: step.as_str(),
            reason,
        };
        let command = AgentCommand {
            command_id: Uuid::now_v7(),
            machine_id,
            action: action.to_owned(),
            step: step.as_str().to_owned(),
            job: serde_json::to_value(job).map_err(|e| fail(e.to_string()))?,
            issued_at,
            deadline: Utc::now()
                + chrono::Duration::from_std(self.timeout).unwrap_or(chrono::Duration::MAX),
        };
        let command_id = command.command_id;
        let step_name = command.step.clone();
        // Recorded first: an answer can only count for a command on record.
        self.db
            .run(move |conn| {
                diesel::insert_into(agent_commands::table)
                    .values((
                        agent_commands::command_id.eq(command_id),
                        agent_commands::machine_id.eq(machine_id),
                        agent_commands::instance_id.eq(instance_id),
                        agent_commands::step.eq(step_name),
                    ))
                    .execute(conn)
                    .map(|_| ())
                    .map_err(Error::from)
            })
            .await?;
        self.publish(&command).await.map_err(|e| match e {
            Error::Step { reason, .. } => fail(reason),
            other => other,
        })?;

        let waited = tokio::time::timeout(self.timeout, async {
            loop {
                let answer: Option<(Option<bool>, Option<String>)> = self
                    .db
                    .run(move |conn| {
                        agent_commands::table
                            .find(command_id)
                            .filter(agent_commands::answered_at.is_not_null())
                            .select((agent_commands::ok, agent_commands::error))
                            .first(conn)
                            .optional()
                            .map_err(Error::from)
                    })
                    .await?;
                if let Some((ok, error)) = answer {
                    return Ok::<_, Error>((ok.unwrap_or(false), error));
                }
                tokio::time::sleep(ANSWER_POLL).await;
            }
        })
        .await;
        match waited {
            Err(_) => Err(fail(format!(
                "the host agent did not answer within {} ms",
                self.timeout.as_millis()
            ))),
            Ok(Err(e)) => Err(e),
            Ok(Ok((true, _))) => Ok(()),
            Ok(Ok((false, error))) => Err(fail(format!(
                "host agent: {}",
                error.unwrap_or_else(|| "failed".into())
            ))),
        }
    }

    /// To the default exchange, routed to the machine's queue by name,
    /// mandatory and confirmed: a machine without a queue (returned) or with
    /// a full one (nacked by `reject-publish`) is an error at once
    /// ([`refusal`]), not a silent timeout.
    async fn publish(&self, command: &AgentCommand) -> Result<(), Error> {
        let channel = self.channel().await?;
        let body = serde_json::to_vec(command).map_err(|e| broker(e.to_string()))?;
        let properties = BasicProperties::default()
            .with_content_type(ShortString::from("application/json"))
            .with_type(ShortString::from(command.action.as_str()))
            .with_message_id(ShortString::from(command.command_id.to_string()))
            .with_expiration(ShortString::from(self.timeout.as_millis().to_string()))
            .with_delivery_mode(2);
        let confirmation = channel
            .basic_publish(
                "".into(),
                protocol::command_queue(command.machine_id.into())
                    .as_str()
                    .into(),
                BasicPublishOptions {
                    mandatory: true,
                    ..Default::default()
                },
                &body,
                properties,
            )
            .await
            .map_err(broker)?
            .await
            .map_err(broker)?;
        match refusal(command.machine_id, confirmation) {
            Some(reason) => Err(broker(reason)),
            None => Ok(()),
        }
    }
}

/// Why the broker did not take a command, from its confirmation: returned
/// (mandatory, no queue bound under the name) means the machine's agent is
/// not connected (it declares `cmd.<machine_id>` on connect, and the queue
/// expires ten minutes after it left); nacked means the queue refused it,
/// which `reject-publish` does when it is full. None: the queue has it.
pub fn refusal(machine_id: MachineId, confirmation: Confirmation) -> Option<String> {
    let nacked = confirmation.is_nack();
    let returned = confirmation.take_message().is_some();
    if returned {
        Some(format!("machine {machine_id} is not connected"))
    } else if nacked {
        Some(format!("command queue of machine {machine_id} is full"))
    } else {
        None
    }
}

fn broker(e: impl ToString) -> Error {
    Error::Step {
        step: "agent_command",
        reason: e.to_string(),
    }
}

impl Driver for AgentDriver {
    fn run_step<'a>(
        &'a self,
        step: Step,
        job: &'a ProvisionInstance,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(self.command(
            step,
            "provision",
            job.machine_id,
            job.instance_id,
            job,
            Utc::now(),
        ))
    }

    /// The agent gets the whole run (`RentalSpec` reads its `attempt` as
    /// the run its containers are labelled with and exits are reported for).
    fn run_attempt_step<'a>(
        &'a self,
        step: Step,
        run: &'a ProvisionRun,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(self.command(
            step,
            "provision",
            run.instance.machine_id,
            run.instance.instance_id,
            run,
            Utc::now(),
        ))
    }

    fn deprovision_step<'a>(
        &'a self,
        step: Step,
        job: &'a DeprovisionInstance,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(self.command(
            step,
            "deprovision",
            job.machine_id,
            job.instance_id,
            job,
            Utc::now(),
        ))
    }

    fn stop<'a>(
        &'a self,
        command: &'a StopInstance,
        issued_at: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(self.command(
            Step::StopInstance,
            "stop",
            command.machine_id,
            command.instance_id,
            command,
            issued_at,
        ))
    }
}

fn permanent(reason: impl Into<String>) -> HandlerError {
    HandlerError::Permanent(reason.into())
}

/// How long after its command was answered a progress report still counts
/// (it was sent before the answer but handled after it).
const PROGRESS_AFTER_ANSWER_SECS: i64 = 30;

/// How many progress reports one command may turn into events; the rest
/// are dropped (an agent sends about one a second; a pull that takes longer
/// than this many reports shows its first ones and then its result).
pub const MAX_PROGRESS_PER_COMMAND: i32 = 120;

/// The machine of an `agent.<machine_id>.<kind>` message whose sender is
/// that machine's agent (`agent-<machine_id>.<gen>`; the broker checked the
/// `user_id` against the connection's user and deleted users of retired
/// tokens; the catalog's heartbeat consumer is the one that insists on the
/// current generation).
fn sender(message: &RawMessage, kind: &str) -> Result<Uuid, HandlerError> {
    let words: Vec<&str> = message.routing_key.split('.').collect();
    let ["agent", id, word] = words.as_slice() else {
        return Err(permanent(format!(
            "routing key {:?} is not agent.<machine_id>.{kind}",
            message.routing_key
        )));
    };
    if *word != kind {
        return Err(permanent(format!(
            "routing key {:?} is not agent.<machine_id>.{kind}",
            message.routing_key
        )));
    }
    let machine_id: MachineId = id
        .parse()
        .map_err(|_| permanent(format!("routing key names no machine: {id:?}")))?;
    if !message
        .user_id
        .as_deref()
        .is_some_and(|u| protocol::is_agent_of(u, machine_id.into()))
    {
        return Err(permanent(format!(
            "user_id {:?} may not answer for machine {machine_id}",
            message.user_id
        )));
    }
    Ok(machine_id.into())
}

/// Records one agent's answer. Only `agent-<machine_id>.<gen>` may answer for its
/// machine (the broker checked `user_id`), and only a command sent to that
/// machine; a duplicate answer changes nothing. A readiness check's
/// connection is kept with the answer when it is this instance's and within
/// bounds ([`contracts::api::Connection::validate`]); otherwise it is
/// dropped with a warning and the instance runs without one.
pub async fn record_result(db: &Db, message: RawMessage) -> Result<(), HandlerError> {
    let machine_id = sender(&message, "step_result")?;
    let result: StepResult = serde_json::from_slice(&message.data)
        .map_err(|e| permanent(format!("undecodable step result: {e}")))?;
    if result.machine_id != machine_id {
        return Err(permanent(
            "the body names another machine than the routing key",
        ));
    }
    let connection = result.detail.and_then(|d| d.connection);
    let updated = db
        .tx(move |conn| {
            let command: Option<(Uuid, String)> = agent_commands::table
                .find(result.command_id)
                .filter(agent_commands::machine_id.eq(machine_id))
                .filter(agent_commands::answered_at.is_null())
                .select((agent_commands::instance_id, agent_commands::step))
                .for_update()
                .first(conn)
                .optional()?;
            let Some((instance_id, step)) = command else {
                return Ok::<_, HandlerError>(0);
            };
            let detail = match connection {
                Some(c) if result.ok && step == Step::ReadinessCheck.as_str() => {
                    match c.validate(instance_id) {
                        Ok(()) => serde_json::to_value(&c).ok(),
                        Err(problem) => {
                            tracing::warn!(%machine_id, instance.id = %instance_id, %problem, "agent's connection dropped");
                            None
                        }
                    }
                }
                Some(_) => {
                    tracing::warn!(%machine_id, %step, "a connection from a step other than a passed readiness check dropped");
                    None
                }
                None => None,
            };
            diesel::update(agent_commands::table.find(result.command_id))
                .set((
                    agent_commands::answered_at.eq(diesel::dsl::now),
                    agent_commands::ok.eq(result.ok),
                    agent_commands::error.eq(result.error),
                    agent_commands::detail.eq(detail),
                ))
                .execute(conn)
                .map_err(HandlerError::from)
        })
        .await?;
    if updated == 0 {
        tracing::debug!(%machine_id, "step result for no open command ignored");
    }
    Ok(())
}

/// Records one progress report of a long step (an image pull) as a
/// `progress` [`ProvisioningStep`] with the message as its `detail`, so
/// `instanceEvents` shows it. The same sender checks as for results: the
/// machine's agent, about a command sent to that machine and still open
/// (or answered in the last [`PROGRESS_AFTER_ANSWER_SECS`]);
/// at most [`MAX_PROGRESS_PER_COMMAND`] per command, messages cut to
/// [`MAX_PROGRESS_DETAIL`] characters.
pub async fn record_progress(
    db: &Db,
    events_exchange: &str,
    message: RawMessage,
) -> Result<(), HandlerError> {
    let machine_id = sender(&message, "step_progress")?;
    let progress: StepProgress = serde_json::from_slice(&message.data)
        .map_err(|e| permanent(format!("undecodable step progress: {e}")))?;
    if progress.machine_id != machine_id {
        return Err(permanent(
            "the body names another machine than the routing key",
        ));
    }
    let exchange = events_exchange.to_owned();
    // Results and progress reports share one queue but are handled on tasks
    // of their own, so the step's result (which the agent sends after its
    // progress) can be recorded first; a report that arrives just after its
    // command was answered is still counted.
    let answered_since =
        contracts::time::now() - chrono::Duration::seconds(PROGRESS_AFTER_ANSWER_SECS);
    let detail: String = progress
        .message
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_PROGRESS_DETAIL)
        .collect();
    let recorded = db
        .tx(move |conn| -> Result<bool, HandlerError> {
            let command: Option<(Uuid, String)> = diesel::update(
                agent_commands::table
                    .find(progress.command_id)
                    .filter(agent_commands::machine_id.eq(machine_id))
                    .filter(
                        agent_commands::answered_at
                            .is_null()
                            .or(agent_commands::answered_at.gt(answered_since)),
                    )
                    .filter(agent_commands::progress_count.lt(MAX_PROGRESS_PER_COMMAND)),
            )
            .set(agent_commands::progress_count.eq(agent_commands::progress_count + 1))
            .returning((agent_commands::instance_id, agent_commands::step))
            .get_result(conn)
            .optional()?;
            let Some((instance_id, step)) = command else {
                return Ok(false);
            };
            // The job the command belongs to: the instance's open
            // provisioning job (one at a time per instance).
            let job: Option<(Uuid, String, Option<serde_json::Value>)> = jobs::table
                .filter(jobs::instance_id.eq(instance_id))
                .filter(jobs::kind.like("provision%"))
                .filter(jobs::reported_at.is_null())
                .order(jobs::created_at.desc())
                .select((jobs::id, jobs::kind, jobs::command))
                .first(conn)
                .optional()?;
            let Some((job_id, kind, command)) = job else {
                return Ok(false);
            };
            // The database refuses any other kind (migration 2026-12-07-000200).
            let Some(kind) = contracts::states::JobKind::parse(&kind) else {
                return Ok(false);
            };
            let attempt: i32 = job_steps::table
                .find((job_id, step.as_str()))
                .select(job_steps::attempts)
                .first(conn)
                .optional()?
                .unwrap_or(1);
            let field = |name: &str| {
                command
                    .as_ref()
                    .and_then(|c| c.get(name))
                    .and_then(|v| v.as_str())
                    .map(str::to_owned)
            };
            let at = contracts::time::now();
            let payload = ProvisioningStep {
                instance_id: InstanceId(instance_id),
                job_kind: kind,
                step,
                status: contracts::states::StepStatus::Progress,
                attempt,
                duration_ms: None,
                error: None,
                at,
                detail: Some(detail),
            };
            let envelope = contracts::Envelope::new(
                contracts::events::kinds::PROVISIONING_STEP,
                at,
                field("tenant_id").and_then(|t| t.parse().ok()),
                field("correlation_id"),
                &payload,
            )
            .map_err(|e| permanent(e.to_string()))?;
            platform::outbox::enqueue(conn, crate::SCHEMA, &exchange, PROVISIONING_STEP, &envelope)
                .map_err(HandlerError::from)?;
            Ok(true)
        })
        .await?;
    if !recorded {
        tracing::debug!(%machine_id, "step progress for no open command ignored");
    }
    Ok(())
}

/// Consumes the agents' step results and progress reports forever.
pub async fn run_results_consumer(config: Arc<Config>, db: Db, queue: String) {
    let exchange = config.events_exchange.clone();
    platform::consumer::run_raw(config, queue, move |message: RawMessage| {
        let db = db.clone();
        let exchange = exchange.clone();
        async move {
            if message.routing_key.ends_with(".step_progress") {
                record_progress(&db, &exchange, message).await
            } else {
                record_result(&db, message).await
            }
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nacked_command_is_a_full_queue_and_an_acked_one_is_taken() {
        let id = Uuid::nil();
        assert_eq!(refusal(MachineId(id), Confirmation::Ack(None)), None);
        assert_eq!(
            refusal(MachineId(id), Confirmation::Nack(None)).as_deref(),
            Some("command queue of machine 00000000-0000-0000-0000-000000000000 is full")
        );
    }
}
