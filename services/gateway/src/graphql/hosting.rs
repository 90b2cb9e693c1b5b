//! The host's side of the market: the host profile, machines with their
//! specification and listing terms, their GPUs whole or split into MIG
//! slices (modes, layouts, slice prices), and operators' verification of
//! hosts.

use async_graphql::{ComplexObject, Context, Enum, ID, InputObject, Object, SimpleObject};
use chrono::{DateTime, Utc};
use contracts::ids::{MachineId, TenantId};
use contracts::{ErrorCode, api, endpoints, mig};
use platform::internal::RemoteError;
use rust_decimal::Decimal;
use uuid::Uuid;

use super::instant;
use super::market::DiskType;
use super::reservations::{ReservedEarnings, reserved_earnings};
use crate::auth::{self, Access};
use crate::clients;
use crate::error::{GatewayError, GqlError, GqlResult};
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
#[graphql(complex)]
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
    #[graphql(skip)]
    machine_id: MachineId,
    /// Fetched ahead for a whole list (see `myMachines`); else on demand.
    #[graphql(skip)]
    reserved_to_come: Option<Result<ReservedEarnings, GqlError>>,
}

#[ComplexObject]
impl Machine {
    /// What the host is still to be paid, after the platform fee, from the
    /// escrow of blocks reserved on this machine (docs/reservations.md):
    /// the host's share of what remains held. Hours the machine is silent
    /// in are refunded to the renter instead.
    async fn reserved_earnings_to_come(&self, ctx: &Context<'_>) -> GqlResult<ReservedEarnings> {
        if let Some(fetched) = &self.reserved_to_come {
            return fetched.clone();
        }
        let principal = auth::authorize(ctx, Access::Host).await?;
        let (mut by_machine, none) = reserved_earnings(ctx, principal.tenant_id).await?;
        Ok(by_machine.remove(&self.machine_id).unwrap_or(none))
    }

    /// Each GPU as its host runs it (whole or MIG) and what is rented on it
    /// now. Read from the catalog machine by machine: select it only where
    /// it is shown.
    async fn gpus(&self, ctx: &Context<'_>) -> GqlResult<Vec<MachineGpu>> {
        let principal = auth::authorize(ctx, Access::Host).await?;
        let gpus = clients::from_context(ctx)?
            .catalog
            .call(
                endpoints::catalog::MACHINE_GPUS,
                self.machine_id,
                &api::HostQuery {
                    host_tenant_id: principal.tenant_id,
                },
            )
            .await?;
        Ok(gpus.into_iter().map(Into::into).collect())
    }
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
            machine_id: m.id,
            reserved_to_come: None,
        }
    }
}

/// How a host runs one GPU.
#[derive(Enum, Clone, Copy, PartialEq, Eq)]
pub enum GpuMode {
    /// Rented whole only.
    Whole,
    /// Split into MIG slices, each placed by the platform as orders arrive
    /// (best-fit, keeping room for large profiles).
    MigAuto,
    /// Split into MIG slices only where the host's fixed `layout` says.
    MigFixed,
}

impl From<mig::GpuMode> for GpuMode {
    fn from(m: mig::GpuMode) -> Self {
        match m {
            mig::GpuMode::Whole => GpuMode::Whole,
            mig::GpuMode::MigAuto => GpuMode::MigAuto,
            mig::GpuMode::MigFixed => GpuMode::MigFixed,
        }
    }
}

impl From<GpuMode> for mig::GpuMode {
    fn from(m: GpuMode) -> Self {
        match m {
            GpuMode::Whole => mig::GpuMode::Whole,
            GpuMode::MigAuto => mig::GpuMode::MigAuto,
            GpuMode::MigFixed => mig::GpuMode::MigFixed,
        }
    }
}

/// A slot of a fixed MIG layout: a slice of `profile` starting at memory
/// slice `start` (0 to 7).
#[derive(SimpleObject)]
pub struct MigLayoutSlot {
    profile: String,
    start: i32,
}

/// A MIG slice in use on a GPU: `size` memory slices from `start`.
#[derive(SimpleObject)]
pub struct MigHeldSlice {
    profile: String,
    start: i32,
    size: i32,
    /// The renter's instance holding it; null while none is known (a hold
    /// made before its instance).
    instance_id: Option<ID>,
}

/// One GPU of a host's machine, by its index on the machine.
#[derive(SimpleObject)]
pub struct MachineGpu {
    index: i32,
    mode: GpuMode,
    /// The fixed layout; empty unless `mode` is MIG_FIXED.
    layout: Vec<MigLayoutSlot>,
    /// Rented whole now.
    rented_whole: bool,
    /// The MIG slices rented now, by start.
    slices: Vec<MigHeldSlice>,
}

impl From<api::MachineGpu> for MachineGpu {
    fn from(g: api::MachineGpu) -> Self {
        let mut slices: Vec<MigHeldSlice> = g
            .slices
            .into_iter()
            .map(|s| MigHeldSlice {
                profile: s.profile,
                start: i32::from(s.start),
                size: i32::from(s.size),
                instance_id: s.instance_id.map(Into::into),
            })
            .collect();
        // A stable order for clients that draw the GPU left to right.
        slices.sort_by_key(|s| s.start);
        Self {
            // GPU indices are bounded far below i32::MAX (setGpuMode takes
            // 0..=63); saturate rather than wrap should one ever not be.
            index: i32::try_from(g.index).unwrap_or(i32::MAX),
            mode: g.mode.into(),
            layout: g
                .layout
                .into_iter()
                .map(|slot| MigLayoutSlot {
                    profile: slot.profile,
                    start: i32::from(slot.start),
                })
                .collect(),
            rented_whole: g.rented_whole,
            slices,
        }
    }
}

/// A slot of a fixed MIG layout as a host gives it.
#[derive(InputObject)]
pub struct MigLayoutSlotInput {
    /// A name from the model's `migProfiles`.
    profile: String,
    /// One of the profile's `placements` (0 to 7).
    start: i32,
}

/// The highest GPU index `setGpuMode` takes: no machine has more GPUs.
pub const MAX_GPU_INDEX: i32 = 63;
/// The most slots a fixed layout may list.
pub const MAX_LAYOUT_SLOTS: usize = 64;
/// The most per-profile prices one `setMigPrices` may set.
pub const MAX_MIG_PRICES: usize = 32;

#[derive(InputObject)]
pub struct SetGpuModeInput {
    machine_id: ID,
    /// The GPU's index on the machine, 0 to 63.
    gpu_index: i32,
    mode: GpuMode,
    /// MIG_FIXED only, and required there: where slices may go (at most 64
    /// slots, no two sharing a memory slice).
    layout: Option<Vec<MigLayoutSlotInput>>,
}

impl SetGpuModeInput {
    /// The checks that need no service; the catalog checks the layout
    /// against the model's profiles and the GPU against the machine.
    fn into_request(
        self,
        host_tenant_id: TenantId,
    ) -> Result<(MachineId, api::SetGpuModeRequest), GatewayError> {
        let machine_id = MachineId(validate::id("machineId", &self.machine_id)?);
        validate::within("gpuIndex", self.gpu_index, 0, MAX_GPU_INDEX)?;
        let gpu_index = u32::try_from(self.gpu_index)
            .map_err(|_| GatewayError::validation("gpuIndex", "must not be negative"))?;
        let layout = self.layout.unwrap_or_default();
        validate::at_most_items("layout", &layout, MAX_LAYOUT_SLOTS)?;
        match (self.mode, layout.is_empty()) {
            (GpuMode::MigFixed, true) => {
                return Err(GatewayError::validation(
                    "layout",
                    "required with MIG_FIXED: at least one slot",
                ));
            }
            (GpuMode::Whole | GpuMode::MigAuto, false) => {
                return Err(GatewayError::validation(
                    "layout",
                    "only with MIG_FIXED: WHOLE and MIG_AUTO take none",
                ));
            }
            _ => {}
        }
        let mut slots = Vec::with_capacity(layout.len());
        for slot in layout {
            validate::mig_profile("profile", &slot.profile)?;
            let start = u8::try_from(slot.start)
                .ok()
                .filter(|s| *s < mig::MEMORY_SLICES)
                .ok_or_else(|| {
                    GatewayError::validation(
                        "start",
                        format!("must be between 0 and {}", mig::MEMORY_SLICES - 1),
                    )
                })?;
            slots.push(mig::LayoutSlot {
                profile: slot.profile.trim().to_owned(),
                start,
            });
        }
        Ok((
            machine_id,
            api::SetGpuModeRequest {
                host_tenant_id,
                gpu_index,
                mode: self.mode.into(),
                layout: slots,
            },
        ))
    }
}

/// A host's price of one MIG profile on a machine.
#[derive(SimpleObject)]
pub struct MigPrice {
    profile: String,
    /// Per slice-hour.
    price_per_hour: Decimal,
}

impl From<api::MigPrice> for MigPrice {
    fn from(p: api::MigPrice) -> Self {
        Self {
            profile: p.profile,
            price_per_hour: p.price_per_hour,
        }
    }
}

#[derive(InputObject)]
pub struct MigPriceInput {
    /// A name from the model's `migProfiles`.
    profile: String,
    /// Per slice-hour, 0 to 1000 with at most 9 decimal places.
    price_per_hour: Decimal,
}

#[derive(InputObject)]
pub struct SetMigPricesInput {
    machine_id: ID,
    /// Replaces every per-profile price of the machine (at most 32, each
    /// profile once); a profile left out is priced from the GPU price by
    /// memory share. An empty list clears them all.
    prices: Vec<MigPriceInput>,
}

impl SetMigPricesInput {
    fn into_request(
        self,
        host_tenant_id: TenantId,
    ) -> Result<(MachineId, api::SetMigPricesRequest), GatewayError> {
        let machine_id = MachineId(validate::id("machineId", &self.machine_id)?);
        validate::at_most_items("prices", &self.prices, MAX_MIG_PRICES)?;
        let mut prices: Vec<api::MigPrice> = Vec::with_capacity(self.prices.len());
        for price in self.prices {
            validate::mig_profile("profile", &price.profile)?;
            validate::money(
                "pricePerHour",
                price.price_per_hour,
                contracts::bounds::GPU_HOUR_PRICE,
            )?;
            let profile = price.profile.trim().to_owned();
            if prices.iter().any(|p| p.profile == profile) {
                return Err(GatewayError::validation(
                    "prices",
                    format!("names {profile} twice"),
                ));
            }
            prices.push(api::MigPrice {
                profile,
                price_per_hour: price.price_per_hour,
            });
        }
        Ok((
            machine_id,
            api::SetMigPricesRequest {
                host_tenant_id,
                prices,
            },
        ))
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
        let mut machines: Vec<Machine> = machines.into_iter().map(Into::into).collect();
        // Earnings to come asked for: one look at the host's escrows for the
        // whole list instead of one per machine. A failure is each field's
        // to report, as it would be alone; the machines are still listed.
        if !machines.is_empty() && ctx.look_ahead().field("reservedEarningsToCome").exists() {
            let fetched = reserved_earnings(ctx, principal.tenant_id).await;
            for machine in &mut machines {
                machine.reserved_to_come = Some(match &fetched {
                    Ok((by_machine, none)) => Ok(by_machine
                        .get(&machine.machine_id)
                        .cloned()
                        .unwrap_or_else(|| none.clone())),
                    Err(e) => Err(e.clone()),
                });
            }
        }
        Ok(machines)
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

    /// Runs one GPU of the caller's machine whole or as MIG slices, with a
    /// fixed layout for MIG_FIXED; answers every GPU of the machine.
    /// `CONFLICT` while the GPU holds a rental (whole or any slice);
    /// `VALIDATION` for a model without MIG, a GPU the machine lacks or a
    /// layout its model cannot take; `NOT_FOUND` for a machine that is not
    /// the caller's.
    async fn set_gpu_mode(
        &self,
        ctx: &Context<'_>,
        input: SetGpuModeInput,
    ) -> GqlResult<Vec<MachineGpu>> {
        let principal = auth::authorize(ctx, Access::Host).await?;
        let (machine_id, request) = input.into_request(principal.tenant_id)?;
        let gpus = clients::from_context(ctx)?
            .catalog
            .call(endpoints::catalog::SET_GPU_MODE, machine_id, &request)
            .await?;
        Ok(gpus.into_iter().map(Into::into).collect())
    }

    /// Sets the caller's machine's prices per MIG slice-hour, replacing
    /// them all; answers the prices now set. `VALIDATION` for a profile the
    /// model lacks; `NOT_FOUND` for a machine that is not the caller's.
    async fn set_mig_prices(
        &self,
        ctx: &Context<'_>,
        input: SetMigPricesInput,
    ) -> GqlResult<Vec<MigPrice>> {
        let principal = auth::authorize(ctx, Access::Host).await?;
        let (machine_id, request) = input.into_request(principal.tenant_id)?;
        let prices = clients::from_context(ctx)?
            .catalog
            .call(endpoints::catalog::SET_MIG_PRICES, machine_id, &request)
            .await?;
        Ok(prices.into_iter().map(Into::into).collect())
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! The MIG fields against an in-process stand-in for the catalog that
    //! records what the gateway sent it.

    use std::sync::{Arc, Mutex};

    use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
    use async_graphql::Request;
    use contracts::api::{Principal, Scope, TenantRole};
    use platform::internal::InternalClient;
    use serde_json::{Value, json};

    use super::*;
    use crate::auth::{Credential, JwtKeys, RequestAuth};
    use crate::clients::Clients;
    use crate::graphql::{builder, execute};

    /// What the stand-in catalog was asked: method, path, query, body.
    type Seen = Arc<Mutex<Vec<(String, String, String, Value)>>>;

    const MACHINE: &str = "0190aaaa-0000-7000-8000-000000000001";
    const INSTANCE: &str = "0190bbbb-0000-7000-8000-000000000002";

    fn keys() -> JwtKeys {
        JwtKeys::new(&[("k1".into(), "test-secret".into())], 600).unwrap()
    }

    fn host() -> Principal {
        Principal {
            user_id: Uuid::now_v7(),
            tenant_id: TenantId(Uuid::now_v7()),
            email: "host@example.com".into(),
            tenant_roles: vec![TenantRole::Host],
            operator: false,
            scopes: vec![Scope::Host],
            api_key_id: None,
        }
    }

    fn gpus() -> Vec<api::MachineGpu> {
        vec![
            api::MachineGpu {
                index: 0,
                mode: mig::GpuMode::MigAuto,
                layout: Vec::new(),
                rented_whole: false,
                // Out of order on purpose: the API answers them by start.
                slices: vec![
                    mig::HeldSlice {
                        profile: "1g.10gb".into(),
                        start: 6,
                        size: 1,
                        instance_id: None,
                    },
                    mig::HeldSlice {
                        profile: "3g.40gb".into(),
                        start: 0,
                        size: 4,
                        instance_id: Some(contracts::ids::InstanceId(INSTANCE.parse().unwrap())),
                    },
                ],
            },
            api::MachineGpu {
                index: 1,
                mode: mig::GpuMode::MigFixed,
                layout: vec![mig::LayoutSlot {
                    profile: "7g.80gb".into(),
                    start: 0,
                }],
                rented_whole: false,
                slices: Vec::new(),
            },
            api::MachineGpu {
                index: 2,
                mode: mig::GpuMode::Whole,
                layout: Vec::new(),
                rented_whole: true,
                slices: Vec::new(),
            },
        ]
    }

    fn machine(host_tenant_id: TenantId) -> api::Machine {
        api::Machine {
            id: MachineId(MACHINE.parse().unwrap()),
            host_tenant_id,
            name: "rig".into(),
            gpu_model: "H100 80GB SXM".into(),
            gpu_count: 3,
            gpus_allocated: 1,
            vram_gib: 80,
            cpu_model: "EPYC".into(),
            cpu_cores: 64,
            ram_gib: 512,
            disk_gib: 2000,
            disk_type: api::DiskType::Nvme,
            upload_mbps: 1000,
            download_mbps: 1000,
            country: "SE".into(),
            region: String::new(),
            datacenter: true,
            driver_version: None,
            cuda_version: None,
            price_per_gpu_hour: Some(Decimal::new(249, 2)),
            min_bid_per_gpu_hour: None,
            storage_price_per_gb_month: Decimal::ZERO,
            bandwidth_up_price_per_tb: Decimal::ZERO,
            bandwidth_down_price_per_tb: Decimal::ZERO,
            allowed_gpu_counts: Vec::new(),
            list_until: None,
            currency: "USD".into(),
            listed: true,
            online: true,
            last_heartbeat_at: None,
            reliability: None,
            verified: false,
            created_at: Utc::now(),
        }
    }

    /// A catalog answering the host's machines, their GPUs and the two MIG
    /// mutations, recording every request.
    fn fake_catalog(host_tenant_id: TenantId) -> (String, Seen) {
        let seen: Seen = Arc::default();
        let recorded = seen.clone();
        let server = HttpServer::new(move || {
            let seen = recorded.clone();
            App::new().default_service(web::to(move |req: HttpRequest, body: web::Bytes| {
                let seen = seen.clone();
                async move {
                    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    let (method, path) = (req.method().to_string(), req.path().to_owned());
                    seen.lock().unwrap().push((
                        method.clone(),
                        path.clone(),
                        req.query_string().to_owned(),
                        body.clone(),
                    ));
                    let gpus_path = format!("/internal/machines/{MACHINE}/gpus");
                    let prices_path = format!("/internal/machines/{MACHINE}/mig-prices");
                    match (method.as_str(), path.as_str()) {
                        ("GET", "/internal/machines") => {
                            HttpResponse::Ok().json(vec![machine(host_tenant_id)])
                        }
                        ("GET" | "PUT", p) if p == gpus_path => HttpResponse::Ok().json(gpus()),
                        ("PUT", p) if p == prices_path => {
                            HttpResponse::Ok().json(body["prices"].clone())
                        }
                        _ => HttpResponse::NotFound().json(json!({
                            "code": "NOT_FOUND", "message": "no such route in the stand-in"
                        })),
                    }
                }
            }))
        })
        .workers(1)
        .bind(("127.0.0.1", 0))
        .unwrap();
        let port = server.addrs()[0].port();
        tokio::spawn(server.run());
        (format!("http://127.0.0.1:{port}"), seen)
    }

    async fn run(catalog: &str, who: &Principal, query: &str) -> Value {
        let nowhere = InternalClient::new("http://127.0.0.1:1", "token");
        let clients = Clients {
            quota: nowhere.clone(),
            catalog: InternalClient::new(catalog, "token"),
            ordering: nowhere.clone(),
            metering: nowhere.clone(),
            billing: nowhere.clone(),
            webhooks: nowhere,
            runway_warning_seconds: 3600,
        };
        let schema = builder().data(keys()).data(clients).finish();
        let credential = Credential::Jwt(keys().issue(who).unwrap().token);
        let response = execute(&schema, Request::new(query), RequestAuth::new(credential)).await;
        serde_json::to_value(&response).unwrap()
    }

    fn first_error(response: &Value) -> (&str, &str) {
        let error = &response["errors"][0];
        (
            error["extensions"]["code"]
                .as_str()
                .unwrap_or_else(|| panic!("no error in {response}")),
            error["message"].as_str().unwrap_or_default(),
        )
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_machines_gpus_come_from_the_catalog_for_the_caller() {
        let host = host();
        let (catalog, seen) = fake_catalog(host.tenant_id);
        let response = run(
            &catalog,
            &host,
            "{ myMachines { id gpus { index mode rentedWhole
                layout { profile start } slices { profile start size instanceId } } } }",
        )
        .await;
        assert!(response.get("errors").is_none(), "{response}");
        let gpus = &response["data"]["myMachines"][0]["gpus"];
        assert_eq!(
            gpus[0],
            json!({
                "index": 0, "mode": "MIG_AUTO", "rentedWhole": false, "layout": [],
                "slices": [
                    { "profile": "3g.40gb", "start": 0, "size": 4, "instanceId": INSTANCE },
                    { "profile": "1g.10gb", "start": 6, "size": 1, "instanceId": null },
                ],
            })
        );
        assert_eq!(gpus[1]["mode"], "MIG_FIXED");
        assert_eq!(
            gpus[1]["layout"],
            json!([{ "profile": "7g.80gb", "start": 0 }])
        );
        assert_eq!(gpus[2]["mode"], "WHOLE");
        assert_eq!(gpus[2]["rentedWhole"], true);
        // Asked for the caller's tenant: the catalog checks ownership.
        let seen = seen.lock().unwrap();
        let (_, _, query, _) = seen
            .iter()
            .find(|(m, p, ..)| m == "GET" && p.ends_with("/gpus"))
            .expect("the GPUs were asked for");
        assert_eq!(query, &format!("host_tenant_id={}", host.tenant_id));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn set_gpu_mode_sends_the_hosts_choice() {
        let host = host();
        let (catalog, seen) = fake_catalog(host.tenant_id);
        let response = run(
            &catalog,
            &host,
            &format!(
                r#"mutation {{ setGpuMode(input: {{ machineId: "{MACHINE}", gpuIndex: 1,
                    mode: MIG_FIXED, layout: [{{ profile: " 3g.40gb ", start: 4 }}] }})
                    {{ index mode }} }}"#
            ),
        )
        .await;
        assert!(response.get("errors").is_none(), "{response}");
        assert_eq!(response["data"]["setGpuMode"][2]["mode"], "WHOLE");
        let seen = seen.lock().unwrap();
        let (method, _, _, body) = seen.last().unwrap();
        assert_eq!(method, "PUT");
        assert_eq!(
            body,
            &json!({
                "host_tenant_id": host.tenant_id,
                "gpu_index": 1,
                "mode": "mig_fixed",
                "layout": [{ "profile": "3g.40gb", "start": 4 }],
            })
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn set_mig_prices_sends_and_answers_the_prices() {
        let host = host();
        let (catalog, seen) = fake_catalog(host.tenant_id);
        let response = run(
            &catalog,
            &host,
            &format!(
                r#"mutation {{ setMigPrices(input: {{ machineId: "{MACHINE}", prices: [
                    {{ profile: "3g.40gb", pricePerHour: "1.30" }},
                    {{ profile: "1g.10gb", pricePerHour: "0.35" }} ] }})
                    {{ profile pricePerHour }} }}"#
            ),
        )
        .await;
        assert!(response.get("errors").is_none(), "{response}");
        assert_eq!(
            response["data"]["setMigPrices"],
            json!([
                { "profile": "3g.40gb", "pricePerHour": "1.30" },
                { "profile": "1g.10gb", "pricePerHour": "0.35" },
            ])
        );
        let seen = seen.lock().unwrap();
        let (method, path, _, body) = seen.last().unwrap();
        assert_eq!(
            (method.as_str(), path.as_str()),
            ("PUT", &*format!("/internal/machines/{MACHINE}/mig-prices"))
        );
        assert_eq!(body["host_tenant_id"], json!(host.tenant_id));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bad_mig_inputs_are_refused_before_the_catalog_is_asked() {
        let host = host();
        let (catalog, seen) = fake_catalog(host.tenant_id);
        let long = "x".repeat(33);
        let slots = (0..65)
            .map(|_| r#"{ profile: "1g.10gb", start: 0 }"#)
            .collect::<Vec<_>>()
            .join(", ");
        let prices = (0..33)
            .map(|i| format!(r#"{{ profile: "p{i}", pricePerHour: "1" }}"#))
            .collect::<Vec<_>>()
            .join(", ");
        let mode = |args: &str| {
            format!(
                r#"mutation {{ setGpuMode(input: {{ machineId: "{MACHINE}", {args} }}) {{ index }} }}"#
            )
        };
        let price = |args: &str| {
            format!(
                r#"mutation {{ setMigPrices(input: {{ machineId: "{MACHINE}", prices: [{args}] }}) {{ profile }} }}"#
            )
        };
        let cases = [
            (mode("gpuIndex: 64, mode: MIG_AUTO"), "gpuIndex"),
            (mode("gpuIndex: -1, mode: MIG_AUTO"), "gpuIndex"),
            (mode("gpuIndex: 0, mode: MIG_FIXED"), "layout"),
            (mode("gpuIndex: 0, mode: MIG_FIXED, layout: []"), "layout"),
            (
                mode(r#"gpuIndex: 0, mode: WHOLE, layout: [{ profile: "1g.10gb", start: 0 }]"#),
                "layout",
            ),
            (
                mode(&format!("gpuIndex: 0, mode: MIG_FIXED, layout: [{slots}]")),
                "layout",
            ),
            (
                mode(&format!(
                    r#"gpuIndex: 0, mode: MIG_FIXED, layout: [{{ profile: "{long}", start: 0 }}]"#
                )),
                "profile",
            ),
            (
                mode(r#"gpuIndex: 0, mode: MIG_FIXED, layout: [{ profile: "1g.10gb", start: 8 }]"#),
                "start",
            ),
            (price(&prices), "prices"),
            (
                price(&format!(r#"{{ profile: "{long}", pricePerHour: "1" }}"#)),
                "profile",
            ),
            (
                price(r#"{ profile: "1g.10gb", pricePerHour: "-1" }"#),
                "pricePerHour",
            ),
            (
                price(r#"{ profile: "1g.10gb", pricePerHour: "1000.01" }"#),
                "pricePerHour",
            ),
            (
                price(
                    r#"{ profile: "1g.10gb", pricePerHour: "1" }, { profile: "1g.10gb", pricePerHour: "2" }"#,
                ),
                "prices",
            ),
        ];
        for (query, field) in cases {
            let response = run(&catalog, &host, &query).await;
            let (code, message) = first_error(&response);
            assert_eq!(code, "VALIDATION", "{query}: {response}");
            assert!(
                message.starts_with(&format!("{field}: ")),
                "{query}: {message}"
            );
        }
        assert!(seen.lock().unwrap().is_empty(), "the catalog was asked");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn only_hosts_set_gpu_modes_and_mig_prices() {
        let host = host();
        let (catalog, seen) = fake_catalog(host.tenant_id);
        let renter = Principal {
            tenant_roles: vec![TenantRole::Renter],
            scopes: Scope::ALL.to_vec(),
            ..host
        };
        for query in [
            format!(
                r#"mutation {{ setGpuMode(input: {{ machineId: "{MACHINE}", gpuIndex: 0, mode: MIG_AUTO }}) {{ index }} }}"#
            ),
            format!(
                r#"mutation {{ setMigPrices(input: {{ machineId: "{MACHINE}", prices: [] }}) {{ profile }} }}"#
            ),
        ] {
            let response = run(&catalog, &renter, &query).await;
            assert_eq!(first_error(&response).0, "FORBIDDEN", "{response}");
        }
        assert!(seen.lock().unwrap().is_empty(), "the catalog was asked");
    }
}
