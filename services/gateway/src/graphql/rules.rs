//! The lifecycle rules of an instance (`instanceRules`,
//! `setInstanceRules`): stop after a duration or when idle, destroy some
//! time after a stop. Ordering enforces them and announces each warning and
//! enforcement as an instance event.

use async_graphql::{Context, ID, InputObject, Object, SimpleObject};
use contracts::ids::InstanceId;
use contracts::{api, endpoints};

use crate::auth::{self, Access};
use crate::clients;
use crate::error::GqlResult;
use crate::validate;

/// Lifecycle rules of an instance; durations in seconds, an absent field is
/// no rule.
#[derive(SimpleObject)]
pub struct InstanceRules {
    /// Stop once a run has lasted this long (from its `runningAt`).
    max_duration_seconds: Option<i64>,
    /// Stop once every GPU of the machine stayed below
    /// `idleThresholdPercent` utilisation for this long.
    idle_stop_after_seconds: Option<i64>,
    idle_threshold_percent: Option<i32>,
    /// Destroy once stopped for this long.
    auto_destroy_after_stopped_seconds: Option<i64>,
}

impl From<api::InstanceRules> for InstanceRules {
    fn from(r: api::InstanceRules) -> Self {
        Self {
            max_duration_seconds: r.max_duration_seconds,
            idle_stop_after_seconds: r.idle_stop_after_seconds,
            idle_threshold_percent: r.idle_threshold_percent,
            auto_destroy_after_stopped_seconds: r.auto_destroy_after_stopped_seconds,
        }
    }
}

/// Lifecycle rules to set; each is announced by a `rule_warning` event
/// before it acts. Idle-stop needs both its fields.
#[derive(InputObject, Clone)]
pub struct InstanceRulesInput {
    max_duration_seconds: Option<i64>,
    idle_stop_after_seconds: Option<i64>,
    /// 1 to 100.
    idle_threshold_percent: Option<i32>,
    auto_destroy_after_stopped_seconds: Option<i64>,
}

impl From<InstanceRulesInput> for api::InstanceRules {
    fn from(r: InstanceRulesInput) -> Self {
        Self {
            max_duration_seconds: r.max_duration_seconds,
            idle_stop_after_seconds: r.idle_stop_after_seconds,
            idle_threshold_percent: r.idle_threshold_percent,
            auto_destroy_after_stopped_seconds: r.auto_destroy_after_stopped_seconds,
        }
    }
}

#[derive(Default)]
pub struct LifecycleQuery;

#[Object]
impl LifecycleQuery {
    /// The lifecycle rules of one of the caller's instances.
    async fn instance_rules(&self, ctx: &Context<'_>, instance_id: ID) -> GqlResult<InstanceRules> {
        let principal = auth::authorize(ctx, Access::Instances).await?;
        let id = validate::id("instanceId", &instance_id)?;
        let rules = clients::from_context(ctx)?
            .ordering
            .call(
                endpoints::ordering::INSTANCE_RULES,
                InstanceId(id),
                &api::TenantQuery {
                    tenant_id: principal.tenant_id,
                },
            )
            .await?;
        Ok(rules.into())
    }
}

#[derive(Default)]
pub struct LifecycleMutation;

#[Object]
impl LifecycleMutation {
    /// Replaces the lifecycle rules of an instance (absent fields clear
    /// theirs). Setting the same rules again changes nothing.
    async fn set_instance_rules(
        &self,
        ctx: &Context<'_>,
        instance_id: ID,
        rules: InstanceRulesInput,
    ) -> GqlResult<InstanceRules> {
        let principal = auth::authorize(ctx, Access::Rent).await?;
        let id = validate::id("instanceId", &instance_id)?;
        let rules = clients::from_context(ctx)?
            .ordering
            .call(
                endpoints::ordering::SET_INSTANCE_RULES,
                InstanceId(id),
                &api::SetInstanceRulesRequest {
                    tenant_id: principal.tenant_id,
                    rules: rules.into(),
                },
            )
            .await?;
        Ok(rules.into())
    }
}
