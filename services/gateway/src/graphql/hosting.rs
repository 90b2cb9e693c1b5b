//! The host's side of the market: the host profile, machines with their
//! specification and listing terms, and operators' verification of hosts.

use async_graphql::{Context, Enum, ID, InputObject, Object, SimpleObject};
use chrono::{DateTime, Utc};
use contracts::ids::{MachineId, TenantId};
use contracts::{ErrorCode, api, endpoints};
use platform::internal::RemoteError;
use rust_decimal::Decimal;
use uuid::Uuid;

use super::instant;
use super::market::DiskType;
use crate::auth::{self, Access};
use crate::clients;
use crate::error::{GatewayError, GqlResult};
use crate::validate;

#[derive(Enum, Clone, Copy, PartialEq, Eq)]
pub enum Verification {
    Unverified,
    Verified,
    Suspended,
}

impl From<api::Verification> for Verification {
    fn from(v: api::Verification) -> Self {
        match v {
            api::Verification::Unverified => Verification::Unverified,
            api::Verification::Verified => Verification::Verified,
            api::Verification::Suspended => Verification::Suspended,
        }
    }
}

impl From<Verification> for api::Verification {
    fn from(v: Verification) -> Self {
        match v {
            Verification::Unverified => api::Verification::Unverified,
            Verification::Verified => api::Verification::Verified,
            Verification::Suspended => api::Verification::Suspended,
        }
    }
}

#[derive(SimpleObject)]
pub struct HostProfile {
    tenant_id: ID,
    legal_name: Option<String>,
    country: Option<String>,
    payout_currency: Option<String>,
    /// Set by an operator, with a reason.
    verification: Verification,
    verification_reason: Option<String>,
    #[graphql(deprecation = "a String: use `updatedAtUtc`, a DateTime")]
    updated_at: String,
    updated_at_utc: DateTime<Utc>,
}

impl From<api::HostProfile> for HostProfile {
    fn from(p: api::HostProfile) -> Self {
        Self {
            tenant_id: p.tenant_id.into(),
            legal_name: p.legal_name,
            country: p.country,
            payout_currency: p.payout_currency,
            verification: p.verification.into(),
            verification_reason: p.verification_reason,
            updated_at: instant(p.updated_at),
            updated_at_utc: p.updated_at,
        }
    }
}

#[derive(InputObject)]
pub struct HostProfileInput {
    legal_name: String,
    /// ISO 3166-1 alpha-2.
    country: String,
    /// ISO 4217, e.g. USD.
    payout_currency: String,
}

#[derive(SimpleObject)]
pub struct Machine {
    id: ID,
    name: String,
    gpu_model: String,
    gpu_count: i32,
    gpus_allocated: i32,
    vram_gib: i32,
    cpu_model: String,
    cpu_cores: i32,
    ram_gib: i32,
    disk_gib: i32,
    disk_type: DiskType,
    upload_mbps: i32,
    download_mbps: i32,
    country: String,
    region: String,
    datacenter: bool,
    driver_version: Option<String>,
    cuda_version: Option<String>,
    /// Null until the host sets a price.
    price_per_gpu_hour: Option<Decimal>,
    min_bid_per_gpu_hour: Option<Decimal>,
    storage_price_per_gb_month: Decimal,
    bandwidth_up_price_per_tb: Decimal,
    bandwidth_down_price_per_tb: Decimal,
    allowed_gpu_counts: Vec<i32>,
    #[graphql(deprecation = "a String: use `listUntilUtc`, a DateTime")]
    list_until: Option<String>,
    list_until_utc: Option<DateTime<Utc>>,
    currency: String,
    listed: bool,
    /// Heard from its agent within the grace period.
    online: bool,
    #[graphql(deprecation = "a String: use `lastHeartbeatAtUtc`, a DateTime")]
    last_heartbeat_at: Option<String>,
    last_heartbeat_at_utc: Option<DateTime<Utc>>,
    reliability: Option<Decimal>,
    verified: bool,
    #[graphql(deprecation = "a String: use `createdAtUtc`, a DateTime")]
    created_at: String,
    created_at_utc: DateTime<Utc>,
}

impl From<api::Machine> for Machine {
    fn from(m: api::Machine) -> Self {
        Self {
            id: m.id.into(),
            name: m.name,
            gpu_model: m.gpu_model,
            gpu_count: m.gpu_count,
            gpus_allocated: m.gpus_allocated,
            vram_gib: m.vram_gib,
            cpu_model: m.cpu_model,
            cpu_cores: m.cpu_cores,
            ram_gib: m.ram_gib,
            disk_gib: m.disk_gib,
            disk_type: m.disk_type.into(),
            upload_mbps: m.upload_mbps,
            download_mbps: m.download_mbps,
            country: m.country,
            region: m.region,
            datacenter: m.datacenter,
            driver_version: m.driver_version,
            cuda_version: m.cuda_version,
            price_per_gpu_hour: m.price_per_gpu_hour,
            min_bid_per_gpu_hour: m.min_bid_per_gpu_hour,
            storage_price_per_gb_month: m.storage_price_per_gb_month,
            bandwidth_up_price_per_tb: m.bandwidth_up_price_per_tb,
            bandwidth_down_price_per_tb: m.bandwidth_down_price_per_tb,
            allowed_gpu_counts: m.allowed_gpu_counts,
            list_until: m.list_until.map(instant),
            list_until_utc: m.list_until,
            currency: m.currency,
            listed: m.listed,
            online: m.online,
            last_heartbeat_at: m.last_heartbeat_at.map(instant),
            last_heartbeat_at_utc: m.last_heartbeat_at,
            reliability: m.reliability,
            verified: m.verified,
            created_at: instant(m.created_at),
            created_at_utc: m.created_at,
        }
    }
}

#[derive(InputObject)]
pub struct RegisterMachineInput {
    name: String,
    /// A name from `gpuModels`.
    gpu_model: String,
    gpu_count: i32,
    /// Per GPU; the catalog's figure for the model when left out.
    vram_gib: Option<i32>,
    cpu_model: Option<String>,
    cpu_cores: i32,
    ram_gib: i32,
    disk_gib: i32,
    disk_type: Option<DiskType>,
    upload_mbps: Option<i32>,
    download_mbps: Option<i32>,
    /// ISO 3166-1 alpha-2.
    country: String,
    region: Option<String>,
    datacenter: Option<bool>,
    driver_version: Option<String>,
    /// e.g. "12.4".
    cuda_version: Option<String>,
    idempotency_key: String,
}

#[derive(SimpleObject)]
pub struct RegisterMachinePayload {
    machine: Machine,
    /// The host agent's credential. Shown only once; null on a replay.
    agent_token: Option<String>,
}

#[derive(SimpleObject)]
pub struct AgentToken {
    machine_id: ID,
    /// Shown once: the old token stopped working when this one was issued.
    agent_token: String,
}

/// The agent was silent past the grace period.
#[derive(SimpleObject)]
pub struct HeartbeatGap {
    #[graphql(deprecation = "a String: use `startedAtUtc`, a DateTime")]
    started_at: String,
    started_at_utc: DateTime<Utc>,
    /// Null while the machine is still silent.
    #[graphql(deprecation = "a String: use `endedAtUtc`, a DateTime")]
    ended_at: Option<String>,
    /// Null while the machine is still silent.
    ended_at_utc: Option<DateTime<Utc>>,
    seconds: i64,
}

#[derive(Default)]
pub struct HostingQuery;

#[Object]
impl HostingQuery {
    /// The caller's machines, listed or not.
    async fn my_machines(&self, ctx: &Context<'_>) -> GqlResult<Vec<Machine>> {
        let principal = auth::authorize(ctx, Access::Host).await?;
        let machines = clients::from_context(ctx)?
            .catalog
            .call(
                endpoints::catalog::HOST_MACHINES,
                (),
                &api::HostQuery {
                    host_tenant_id: principal.tenant_id,
                },
            )
            .await?;
        Ok(machines.into_iter().map(Into::into).collect())
    }

    /// Heartbeat gaps of one of the caller's machines within the reliability
    /// window, newest first: the evidence behind its reliability.
    async fn heartbeat_gaps(
        &self,
        ctx: &Context<'_>,
        machine_id: ID,
    ) -> GqlResult<Vec<HeartbeatGap>> {
        let principal = auth::authorize(ctx, Access::Host).await?;
        let machine_id: MachineId = MachineId(validate::id("machineId", &machine_id)?);
        let gaps = clients::from_context(ctx)?
            .catalog
            .call(
                endpoints::catalog::HEARTBEAT_GAPS,
                machine_id,
                &api::HeartbeatGapsQuery {
                    host_tenant_id: principal.tenant_id,
                },
            )
            .await?;
        Ok(gaps
            .into_iter()
            .map(|g| HeartbeatGap {
                started_at: instant(g.started_at),
                started_at_utc: g.started_at,
                ended_at: g.ended_at.map(instant),
                ended_at_utc: g.ended_at,
                seconds: g.seconds,
            })
            .collect())
    }

    /// The caller's host profile and verification; operators may name a tenant.
    async fn host_profile(
        &self,
        ctx: &Context<'_>,
        tenant_id: Option<ID>,
    ) -> GqlResult<HostProfile> {
        let tenant = match tenant_id {
            Some(id) => {
                auth::authorize(ctx, Access::Operator).await?;
                validate::id("tenantId", &id)?
            }
            None => auth::authorize(ctx, Access::Host).await?.tenant_id.into(),
        };
        let profile = clients::from_context(ctx)?
            .catalog
            .call(endpoints::catalog::HOST_PROFILE, TenantId(tenant), &())
            .await?;
        Ok(profile.into())
    }
}

#[derive(Default)]
pub struct HostingMutation;

#[Object]
impl HostingMutation {
    async fn update_host_profile(
        &self,
        ctx: &Context<'_>,
        input: HostProfileInput,
    ) -> GqlResult<HostProfile> {
        // Catalog checks every field and reports all that are wrong at once.
        let principal = auth::authorize(ctx, Access::Host).await?;
        let profile = clients::from_context(ctx)?
            .catalog
            .call(
                endpoints::catalog::UPDATE_HOST_PROFILE,
                principal.tenant_id,
                &api::UpdateHostProfileRequest {
                    legal_name: input.legal_name,
                    country: input.country,
                    payout_currency: input.payout_currency,
                },
            )
            .await?;
        Ok(profile.into())
    }

    /// Verifies, suspends or un-verifies a host. Operators only; a reason is required.
    async fn set_host_verification(
        &self,
        ctx: &Context<'_>,
        tenant_id: ID,
        verification: Verification,
        reason: String,
    ) -> GqlResult<HostProfile> {
        let operator = auth::authorize(ctx, Access::Operator).await?;
        let tenant: Uuid = validate::id("tenantId", &tenant_id)?;
        validate::not_blank("reason", &reason)?;
        let profile = clients::from_context(ctx)?
            .catalog
            .call(
                endpoints::catalog::SET_HOST_VERIFICATION,
                TenantId(tenant),
                &api::SetVerificationRequest {
                    verification: verification.into(),
                    reason,
                    operator_id: Some(operator.user_id),
                },
            )
            .await?;
        Ok(profile.into())
    }

    async fn register_machine(
        &self,
        ctx: &Context<'_>,
        input: RegisterMachineInput,
    ) -> GqlResult<RegisterMachinePayload> {
        let principal = auth::authorize(ctx, Access::Host).await?;
        // Catalog checks every field and reports all that are wrong at once
        // (`extensions.fieldErrors`), so the portal's form marks each.
        let request = api::RegisterMachineRequest {
            host_tenant_id: principal.tenant_id,
            name: input.name,
            gpu_model: input.gpu_model,
            gpu_count: input.gpu_count,
            vram_gib: input.vram_gib,
            cpu_model: input.cpu_model,
            cpu_cores: input.cpu_cores,
            ram_gib: input.ram_gib,
            disk_gib: input.disk_gib,
            disk_type: input.disk_type.map(Into::into),
            upload_mbps: input.upload_mbps,
            download_mbps: input.download_mbps,
            country: input.country,
            region: input.region,
            datacenter: input.datacenter,
            driver_version: input.driver_version,
            cuda_version: input.cuda_version,
            idempotency_key: input.idempotency_key,
        };
        let registered = clients::from_context(ctx)?
            .catalog
            .call(endpoints::catalog::REGISTER_MACHINE, (), &request)
            .await?;
        Ok(RegisterMachinePayload {
            machine: registered.machine.into(),
            agent_token: registered.agent_token,
        })
    }

    /// Sets the listing terms. Terms left out keep their current value.
    #[allow(clippy::too_many_arguments)]
    async fn set_machine_pricing(
        &self,
        ctx: &Context<'_>,
        machine_id: ID,
        price_per_gpu_hour: Decimal,
        min_bid_per_gpu_hour: Option<Decimal>,
        storage_price_per_gb_month: Option<Decimal>,
        bandwidth_up_price_per_tb: Option<Decimal>,
        bandwidth_down_price_per_tb: Option<Decimal>,
        allowed_gpu_counts: Option<Vec<i32>>,
        #[graphql(
            desc = "RFC 3339; the machine is unlisted after it.",
            deprecation = "a String: use `listUntilUtc`, a DateTime"
        )]
        list_until: Option<String>,
        #[graphql(desc = "The machine is unlisted after it.")] list_until_utc: Option<
            DateTime<Utc>,
        >,
    ) -> GqlResult<Machine> {
        let principal = auth::authorize(ctx, Access::Host).await?;
        let machine_id = validate::id("machineId", &machine_id)?;
        validate::money(
            "pricePerGpuHour",
            price_per_gpu_hour,
            contracts::bounds::GPU_HOUR_PRICE,
        )?;
        validate::money_opt(
            "minBidPerGpuHour",
            min_bid_per_gpu_hour,
            contracts::bounds::GPU_HOUR_PRICE,
        )?;
        validate::money_opt(
            "storagePricePerGbMonth",
            storage_price_per_gb_month,
            contracts::bounds::STORAGE_PRICE,
        )?;
        validate::money_opt(
            "bandwidthUpPricePerTb",
            bandwidth_up_price_per_tb,
            contracts::bounds::BANDWIDTH_PRICE,
        )?;
        validate::money_opt(
            "bandwidthDownPricePerTb",
            bandwidth_down_price_per_tb,
            contracts::bounds::BANDWIDTH_PRICE,
        )?;
        let list_until =
            super::scalars::instant_arg("listUntil", list_until, "listUntilUtc", list_until_utc)?;
        let request = api::SetPricingRequest {
            host_tenant_id: principal.tenant_id,
            price_per_gpu_hour,
            min_bid_per_gpu_hour,
            storage_price_per_gb_month,
            bandwidth_up_price_per_tb,
            bandwidth_down_price_per_tb,
            allowed_gpu_counts,
            list_until,
        };
        let machine = clients::from_context(ctx)?
            .catalog
            .call(
                endpoints::catalog::SET_PRICING,
                MachineId(machine_id),
                &request,
            )
            .await?;
        Ok(machine.into())
    }

    /// Issues a new agent token; the old one stops working at once.
    /// `NOT_FOUND` for a machine that is not the caller's or is deleted.
    async fn rotate_agent_token(&self, ctx: &Context<'_>, machine_id: ID) -> GqlResult<AgentToken> {
        let principal = auth::authorize(ctx, Access::Host).await?;
        let machine_id: MachineId = MachineId(validate::id("machineId", &machine_id)?);
        let issued = clients::from_context(ctx)?
            .catalog
            .call(
                endpoints::catalog::ROTATE_AGENT_TOKEN,
                machine_id,
                &api::HostMachineRequest {
                    host_tenant_id: principal.tenant_id,
                },
            )
            .await?;
        Ok(AgentToken {
            machine_id: issued.machine_id.into(),
            agent_token: issued.agent_token,
        })
    }

    /// Revokes the machine's agent token: its broker user is deleted and its
    /// connections closed at once. `rotateAgentToken` issues a new one.
    /// `NOT_FOUND` for a machine that is not the caller's or is deleted.
    async fn revoke_agent_token(&self, ctx: &Context<'_>, machine_id: ID) -> GqlResult<bool> {
        let principal = auth::authorize(ctx, Access::Host).await?;
        let machine_id: MachineId = MachineId(validate::id("machineId", &machine_id)?);
        clients::from_context(ctx)?
            .catalog
            .call(
                endpoints::catalog::REVOKE_AGENT_TOKEN,
                machine_id,
                &api::HostMachineRequest {
                    host_tenant_id: principal.tenant_id,
                },
            )
            .await?;
        Ok(true)
    }

    /// Puts the machine on the offers list.
    async fn list_machine(&self, ctx: &Context<'_>, machine_id: ID) -> GqlResult<Machine> {
        host_machine_action(ctx, &machine_id, endpoints::catalog::LIST_MACHINE).await
    }

    /// Takes the machine off the offers list.
    async fn unlist_machine(&self, ctx: &Context<'_>, machine_id: ID) -> GqlResult<Machine> {
        host_machine_action(ctx, &machine_id, endpoints::catalog::UNLIST_MACHINE).await
    }

    /// Deletes the machine: it is unlisted and no longer shown, its agent's
    /// broker user and command queue are deleted (the agent is cut off at
    /// once); its rental history stays. `CONFLICT` while any of its GPUs are
    /// rented, or while it holds any renter's instance that is not destroyed
    /// (a stopped instance keeps its disk there; its renter must destroy it
    /// first); `NOT_FOUND` for a machine that is not the caller's. Repeating
    /// it is harmless. A deleted machine gets no new agent token.
    async fn delete_machine(&self, ctx: &Context<'_>, machine_id: ID) -> GqlResult<bool> {
        let principal = auth::authorize(ctx, Access::Host).await?;
        let machine_id: MachineId = MachineId(validate::id("machineId", &machine_id)?);
        let clients = clients::from_context(ctx)?;
        // Ordering owns instances, so it is asked first. No instance can
        // appear on the machine between this answer and the catalog's
        // deletion without taking GPUs there, and the catalog refuses the
        // deletion while any are held (and any allocation once deleted).
        // Counted for the caller's machines only: another host's machine
        // counts none and the catalog answers NOT_FOUND.
        let live = clients
            .ordering
            .call(
                endpoints::ordering::MACHINE_LIVE_INSTANCES,
                machine_id,
                &api::HostQuery {
                    host_tenant_id: principal.tenant_id,
                },
            )
            .await?;
        if live.live_instances > 0 {
            tracing::info!(
                machine.id = %machine_id,
                live_instances = live.live_instances,
                "machine deletion refused: renters' instances remain"
            );
            return Err(GatewayError::Remote(RemoteError {
                code: ErrorCode::Conflict,
                message: format!(
                    "the machine still holds {} instance(s) of renters; they must be destroyed first",
                    live.live_instances
                ),
                details: None,
            })
            .into());
        }
        clients
            .catalog
            .call(
                endpoints::catalog::DELETE_MACHINE,
                machine_id,
                &api::HostMachineRequest {
                    host_tenant_id: principal.tenant_id,
                },
            )
            .await?;
        Ok(true)
    }
}

async fn host_machine_action(
    ctx: &Context<'_>,
    machine_id: &ID,
    action: endpoints::Endpoint<MachineId, api::HostMachineRequest, api::Machine>,
) -> GqlResult<Machine> {
    let principal = auth::authorize(ctx, Access::Host).await?;
    let machine_id: MachineId = MachineId(validate::id("machineId", machine_id)?);
    let machine = clients::from_context(ctx)?
        .catalog
        .call(
            action,
            machine_id,
            &api::HostMachineRequest {
                host_tenant_id: principal.tenant_id,
            },
        )
        .await?;
    Ok(machine.into())
}
