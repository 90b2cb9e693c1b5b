//! Offers renters browse and the machines hosts list.

use async_graphql::{Context, ID, InputObject, Object, SimpleObject};
use contracts::api;
use rust_decimal::Decimal;
use serde::Serialize;
use uuid::Uuid;

use super::instant;
use crate::auth::{self, Access};
use crate::clients;
use crate::error::{GatewayError, GqlResult};
use crate::validate;

const DEFAULT_PAGE: i32 = 20;
const MAX_PAGE: i32 = 100;

#[derive(InputObject, Default)]
pub struct OfferFilter {
    gpu_model: Option<String>,
    max_price_per_gpu_hour: Option<Decimal>,
    min_gpus: Option<i32>,
}

/// The catalog's `OfferQuery` without the absent fields: a `first=` with no
/// value would not parse on the other side.
#[derive(Serialize)]
struct OfferParams<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    gpu_model: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_price_per_gpu_hour: Option<Decimal>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_gpus: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    first: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    after: Option<&'a str>,
}

/// GPUs of one machine available to rent.
#[derive(SimpleObject)]
pub struct Offer {
    id: ID,
    machine_id: ID,
    gpu_model: String,
    gpu_count: i32,
    gpus_free: i32,
    vram_gib: i32,
    cpu_cores: i32,
    ram_gib: i32,
    disk_gib: i32,
    country: String,
    price_per_gpu_hour: Decimal,
    /// `pricePerGpuHour` × `gpuCount`.
    price_per_hour_all_gpus: Decimal,
    currency: String,
}

impl From<api::Offer> for Offer {
    fn from(o: api::Offer) -> Self {
        Self {
            id: o.id.into(),
            machine_id: o.machine_id.into(),
            price_per_hour_all_gpus: o.price_per_gpu_hour * Decimal::from(o.gpu_count),
            gpu_model: o.gpu_model,
            gpu_count: o.gpu_count,
            gpus_free: o.gpus_free,
            vram_gib: o.vram_gib,
            cpu_cores: o.cpu_cores,
            ram_gib: o.ram_gib,
            disk_gib: o.disk_gib,
            country: o.country,
            price_per_gpu_hour: o.price_per_gpu_hour,
            currency: o.currency,
        }
    }
}

#[derive(SimpleObject)]
pub struct PageInfo {
    /// Pass as `after` to get the next page.
    end_cursor: Option<String>,
    has_next_page: bool,
}

#[derive(SimpleObject)]
pub struct OfferConnection {
    nodes: Vec<Offer>,
    page_info: PageInfo,
}

#[derive(SimpleObject)]
pub struct Machine {
    id: ID,
    name: String,
    gpu_model: String,
    gpu_count: i32,
    gpus_allocated: i32,
    vram_gib: i32,
    cpu_cores: i32,
    ram_gib: i32,
    disk_gib: i32,
    country: String,
    /// Null until the host sets a price.
    price_per_gpu_hour: Option<Decimal>,
    currency: String,
    listed: bool,
    created_at: String,
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
            cpu_cores: m.cpu_cores,
            ram_gib: m.ram_gib,
            disk_gib: m.disk_gib,
            country: m.country,
            price_per_gpu_hour: m.price_per_gpu_hour,
            currency: m.currency,
            listed: m.listed,
            created_at: instant(m.created_at),
        }
    }
}

#[derive(InputObject)]
pub struct RegisterMachineInput {
    name: String,
    gpu_model: String,
    gpu_count: i32,
    vram_gib: i32,
    cpu_cores: i32,
    ram_gib: i32,
    disk_gib: i32,
    country: String,
    idempotency_key: String,
}

#[derive(SimpleObject)]
pub struct RegisterMachinePayload {
    machine: Machine,
    /// The host agent's credential. Shown only once; null on a replay.
    agent_token: Option<String>,
}

#[derive(Default)]
pub struct MarketQuery;

#[Object]
impl MarketQuery {
    /// Machines listed for rent. Needs no login.
    async fn offers(
        &self,
        ctx: &Context<'_>,
        filter: Option<OfferFilter>,
        #[graphql(default = 20)] first: Option<i32>,
        after: Option<String>,
    ) -> GqlResult<OfferConnection> {
        // An explicit null means "no preference", like leaving it out.
        let first = first.unwrap_or(DEFAULT_PAGE);
        if !(1..=MAX_PAGE).contains(&first) {
            return Err(GatewayError::validation(
                "first",
                format!("must be between 1 and {MAX_PAGE}"),
            )
            .into());
        }
        let filter = filter.unwrap_or_default();
        if let Some(price) = filter.max_price_per_gpu_hour {
            validate::non_negative("maxPricePerGpuHour", price)?;
        }
        if let Some(min) = filter.min_gpus {
            validate::at_least("minGpus", min, 0)?;
        }
        let params = OfferParams {
            gpu_model: filter.gpu_model.as_deref().filter(|m| !m.is_empty()),
            max_price_per_gpu_hour: filter.max_price_per_gpu_hour,
            min_gpus: filter.min_gpus,
            first: Some(i64::from(first)),
            after: after.as_deref().filter(|a| !a.is_empty()),
        };
        let page: api::OfferPage = clients::from_context(ctx)?
            .catalog
            .get_query("/internal/offers", &params)
            .await?;
        Ok(OfferConnection {
            nodes: page.offers.into_iter().map(Into::into).collect(),
            page_info: PageInfo {
                end_cursor: page.end_cursor,
                has_next_page: page.has_next_page,
            },
        })
    }

    /// The caller's machines, listed or not.
    async fn my_machines(&self, ctx: &Context<'_>) -> GqlResult<Vec<Machine>> {
        let principal = auth::authorize(ctx, Access::Host).await?;
        let machines: Vec<api::Machine> = clients::from_context(ctx)?
            .catalog
            .get_query(
                "/internal/machines",
                &[("host_tenant_id", principal.tenant_id)],
            )
            .await?;
        Ok(machines.into_iter().map(Into::into).collect())
    }
}

#[derive(Default)]
pub struct MarketMutation;

#[Object]
impl MarketMutation {
    async fn register_machine(
        &self,
        ctx: &Context<'_>,
        input: RegisterMachineInput,
    ) -> GqlResult<RegisterMachinePayload> {
        let principal = auth::authorize(ctx, Access::Host).await?;
        validate::not_blank("name", &input.name)?;
        validate::not_blank("gpuModel", &input.gpu_model)?;
        validate::at_least("gpuCount", input.gpu_count, 1)?;
        validate::at_least("vramGib", input.vram_gib, 0)?;
        validate::at_least("cpuCores", input.cpu_cores, 0)?;
        validate::at_least("ramGib", input.ram_gib, 0)?;
        validate::at_least("diskGib", input.disk_gib, 0)?;
        validate::not_blank("country", &input.country)?;
        validate::idempotency_key("idempotencyKey", &input.idempotency_key)?;
        let request = api::RegisterMachineRequest {
            host_tenant_id: principal.tenant_id,
            name: input.name,
            gpu_model: input.gpu_model,
            gpu_count: input.gpu_count,
            vram_gib: input.vram_gib,
            cpu_cores: input.cpu_cores,
            ram_gib: input.ram_gib,
            disk_gib: input.disk_gib,
            country: input.country,
            idempotency_key: input.idempotency_key,
        };
        let registered: api::MachineRegistered = clients::from_context(ctx)?
            .catalog
            .post("/internal/machines", &request)
            .await?;
        Ok(RegisterMachinePayload {
            machine: registered.machine.into(),
            agent_token: registered.agent_token,
        })
    }

    async fn set_machine_pricing(
        &self,
        ctx: &Context<'_>,
        machine_id: ID,
        price_per_gpu_hour: Decimal,
    ) -> GqlResult<Machine> {
        let principal = auth::authorize(ctx, Access::Host).await?;
        let machine_id = validate::id("machineId", &machine_id)?;
        validate::non_negative("pricePerGpuHour", price_per_gpu_hour)?;
        let request = api::SetPricingRequest {
            host_tenant_id: principal.tenant_id,
            price_per_gpu_hour,
        };
        let machine: api::Machine = clients::from_context(ctx)?
            .catalog
            .put(
                &format!("/internal/machines/{machine_id}/pricing"),
                &request,
            )
            .await?;
        Ok(machine.into())
    }

    /// Puts the machine on the offers list.
    async fn list_machine(&self, ctx: &Context<'_>, machine_id: ID) -> GqlResult<Machine> {
        host_machine_action(ctx, &machine_id, "list").await
    }

    /// Takes the machine off the offers list.
    async fn unlist_machine(&self, ctx: &Context<'_>, machine_id: ID) -> GqlResult<Machine> {
        host_machine_action(ctx, &machine_id, "unlist").await
    }
}

async fn host_machine_action(
    ctx: &Context<'_>,
    machine_id: &ID,
    action: &str,
) -> GqlResult<Machine> {
    let principal = auth::authorize(ctx, Access::Host).await?;
    let machine_id: Uuid = validate::id("machineId", machine_id)?;
    let machine: api::Machine = clients::from_context(ctx)?
        .catalog
        .post(
            &format!("/internal/machines/{machine_id}/{action}"),
            &api::HostMachineRequest {
                host_tenant_id: principal.tenant_id,
            },
        )
        .await?;
    Ok(machine.into())
}
