//! Orders, the instances they start, and their metered usage.

use async_graphql::{ComplexObject, Context, ID, InputObject, Object, SimpleObject};
use chrono::{DateTime, Utc};
use contracts::api;
use contracts::endpoints::{self, Endpoint};
use contracts::ids::{InstanceId, MachineId, ReservationId, TeamId, TenantId};
use contracts::states::Meter;
use contracts::states::{InstanceAction, InstanceState, RentalType};
use rust_decimal::Decimal;

use super::instant;
use crate::auth::{self, Access};
use crate::clients;
use crate::error::{GatewayError, GqlResult};
use crate::validate;

#[derive(SimpleObject)]
#[graphql(complex)]
pub struct Instance {
    id: ID,
    order_id: ID,
    machine_id: ID,
    gpu_model: String,
    gpu_count: i32,
    /// The MIG slice rented (e.g. `3g.40gb`; `pricePerGpuHour` is then the
    /// slice's price per hour); null for whole GPUs.
    mig_profile: Option<String>,
    /// `on_demand` or `interruptible`.
    #[graphql(deprecation = "a String: use `rental`, a RentalType")]
    rental_type: String,
    rental: RentalType,
    /// The billed GPU rate, committed when the GPUs were allocated: the
    /// on-demand price, or the bid of an interruptible rental.
    price_per_gpu_hour: Decimal,
    price_per_hour_total: Decimal,
    /// Billed storage rate, in the machine's listing unit.
    storage_price_per_gb_month: Decimal,
    /// Billed upload bandwidth rate, in the machine's listing unit.
    bandwidth_up_price_per_tb: Decimal,
    /// Billed download bandwidth rate, in the machine's listing unit.
    bandwidth_down_price_per_tb: Decimal,
    currency: String,
    /// When the GPUs were taken back for a higher-priority order; billing
    /// ended at this instant.
    #[graphql(deprecation = "a String: use `preemptedAtUtc`, a DateTime")]
    preempted_at: Option<String>,
    /// When the GPUs were taken back for a higher-priority order; billing
    /// ended at this instant.
    preempted_at_utc: Option<DateTime<Utc>>,
    #[graphql(deprecation = "a String: use `state`, an InstanceState")]
    status: String,
    /// Where the instance is in its lifecycle (docs/instance-lifecycle.md).
    state: InstanceState,
    status_reason: Option<String>,
    /// What the caller may do next.
    #[graphql(deprecation = "Strings: use `actions`, InstanceActions")]
    allowed_actions: Vec<String>,
    /// What the caller may do next.
    actions: Vec<InstanceAction>,
    image: String,
    /// When billing started.
    #[graphql(deprecation = "a String: use `runningAtUtc`, a DateTime")]
    running_at: Option<String>,
    /// When billing started.
    running_at_utc: Option<DateTime<Utc>>,
    /// When billing ended.
    #[graphql(deprecation = "a String: use `stoppedAtUtc`, a DateTime")]
    stopped_at: Option<String>,
    /// When billing ended.
    stopped_at_utc: Option<DateTime<Utc>>,
    #[graphql(deprecation = "a String: use `createdAtUtc`, a DateTime")]
    created_at: String,
    created_at_utc: DateTime<Utc>,
    #[graphql(deprecation = "a String: use `updatedAtUtc`, a DateTime")]
    updated_at: String,
    updated_at_utc: DateTime<Utc>,
    /// How to log in: null unless the instance is `running` on a machine
    /// whose host agent reported it (simulated machines have none).
    connection: Option<InstanceConnection>,
    /// GiB in the instance's `/workspace` (3 decimals) as its machine's
    /// agent last measured them: the engines' local volumes enforce no size,
    /// so use is measured and reported instead (docs/real-hosts.md). Null on
    /// simulated machines and before the first measurement.
    disk_used_gib: Option<Decimal>,
    /// When `diskUsedGib` was measured.
    #[graphql(deprecation = "a String: use `diskMeasuredAtUtc`, a DateTime")]
    disk_measured_at: Option<String>,
    /// When `diskUsedGib` was measured.
    disk_measured_at_utc: Option<DateTime<Utc>>,
    /// The reservation whose block the instance runs in: its GPU time is
    /// paid, and it is stopped when the block ends unless `whenBlockEnds`
    /// is `ON_DEMAND`. Null for on-demand and interruptible rentals (and
    /// once an instance went on on demand after its block).
    reservation_id: Option<ID>,
    /// On a reservation: what happens when the block ends (`STOP`, or
    /// `ON_DEMAND` up to `onDemandUpToPerGpuHour`). Null otherwise.
    when_block_ends: Option<contracts::reservations::WhenBlockEnds>,
    /// With `whenBlockEnds: ON_DEMAND`: the most it pays per GPU-hour after
    /// the block (its order's `maxPricePerGpuHour`).
    on_demand_up_to_per_gpu_hour: Option<Decimal>,
    #[graphql(skip)]
    uuid: uuid::Uuid,
    /// Fetched ahead for a whole list (see `instances`); else on demand.
    #[graphql(skip)]
    charged: Option<api::InstanceCharges>,
}

/// What the ledger has charged for an instance so far, per meter. Usage is
/// posted while the instance runs (every settlement interval, 10 s by
/// default) and at every stop, so these trail the meters by at most that.
#[derive(SimpleObject)]
pub struct InstanceCharges {
    currency: String,
    /// Everything charged so far, all meters.
    total: Decimal,
    /// GPU time billed, whole seconds: the sum of `floor(T1 − T0)` of its runs.
    gpu_seconds: i64,
    gpu_cost: Decimal,
    /// Disk time billed, whole seconds (from creation until destroyed,
    /// stopped or not).
    storage_seconds: i64,
    /// Disk size × disk time, what the GB-month price is applied to.
    storage_gib_seconds: i64,
    storage_cost: Decimal,
    bandwidth_up_bytes: i64,
    bandwidth_up_cost: Decimal,
    bandwidth_down_bytes: i64,
    bandwidth_down_cost: Decimal,
}

impl From<api::InstanceCharges> for InstanceCharges {
    fn from(c: api::InstanceCharges) -> Self {
        Self {
            currency: c.currency,
            total: c.total,
            gpu_seconds: c.gpu_seconds,
            gpu_cost: c.gpu_amount,
            storage_seconds: c.storage_seconds,
            storage_gib_seconds: c.storage_gib_seconds,
            storage_cost: c.storage_amount,
            bandwidth_up_bytes: c.bandwidth_up_bytes,
            bandwidth_up_cost: c.bandwidth_up_amount,
            bandwidth_down_bytes: c.bandwidth_down_bytes,
            bandwidth_down_cost: c.bandwidth_down_amount,
        }
    }
}

/// The charges of `ids`, all instances of `tenant_id`, in batches billing
/// accepts.
async fn charges_of(
    ctx: &Context<'_>,
    tenant_id: uuid::Uuid,
    ids: &[uuid::Uuid],
) -> GqlResult<Vec<api::InstanceCharges>> {
    let clients = clients::from_context(ctx)?;
    let mut all = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(api::MAX_CHARGED_INSTANCES) {
        let charges = clients
            .billing
            .call(
                endpoints::billing::INSTANCE_CHARGES,
                (),
                &api::InstanceChargesRequest {
                    tenant_id: TenantId(tenant_id),
                    instance_ids: chunk.iter().copied().map(InstanceId).collect(),
                },
            )
            .await?;
        all.extend(charges);
    }
    Ok(all)
}

#[ComplexObject]
impl Instance {
    /// What the ledger has charged for this instance so far, every meter
    /// (GPU, storage, bandwidth), in `currency`. Needs the billing or read
    /// scope.
    async fn cost_so_far(&self, ctx: &Context<'_>) -> GqlResult<Decimal> {
        Ok(self.charged(ctx).await?.total)
    }

    /// GPU time billed so far, whole seconds: the sum of `floor(T1 − T0)` of
    /// the instance's runs (storage and bandwidth are in `charges`).
    async fn billed_seconds(&self, ctx: &Context<'_>) -> GqlResult<i64> {
        Ok(self.charged(ctx).await?.gpu_seconds)
    }

    /// The charges so far, meter by meter.
    async fn charges(&self, ctx: &Context<'_>) -> GqlResult<InstanceCharges> {
        Ok(self.charged(ctx).await?.into())
    }
}

impl Instance {
    async fn charged(&self, ctx: &Context<'_>) -> GqlResult<api::InstanceCharges> {
        if let Some(charged) = &self.charged {
            return Ok(charged.clone());
        }
        let principal = auth::authorize(ctx, Access::Billing).await?;
        Ok(charges_of(ctx, principal.tenant_id.into(), &[self.uuid])
            .await?
            .into_iter()
            .next()
            .unwrap_or_default())
    }
}

impl From<api::Instance> for Instance {
    fn from(i: api::Instance) -> Self {
        Self {
            id: i.id.into(),
            order_id: i.order_id.into(),
            machine_id: i.machine_id.into(),
            gpu_model: i.gpu_model,
            gpu_count: i.gpu_count,
            mig_profile: i.mig_profile,
            rental_type: i.rental_type.to_string(),
            rental: i.rental_type,
            price_per_gpu_hour: i.price_per_gpu_hour,
            price_per_hour_total: i.price_per_hour_total,
            storage_price_per_gb_month: i.storage_price_per_gb_month,
            bandwidth_up_price_per_tb: i.bandwidth_up_price_per_tb,
            bandwidth_down_price_per_tb: i.bandwidth_down_price_per_tb,
            currency: i.currency,
            preempted_at: i.preempted_at.map(instant),
            preempted_at_utc: i.preempted_at,
            status: i.status.to_string(),
            state: i.status,
            status_reason: i.status_reason,
            allowed_actions: i.allowed_actions.iter().map(|a| a.to_string()).collect(),
            actions: i.allowed_actions,
            image: i.image,
            running_at: i.running_at.map(instant),
            running_at_utc: i.running_at,
            stopped_at: i.stopped_at.map(instant),
            stopped_at_utc: i.stopped_at,
            created_at: instant(i.created_at),
            created_at_utc: i.created_at,
            updated_at: instant(i.updated_at),
            updated_at_utc: i.updated_at,
            connection: i.connection.map(Into::into),
            disk_used_gib: i.disk_used_bytes.map(|b| {
                (Decimal::from(b) / Decimal::from(1u64 << 30))
                    .round_dp(3)
                    .normalize()
            }),
            disk_measured_at: i.disk_measured_at.map(instant),
            disk_measured_at_utc: i.disk_measured_at,
            when_block_ends: i.reservation_id.map(|_| {
                if i.continue_up_to_per_gpu_hour.is_some() {
                    contracts::reservations::WhenBlockEnds::OnDemand
                } else {
                    contracts::reservations::WhenBlockEnds::Stop
                }
            }),
            on_demand_up_to_per_gpu_hour: i
                .continue_up_to_per_gpu_hour
                .filter(|_| i.reservation_id.is_some())
                .map(|p| p.normalize()),
            reservation_id: i.reservation_id.map(Into::into),
            uuid: i.id.into(),
            charged: None,
        }
    }
}

/// Where a renter reaches a running instance: the host agent's SSH gateway
/// and the order's published ports.
#[derive(SimpleObject)]
pub struct InstanceConnection {
    ssh_host: String,
    ssh_port: i32,
    /// The instance's id: the gateway lets in only the instance's keys.
    ssh_user: String,
    /// `ssh -p <sshPort> <sshUser>@<sshHost>`.
    ssh_command: String,
    ports: Vec<PortMapping>,
}

/// A container port and the host port it is published on.
#[derive(SimpleObject)]
pub struct PortMapping {
    container_port: i32,
    host_port: i32,
}

impl From<api::Connection> for InstanceConnection {
    fn from(c: api::Connection) -> Self {
        Self {
            ssh_command: c.ssh_command(),
            ssh_host: c.ssh_host,
            ssh_port: i32::from(c.ssh_port),
            ssh_user: c.ssh_user,
            ports: c
                .ports
                .into_iter()
                .map(|p| PortMapping {
                    container_port: i32::from(p.container_port),
                    host_port: i32::from(p.host_port),
                })
                .collect(),
        }
    }
}

/// One environment variable of an order's container.
#[derive(InputObject)]
pub struct EnvVar {
    name: String,
    /// A secret: stored for the container, never logged nor returned.
    value: String,
}

/// A metered stretch of one instance's run.
#[derive(SimpleObject)]
pub struct UsageInterval {
    id: ID,
    instance_id: ID,
    #[graphql(deprecation = "a String: use `meterKind`, a Meter")]
    meter: String,
    /// What is measured; null for usage posted before postings carried
    /// their meter (the old field says `unknown` there).
    meter_kind: Option<Meter>,
    #[graphql(deprecation = "a String: use `startedAtUtc`, a DateTime")]
    started_at: Option<String>,
    started_at_utc: Option<DateTime<Utc>>,
    /// Null while the interval is open.
    #[graphql(deprecation = "a String: use `endedAtUtc`, a DateTime")]
    ended_at: Option<String>,
    /// Null while the interval is open.
    ended_at_utc: Option<DateTime<Utc>>,
    /// Whole seconds between start and end; null while open.
    billed_seconds: Option<i64>,
    price_per_hour: Decimal,
    currency: String,
    /// The instance's run the interval belongs to: 1 for the first, one
    /// more per start after a stop (storage and bandwidth intervals span the
    /// instance's life and keep 1).
    run_seq: i32,
}

impl From<api::UsageInterval> for UsageInterval {
    fn from(u: api::UsageInterval) -> Self {
        Self {
            id: u.id.into(),
            instance_id: u.instance_id.into(),
            meter_kind: Meter::parse(&u.meter),
            meter: u.meter,
            started_at: u.started_at.map(instant),
            started_at_utc: u.started_at,
            ended_at: u.ended_at.map(instant),
            ended_at_utc: u.ended_at,
            billed_seconds: u.seconds,
            price_per_hour: u.price_per_hour,
            currency: u.currency,
            run_seq: u.run_seq,
        }
    }
}

/// What an order by constraints asks of a machine. The order gets the
/// cheapest live offer that matches and has its GPUs free.
#[derive(InputObject, Default)]
pub struct PlacementConstraintsInput {
    /// Any of these GPU models (catalog names, case-insensitive).
    gpu_models: Option<Vec<String>>,
    regions: Option<Vec<String>>,
    /// ISO 3166-1 alpha-2 codes.
    countries: Option<Vec<String>>,
    /// 0 to 1.
    min_reliability: Option<Decimal>,
    min_vram_gib: Option<i32>,
}

impl From<PlacementConstraintsInput> for api::PlacementConstraints {
    fn from(c: PlacementConstraintsInput) -> Self {
        Self {
            gpu_models: c.gpu_models.unwrap_or_default(),
            regions: c.regions.unwrap_or_default(),
            countries: c.countries.unwrap_or_default(),
            min_reliability: c.min_reliability,
            min_vram_gib: c.min_vram_gib,
        }
    }
}

#[derive(InputObject)]
pub struct CreateOrderInput {
    /// The offer to rent; or give `constraints` instead.
    offer_id: Option<ID>,
    /// Auto-placement: the cheapest matching offer with the GPUs free.
    constraints: Option<PlacementConstraintsInput>,
    gpu_count: i32,
    /// Repeating an order with the same key returns the same instance.
    idempotency_key: String,
    /// Enforced when the GPUs are allocated: if the machine's price is then
    /// above it, the order fails with PRICE_ABOVE_MAX. Without it, the price
    /// the order was quoted is the maximum.
    max_price_per_gpu_hour: Option<Decimal>,
    /// ON_DEMAND (default) or INTERRUPTIBLE.
    rental_type: Option<super::market::RentalType>,
    /// Interruptible only: the rate paid per GPU-hour, at least the
    /// machine's minimum bid. A higher bid or an on-demand order may preempt it.
    bid_per_gpu_hour: Option<Decimal>,
    /// OpenSSH public keys, one per line (at most 32 keys, 16 KiB).
    ssh_public_key: Option<String>,
    /// The container image (`registry/name:tag`).
    image: Option<String>,
    /// Replaces the image's command: program and arguments (at most 64,
    /// each at most 4 KiB).
    command: Option<Vec<String>>,
    /// The container's environment (at most 64 variables, names
    /// `[A-Za-z_][A-Za-z0-9_]*`, values at most 32 KiB, 64 KiB in all).
    /// Values are secrets: never logged, never returned by any query.
    env: Option<Vec<EnvVar>>,
    /// Container ports to publish on host ports (1..65535, at most 16);
    /// `connection.ports` says where.
    ports: Option<Vec<i32>>,
    /// Lifecycle rules the server enforces (see `setInstanceRules`).
    rules: Option<super::rules::InstanceRulesInput>,
    /// A team (project) of your tenant: the order counts against its quota
    /// as well as the tenant's.
    team_id: Option<ID>,
    /// The instance's disk in GiB, from 1 to the machine's disk (default
    /// 20). Storage is billed at the offer's price per GB-month from the
    /// instance's creation until it is destroyed, stopped or not.
    disk_gib: Option<i32>,
    /// A MIG slice of this profile (one of the offer's `migSlices`, e.g.
    /// `3g.40gb`) instead of whole GPUs: `gpuCount` 1, on demand only. The
    /// slice is billed at its `pricePerHour`, which the instance shows as
    /// `pricePerGpuHour`.
    mig_profile: Option<String>,
    /// Launch on the GPUs of one of your reservations while its block runs
    /// (instead of `offerId` or `constraints`; `gpuCount` at most the
    /// reservation's): no GPU charge, since the block is paid; storage and
    /// bandwidth at the machine's rates. The instance is stopped when the
    /// block ends (its disk kept), unless `whenBlockEnds` says otherwise.
    reservation_id: Option<ID>,
    /// With `reservationId`: `STOP` (the default) stops the instance when
    /// the block ends; `ON_DEMAND` keeps it running on the same GPUs at the
    /// machine's on-demand price from that instant, when the GPUs are not
    /// booked by someone else, the machine is still listed, its price is at
    /// most `maxPricePerGpuHour` (then required) and your quota admits it;
    /// otherwise it is stopped and its history says why.
    when_block_ends: Option<contracts::reservations::WhenBlockEnds>,
}

/// The order's ports as port numbers; one outside 1..65535 becomes 0,
/// which ordering refuses along with every other invalid field (one
/// `fieldErrors` answer for the whole form).
fn ports(ports: Option<Vec<i32>>) -> Vec<u16> {
    ports
        .unwrap_or_default()
        .into_iter()
        .map(|p| u16::try_from(p).unwrap_or(0))
        .collect()
}

#[derive(Default)]
pub struct RentalsQuery;

#[Object]
impl RentalsQuery {
    async fn instance(&self, ctx: &Context<'_>, id: ID) -> GqlResult<Instance> {
        let principal = auth::authorize(ctx, Access::Instances).await?;
        let id = validate::id("id", &id)?;
        let instance = clients::from_context(ctx)?
            .ordering
            .call(
                endpoints::ordering::INSTANCE,
                InstanceId(id),
                &api::TenantQuery {
                    tenant_id: principal.tenant_id,
                },
            )
            .await?;
        Ok(instance.into())
    }

    /// The caller's tenant's instances.
    async fn instances(&self, ctx: &Context<'_>) -> GqlResult<Vec<Instance>> {
        let principal = auth::authorize(ctx, Access::Instances).await?;
        let instances = clients::from_context(ctx)?
            .ordering
            .call(
                endpoints::ordering::INSTANCE_LIST,
                (),
                &api::TenantQuery {
                    tenant_id: principal.tenant_id,
                },
            )
            .await?;
        let mut instances: Vec<Instance> = instances.into_iter().map(Into::into).collect();
        // Charges asked for: one batched call to billing for the whole list
        // instead of one per instance. Without the billing scope the fields
        // answer FORBIDDEN one by one, as they would alone.
        let look = ctx.look_ahead();
        let wants = ["costSoFar", "billedSeconds", "charges"]
            .iter()
            .any(|f| look.field(f).exists());
        if wants
            && !instances.is_empty()
            && let Ok(billing) = auth::authorize(ctx, Access::Billing).await
        {
            let ids: Vec<uuid::Uuid> = instances.iter().map(|i| i.uuid).collect();
            let mut charges: std::collections::HashMap<uuid::Uuid, api::InstanceCharges> =
                charges_of(ctx, billing.tenant_id.into(), &ids)
                    .await?
                    .into_iter()
                    .map(|c| (c.instance_id.into_uuid(), c))
                    .collect();
            for instance in &mut instances {
                instance.charged = charges.remove(&instance.uuid);
            }
        }
        Ok(instances)
    }

    /// Usage of the caller's tenant, optionally of one instance.
    async fn usage(
        &self,
        ctx: &Context<'_>,
        instance_id: Option<ID>,
    ) -> GqlResult<Vec<UsageInterval>> {
        let principal = auth::authorize(ctx, Access::Billing).await?;
        let query = api::UsageQuery {
            tenant_id: principal.tenant_id,
            instance_id: instance_id
                .map(|id| validate::id("instanceId", &id).map(InstanceId))
                .transpose()?,
        };
        let usage = clients::from_context(ctx)?
            .metering
            .call(endpoints::metering::USAGE, (), &query)
            .await?;
        Ok(usage.into_iter().map(Into::into).collect())
    }
}

#[derive(Default)]
pub struct RentalsMutation;

#[Object]
impl RentalsMutation {
    /// Rents GPUs from an offer.
    async fn create_order(
        &self,
        ctx: &Context<'_>,
        input: CreateOrderInput,
    ) -> GqlResult<Instance> {
        let principal = auth::authorize(ctx, Access::Rent).await?;
        let offer_id = input
            .offer_id
            .as_ref()
            .map(|id| validate::id("offerId", id))
            .transpose()?;
        validate::at_least("gpuCount", input.gpu_count, 1)?;
        if let Some(disk) = input.disk_gib {
            validate::at_least("diskGib", disk, 1)?;
        }
        if let Some(bid) = input.bid_per_gpu_hour {
            validate::money("bidPerGpuHour", bid, contracts::bounds::GPU_HOUR_BID)?;
        }
        validate::idempotency_key("idempotencyKey", &input.idempotency_key)?;
        // A blank profile is no profile, as a blank image or key is none.
        let mig_profile = input
            .mig_profile
            .map(|p| p.trim().to_owned())
            .filter(|p| !p.is_empty());
        if let Some(profile) = &mig_profile {
            validate::mig_profile("migProfile", profile)?;
            // A slice is one GPU's share and is never preempted (the
            // catalog's allocations refuse anything else): said here in the
            // caller's own field names.
            if input.gpu_count != 1 {
                return Err(
                    GatewayError::validation("gpuCount", "must be 1 with migProfile").into(),
                );
            }
            if input.rental_type == Some(RentalType::Interruptible) {
                return Err(GatewayError::validation(
                    "migProfile",
                    "MIG slices are rented on demand only",
                )
                .into());
            }
        }
        if let Some(price) = input.max_price_per_gpu_hour {
            validate::money(
                "maxPricePerGpuHour",
                price,
                contracts::bounds::GPU_HOUR_PRICE,
            )?;
        }
        let reservation_id = input
            .reservation_id
            .as_ref()
            .map(|id| validate::id("reservationId", id).map(ReservationId))
            .transpose()?;
        if reservation_id.is_some() {
            // The block's GPUs are whole and paid: no offer, no bid, no slice.
            if offer_id.is_some() || input.constraints.is_some() {
                return Err(GatewayError::validation(
                    "reservationId",
                    "give reservationId, offerId or constraints, only one",
                )
                .into());
            }
            if input.rental_type == Some(RentalType::Interruptible) || mig_profile.is_some() {
                return Err(GatewayError::validation(
                    "reservationId",
                    "a reservation's GPUs are rented whole, on demand",
                )
                .into());
            }
        }
        let request = api::CreateOrderRequest {
            reservation_id,
            when_block_ends: input.when_block_ends,
            tenant_id: principal.tenant_id,
            user_id: principal.user_id,
            idempotency_key: input.idempotency_key,
            mig_profile,
            offer_id: offer_id.map(MachineId),
            constraints: input.constraints.map(Into::into),
            gpu_count: input.gpu_count,
            max_price_per_gpu_hour: input.max_price_per_gpu_hour,
            rental_type: input.rental_type.unwrap_or_default(),
            bid_per_gpu_hour: input.bid_per_gpu_hour,
            ssh_public_key: input.ssh_public_key.filter(|k| !k.trim().is_empty()),
            image: input.image.filter(|i| !i.trim().is_empty()),
            team_id: input
                .team_id
                .as_ref()
                .map(|team| validate::id("teamId", team).map(TeamId))
                .transpose()?,
            disk_gib: input.disk_gib,
            command: input.command,
            env: input
                .env
                .unwrap_or_default()
                .into_iter()
                .map(|v| api::EnvVar {
                    name: v.name,
                    value: v.value,
                })
                .collect(),
            ports: ports(input.ports),
        };
        let instance = clients::from_context(ctx)?
            .ordering
            .call(
                endpoints::ordering::CREATE_ORDER,
                (),
                &api::CreateOrderWithRules {
                    order: request,
                    rules: input.rules.map(Into::into),
                },
            )
            .await?;
        Ok(instance.into())
    }

    /// Stops billing now and gives the GPUs back; the disk stays.
    async fn stop_instance(&self, ctx: &Context<'_>, id: ID) -> GqlResult<Instance> {
        instance_action(ctx, &id, endpoints::ordering::STOP).await
    }

    /// Starts a stopped instance again on the same machine (or fails with
    /// INSUFFICIENT_CAPACITY when its GPUs are taken).
    async fn start_instance(&self, ctx: &Context<'_>, id: ID) -> GqlResult<Instance> {
        instance_action(ctx, &id, endpoints::ordering::START).await
    }

    /// Stops billing now (if running) and deprovisions the instance; it is
    /// `destroyed` once its machine validates clean. Works in every state but
    /// the moment of `stopping` (CONFLICT: try again): an instance still
    /// provisioning is cancelled, its GPUs and quota go back and no GPU time
    /// is billed. Destroying a destroyed (or failed) instance changes nothing.
    async fn destroy_instance(&self, ctx: &Context<'_>, id: ID) -> GqlResult<Instance> {
        instance_action(ctx, &id, endpoints::ordering::DESTROY).await
    }
}

/// A renter's action on one of its tenant's instances.
async fn instance_action(
    ctx: &Context<'_>,
    id: &ID,
    action: Endpoint<InstanceId, api::TenantRequest, api::Instance>,
) -> GqlResult<Instance> {
    let principal = auth::authorize(ctx, Access::Rent).await?;
    let id = validate::id("id", id)?;
    let instance = clients::from_context(ctx)?
        .ordering
        .call(
            action,
            InstanceId(id),
            &api::TenantRequest {
                tenant_id: principal.tenant_id,
            },
        )
        .await?;
    Ok(instance.into())
}
