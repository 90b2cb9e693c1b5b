//! Quotas as renters and operators see them: limits in every dimension, the
//! usage against each, and teams (projects) with their own quotas.

use std::collections::BTreeMap;

use async_graphql::{Context, ID, InputObject, Object, SimpleObject};
use chrono::{DateTime, Utc};
use contracts::api;
use contracts::endpoints;
use contracts::ids::TeamId;
use rust_decimal::Decimal;

use super::instant;
use crate::auth::{self, Access};
use crate::clients;
use crate::error::{GatewayError, GqlResult};
use crate::validate;

/// A number of GPUs of one model.
#[derive(SimpleObject, Clone, Debug)]
pub struct GpuModelCount {
    /// As the catalog spells it, e.g. `H100 80GB SXM`.
    gpu_model: String,
    gpus: i32,
}

fn per_model(map: BTreeMap<String, i32>) -> Vec<GpuModelCount> {
    map.into_iter()
        .map(|(gpu_model, gpus)| GpuModelCount { gpu_model, gpus })
        .collect()
}

/// Limits of a tenant or a team; a null dimension is not limited at that
/// level (a team is then bounded by its tenant). In a team's
/// `borrowingLimit` a null dimension means no borrowing on it.
#[derive(SimpleObject, Clone, Debug)]
pub struct QuotaLimits {
    max_gpus: Option<i32>,
    max_gpus_per_model: Vec<GpuModelCount>,
    max_running_instances: Option<i32>,
    /// Hard budget per calendar month (UTC), in the settlement currency.
    monthly_budget: Option<Decimal>,
}

impl From<api::QuotaLimits> for QuotaLimits {
    fn from(l: api::QuotaLimits) -> Self {
        Self {
            max_gpus: l.max_gpus,
            max_gpus_per_model: per_model(l.max_gpus_per_model),
            max_running_instances: l.max_running_instances,
            monthly_budget: l.monthly_budget.map(|b| b.normalize()),
        }
    }
}

/// What is held now and spent this month. Spend is the quota service's
/// measure: each hold's rate for the whole seconds it is held this month
/// (an upper bound of the GPU bill; see docs/quotas.md).
#[derive(SimpleObject, Clone, Debug)]
pub struct QuotaUsage {
    /// GPUs held, rounded up from `gpuEquivalents` (MIG slices count as
    /// their share of a GPU).
    gpus: i32,
    /// GPU-equivalents held: whole GPUs, plus each MIG slice as its share of
    /// its GPU's 8 memory slices (a `3g.40gb` is 0.5). What `maxGpus` is
    /// checked against (docs/quotas.md).
    gpu_equivalents: Decimal,
    gpus_by_model: Vec<GpuModelCount>,
    /// Instances holding GPUs: from allocation until they stop or end.
    running_instances: i32,
    month_to_date_spend: Decimal,
    /// Month-to-date spend plus every current rental at its rate until the
    /// month ends; an order is refused when this plus its own projection
    /// would pass `monthlyBudget`.
    projected_month_spend: Decimal,
    currency: String,
}

impl From<api::QuotaUsage> for QuotaUsage {
    fn from(u: api::QuotaUsage) -> Self {
        Self {
            gpus: u.gpus,
            gpu_equivalents: u.gpu_equivalents.normalize(),
            gpus_by_model: per_model(u.gpus_by_model),
            running_instances: u.running_instances,
            month_to_date_spend: u.month_to_date_spend,
            projected_month_spend: u.projected_month_spend,
            currency: u.currency,
        }
    }
}

#[derive(SimpleObject, Clone, Debug)]
pub struct Quota {
    limits: QuotaLimits,
    usage: QuotaUsage,
}

impl Quota {
    pub fn new(limits: api::QuotaLimits, usage: api::QuotaUsage) -> Self {
        Self {
            limits: limits.into(),
            usage: usage.into(),
        }
    }
}

/// A team (project) inside a tenant. Its orders count against its quota and
/// the tenant's; beyond its own quota it may use the tenant's unused quota
/// up to `borrowingLimit`.
#[derive(SimpleObject, Clone, Debug)]
pub struct Team {
    id: ID,
    name: String,
    quota: Quota,
    borrowing_limit: QuotaLimits,
    #[graphql(deprecation = "a String: use `createdAtUtc`, a DateTime")]
    created_at: String,
    created_at_utc: DateTime<Utc>,
}

impl From<api::Team> for Team {
    fn from(t: api::Team) -> Self {
        Self {
            id: t.id.into(),
            name: t.name,
            quota: Quota::new(t.limits, t.usage),
            borrowing_limit: t.borrowing_limit.into(),
            created_at: instant(t.created_at),
            created_at_utc: t.created_at,
        }
    }
}

#[derive(InputObject)]
pub struct GpuModelLimitInput {
    gpu_model: String,
    max_gpus: i32,
}

/// Every dimension of a quota; an omitted one is not limited (for a
/// borrowing limit: no borrowing on it). Replaces the current limits.
#[derive(InputObject, Default)]
pub struct QuotaLimitsInput {
    max_gpus: Option<i32>,
    max_gpus_per_model: Option<Vec<GpuModelLimitInput>>,
    max_running_instances: Option<i32>,
    monthly_budget: Option<Decimal>,
}

impl QuotaLimitsInput {
    /// Checks the shape here; the quota service checks the values against
    /// the tenant's.
    pub fn into_api(self, field: &'static str) -> Result<api::QuotaLimits, GatewayError> {
        let mut max_gpus_per_model = BTreeMap::new();
        for limit in self.max_gpus_per_model.unwrap_or_default() {
            validate::not_blank(field, &limit.gpu_model)?;
            validate::at_least(field, limit.max_gpus, 0)?;
            if max_gpus_per_model
                .insert(limit.gpu_model.trim().to_owned(), limit.max_gpus)
                .is_some()
            {
                return Err(GatewayError::validation(
                    field,
                    format!("maxGpusPerModel names {} twice", limit.gpu_model),
                ));
            }
        }
        for value in [self.max_gpus, self.max_running_instances]
            .into_iter()
            .flatten()
        {
            validate::at_least(field, value, 0)?;
        }
        if let Some(budget) = self.monthly_budget {
            contracts::bounds::check(budget, contracts::bounds::MONTHLY_BUDGET)
                .map_err(|e| GatewayError::validation(field, format!("monthlyBudget {}", e.0)))?;
        }
        Ok(api::QuotaLimits {
            max_gpus: self.max_gpus,
            max_gpus_per_model,
            max_running_instances: self.max_running_instances,
            monthly_budget: self.monthly_budget,
        })
    }
}

#[derive(InputObject)]
pub struct CreateTeamInput {
    name: String,
    /// Repeating the request with the same key returns the same team.
    idempotency_key: String,
    /// No dimension above the tenant's quota.
    limits: Option<QuotaLimitsInput>,
    borrowing_limit: Option<QuotaLimitsInput>,
}

#[derive(Default)]
pub struct QuotasQuery;

#[Object]
impl QuotasQuery {
    /// The caller's tenant's teams with their quotas and usage.
    async fn teams(&self, ctx: &Context<'_>) -> GqlResult<Vec<Team>> {
        let principal = auth::authorize(ctx, Access::Instances).await?;
        let teams = clients::from_context(ctx)?
            .quota
            .call(endpoints::quota::TEAM_LIST, principal.tenant_id, &())
            .await?;
        Ok(teams.into_iter().map(Into::into).collect())
    }
}

#[derive(Default)]
pub struct QuotasMutation;

#[Object]
impl QuotasMutation {
    /// Tenant owners and admins only.
    async fn create_team(&self, ctx: &Context<'_>, input: CreateTeamInput) -> GqlResult<Team> {
        let principal = auth::authorize(ctx, Access::Rent).await?;
        validate::not_blank("name", &input.name)?;
        validate::idempotency_key("idempotencyKey", &input.idempotency_key)?;
        let request = api::CreateTeamRequest {
            user_id: principal.user_id,
            name: input.name,
            idempotency_key: input.idempotency_key,
            limits: input.limits.unwrap_or_default().into_api("limits")?,
            borrowing_limit: input
                .borrowing_limit
                .unwrap_or_default()
                .into_api("borrowingLimit")?,
        };
        let team = clients::from_context(ctx)?
            .quota
            .call(endpoints::quota::TEAM_CREATE, principal.tenant_id, &request)
            .await?;
        Ok(team.into())
    }

    /// Replaces a team's quota (no dimension above the tenant's: VALIDATION)
    /// and borrowing limit. Tenant owners and admins only.
    async fn set_team_quota(
        &self,
        ctx: &Context<'_>,
        team_id: ID,
        limits: QuotaLimitsInput,
        borrowing_limit: Option<QuotaLimitsInput>,
    ) -> GqlResult<Team> {
        let principal = auth::authorize(ctx, Access::Rent).await?;
        let team_id = validate::id("teamId", &team_id)?;
        let request = api::SetTeamQuotaRequest {
            user_id: principal.user_id,
            limits: limits.into_api("limits")?,
            borrowing_limit: borrowing_limit
                .unwrap_or_default()
                .into_api("borrowingLimit")?,
        };
        let team = clients::from_context(ctx)?
            .quota
            .call(
                endpoints::quota::SET_TEAM_QUOTA,
                (principal.tenant_id, TeamId(team_id)),
                &request,
            )
            .await?;
        Ok(team.into())
    }
}
