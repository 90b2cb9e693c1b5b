//! `instanceEvents(instanceId)`: every state change, provisioning step and
//! lifecycle-rule notice of one instance, over WebSocket
//! (graphql-transport-ws; the lifecycle rules themselves are in `rules`).
//!
//! Live delivery comes from the process's event hub ([`crate::hub`]): a
//! broadcast channel per instance. A subscription first joins the
//! channel, then asks ordering for the history and streams it, then the live
//! events it has not streamed yet: instance events by `seq`, provisioning
//! steps by (job kind, step, status, attempt), the same key ordering records
//! them under. Nothing is missed between the history and the first live
//! event, and nothing is streamed twice. A subscriber that falls more than
//! [`crate::hub::CHANNEL_CAPACITY`] events behind has its subscription completed; it
//! subscribes again and the history fills the gap.

use contracts::ids::InstanceId;
use std::collections::HashSet;
use std::sync::Arc;

use async_graphql::{Context, ID, SimpleObject, Subscription};
use chrono::{DateTime, Utc};
use contracts::events;
use contracts::states::{
    InstanceEventKind, InstanceState, JobType, LifecycleRule, RuleAction, StepStatus,
};
use contracts::{api, endpoints};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use tokio::sync::broadcast;

use super::instant;
use super::rentals::Instance;
use crate::auth::{self, Access};
use crate::clients;
use crate::error::{GatewayError, GqlResult};
use crate::hub::{Hub, Live};
use crate::validate;

/// One provisioning or deprovisioning step of a worker job.
#[derive(SimpleObject, Clone)]
pub struct ProvisioningStep {
    /// `provision`, `provision:N` (a start after a stop), `deprovision`,
    /// `cleanup[:N]` or `stop:<command id>`: the job's key.
    job_kind: String,
    /// What the job does (its kind without the attempt or command id).
    job: JobType,
    step: String,
    /// `started`, `finished`, `failed` or `progress`.
    #[graphql(deprecation = "a String: use `state`, a StepStatus")]
    status: String,
    /// `PROGRESS` reports how far a long step got, in `detail` (an image
    /// pull's bytes).
    state: StepStatus,
    attempt: i32,
    duration_ms: Option<i64>,
    error: Option<String>,
    #[graphql(deprecation = "a String: use `atUtc`, a DateTime")]
    at: String,
    at_utc: DateTime<Utc>,
    /// A `progress` event's message.
    detail: Option<String>,
}

impl From<events::ProvisioningStep> for ProvisioningStep {
    fn from(s: events::ProvisioningStep) -> Self {
        Self {
            job_kind: s.job_kind.to_string(),
            job: s.job_kind.job_type(),
            step: s.step,
            status: s.status.to_string(),
            state: s.status,
            attempt: s.attempt,
            duration_ms: s.duration_ms,
            error: s.error,
            at: instant(s.at),
            at_utc: s.at,
            detail: s.detail,
        }
    }
}

/// A lifecycle rule about to act, or acting.
#[derive(SimpleObject)]
pub struct RuleNotice {
    /// `max_duration`, `idle` or `auto_destroy`.
    #[graphql(deprecation = "a String: use `lifecycleRule`, a LifecycleRule")]
    rule: String,
    lifecycle_rule: LifecycleRule,
    /// `stop` or `destroy`.
    #[graphql(deprecation = "a String: use `ruleAction`, a RuleAction")]
    action: String,
    rule_action: RuleAction,
    #[graphql(deprecation = "a String: use `dueAtUtc`, a DateTime")]
    due_at: String,
    due_at_utc: DateTime<Utc>,
}

/// One change of an instance.
#[derive(SimpleObject)]
pub struct InstanceEvent {
    /// Position in the instance's history (from 1); null for a provisioning
    /// step streamed live before ordering recorded it.
    seq: Option<i32>,
    /// `state_changed`, `provisioning_step`, `rule_warning`,
    /// `rule_enforced` or `rules_changed`.
    #[graphql(deprecation = "a String: use `eventKind`, an InstanceEventKind")]
    kind: String,
    event_kind: InstanceEventKind,
    #[graphql(deprecation = "a String: use `from`, an InstanceState")]
    from_state: Option<String>,
    #[graphql(deprecation = "a String: use `to`, an InstanceState")]
    to_state: Option<String>,
    /// The state left (state changes; null when the instance was created).
    from: Option<InstanceState>,
    /// The state entered (state changes).
    to: Option<InstanceState>,
    reason: Option<String>,
    step: Option<ProvisioningStep>,
    rule: Option<RuleNotice>,
    /// The instance after the event, with its rental type and billed rates
    /// (null on a step streamed live).
    instance: Option<Instance>,
    #[graphql(deprecation = "a String: use `atUtc`, a DateTime")]
    at: String,
    at_utc: DateTime<Utc>,
}

impl From<events::InstanceEvent> for InstanceEvent {
    fn from(e: events::InstanceEvent) -> Self {
        Self {
            seq: Some(e.seq),
            kind: e.kind.to_string(),
            event_kind: e.kind,
            from_state: e.from_state.map(|s| s.to_string()),
            to_state: e.to_state.map(|s| s.to_string()),
            from: e.from_state,
            to: e.to_state,
            reason: e.reason,
            step: e.step.map(Into::into),
            rule: e.rule.map(|r| RuleNotice {
                rule: r.rule.to_string(),
                lifecycle_rule: r.rule,
                action: r.action.to_string(),
                rule_action: r.action,
                due_at: instant(r.due_at),
                due_at_utc: r.due_at,
            }),
            instance: Some(e.instance.into()),
            at: instant(e.at),
            at_utc: e.at,
        }
    }
}

fn step_key(s: &events::ProvisioningStep) -> String {
    format!("{}:{}:{}:{}", s.job_kind, s.step, s.status, s.attempt)
}

/// What one subscription has streamed so far.
#[derive(Default)]
struct Streamed {
    last_seq: i32,
    steps: HashSet<String>,
}

impl Streamed {
    /// The event to stream, or None when it was streamed already.
    fn admit(&mut self, live: Live) -> Option<InstanceEvent> {
        match live {
            Live::Instance(event) => {
                if event.seq <= self.last_seq {
                    return None;
                }
                self.last_seq = event.seq;
                if let Some(step) = &event.step
                    && !self.steps.insert(step_key(step))
                {
                    return None;
                }
                Some((*event).into())
            }
            Live::Step(step) => {
                if !self.steps.insert(step_key(&step)) {
                    return None;
                }
                Some(InstanceEvent {
                    seq: None,
                    kind: InstanceEventKind::ProvisioningStep.to_string(),
                    event_kind: InstanceEventKind::ProvisioningStep,
                    from_state: None,
                    to_state: None,
                    from: None,
                    to: None,
                    reason: step.error.clone(),
                    instance: None,
                    at: instant(step.at),
                    at_utc: step.at,
                    step: Some(step.into()),
                    rule: None,
                })
            }
        }
    }
}

#[derive(Default)]
pub struct EventsSubscription;

#[Subscription]
impl EventsSubscription {
    /// Every change of one of the caller's instances: first its history,
    /// then live state changes, provisioning steps and rule notices. Over
    /// WebSocket (graphql-transport-ws) at `/graphql`; the token goes in the
    /// `connection_init` payload as `{"authorization": "Bearer ..."}`.
    async fn instance_events(
        &self,
        ctx: &Context<'_>,
        instance_id: ID,
    ) -> async_graphql::Result<BoxStream<'static, InstanceEvent>> {
        Ok(instance_events(ctx, instance_id).await?)
    }
}

async fn instance_events(
    ctx: &Context<'_>,
    instance_id: ID,
) -> GqlResult<BoxStream<'static, InstanceEvent>> {
    {
        let principal = auth::authorize(ctx, Access::Instances).await?;
        let id = validate::id("instanceId", &instance_id)?;
        let hub = ctx
            .data_opt::<Arc<Hub>>()
            .ok_or_else(|| GatewayError::Internal("event hub missing from schema data".into()))?;
        // Join the live channel before reading the history, so nothing falls
        // between the two.
        let rx = hub.subscribe(InstanceId(id));
        let history = clients::from_context(ctx)?
            .ordering
            .call(
                endpoints::ordering::INSTANCE_EVENTS,
                InstanceId(id),
                &api::TenantQuery {
                    tenant_id: principal.tenant_id,
                },
            )
            .await?;
        let mut streamed = Streamed::default();
        let replay: Vec<InstanceEvent> = history
            .into_iter()
            .filter_map(|e| streamed.admit(Live::Instance(Box::new(e))))
            .collect();
        // A subscription made with an API key ends at the first event after
        // the key is revoked (docs/security.md, "API keys").
        let recheck = auth::KeyRecheck::of(ctx).map(Arc::new);
        let live = futures_util::stream::unfold(
            (rx, streamed, recheck),
            |(mut rx, mut streamed, recheck)| async move {
                loop {
                    match rx.recv().await {
                        Ok(live) => {
                            if let Some(event) = streamed.admit(live) {
                                if let Some(key) = &recheck
                                    && !key.still_valid().await
                                {
                                    tracing::info!(
                                        "instanceEvents subscriber's API key is no longer valid; completing it"
                                    );
                                    return None;
                                }
                                return Some((event, (rx, streamed, recheck)));
                            }
                        }
                        Err(broadcast::error::RecvError::Lagged(missed)) => {
                            tracing::warn!(
                                missed,
                                "instanceEvents subscriber fell behind; completing it"
                            );
                            return None;
                        }
                        Err(broadcast::error::RecvError::Closed) => return None,
                    }
                }
            },
        );
        Ok(futures_util::stream::iter(replay).chain(live).boxed())
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use uuid::Uuid;

    use super::*;

    fn step(status: &str, attempt: i32) -> events::ProvisioningStep {
        events::ProvisioningStep {
            instance_id: InstanceId(Uuid::nil()),
            job_kind: contracts::states::JobKind::Provision(1),
            step: "image".into(),
            status: status.parse().expect("a step status"),
            attempt,
            duration_ms: None,
            error: None,
            at: Utc::now(),
            detail: None,
        }
    }

    #[test]
    fn a_step_streams_once_whether_it_comes_live_or_recorded() {
        let mut streamed = Streamed::default();
        assert!(streamed.admit(Live::Step(step("started", 1))).is_some());
        assert!(streamed.admit(Live::Step(step("started", 1))).is_none());
        assert!(streamed.admit(Live::Step(step("finished", 1))).is_some());
        assert!(streamed.admit(Live::Step(step("started", 2))).is_some());
    }
}
