//! Orders, the instances they start, and their metered usage.

use async_graphql::{Context, ID, InputObject, Object, SimpleObject};
use contracts::api;
use rust_decimal::Decimal;

use super::instant;
use crate::auth::{self, Access};
use crate::clients;
use crate::error::GqlResult;
use crate::validate;

#[derive(SimpleObject)]
pub struct Instance {
    id: ID,
    order_id: ID,
    machine_id: ID,
    gpu_model: String,
    gpu_count: i32,
    rental_type: String,
    price_per_gpu_hour: Decimal,
    price_per_hour_total: Decimal,
    currency: String,
    status: String,
    status_reason: Option<String>,
    /// What the caller may do next.
    allowed_actions: Vec<String>,
    image: String,
    /// When billing started.
    running_at: Option<String>,
    /// When billing ended.
    stopped_at: Option<String>,
    created_at: String,
    updated_at: String,
}

impl From<api::Instance> for Instance {
    fn from(i: api::Instance) -> Self {
        Self {
            id: i.id.into(),
            order_id: i.order_id.into(),
            machine_id: i.machine_id.into(),
            gpu_model: i.gpu_model,
            gpu_count: i.gpu_count,
            rental_type: i.rental_type,
            price_per_gpu_hour: i.price_per_gpu_hour,
            price_per_hour_total: i.price_per_hour_total,
            currency: i.currency,
            status: i.status,
            status_reason: i.status_reason,
            allowed_actions: i.allowed_actions,
            image: i.image,
            running_at: i.running_at.map(instant),
            stopped_at: i.stopped_at.map(instant),
            created_at: instant(i.created_at),
            updated_at: instant(i.updated_at),
        }
    }
}

/// A metered stretch of one instance's run.
#[derive(SimpleObject)]
pub struct UsageInterval {
    id: ID,
    instance_id: ID,
    meter: String,
    started_at: Option<String>,
    /// Null while the interval is open.
    ended_at: Option<String>,
    /// Whole seconds between start and end; null while open.
    billed_seconds: Option<i64>,
    price_per_hour: Decimal,
    currency: String,
}

impl From<api::UsageInterval> for UsageInterval {
    fn from(u: api::UsageInterval) -> Self {
        Self {
            id: u.id.into(),
            instance_id: u.instance_id.into(),
            meter: u.meter,
            started_at: u.started_at.map(instant),
            ended_at: u.ended_at.map(instant),
            billed_seconds: u.seconds,
            price_per_hour: u.price_per_hour,
            currency: u.currency,
        }
    }
}

#[derive(InputObject)]
pub struct CreateOrderInput {
    offer_id: ID,
    gpu_count: i32,
    /// Repeating an order with the same key returns the same instance.
    idempotency_key: String,
    /// The order fails if the offer now costs more per GPU hour.
    max_price_per_gpu_hour: Option<Decimal>,
    ssh_public_key: Option<String>,
    image: Option<String>,
}

#[derive(Default)]
pub struct RentalsQuery;

#[Object]
impl RentalsQuery {
    async fn instance(&self, ctx: &Context<'_>, id: ID) -> GqlResult<Instance> {
        let principal = auth::authorize(ctx, Access::Instances).await?;
        let id = validate::id("id", &id)?;
        let instance: api::Instance = clients::from_context(ctx)?
            .ordering
            .get_query(
                &format!("/internal/instances/{id}"),
                &[("tenant_id", principal.tenant_id)],
            )
            .await?;
        Ok(instance.into())
    }

    /// The caller's tenant's instances.
    async fn instances(&self, ctx: &Context<'_>) -> GqlResult<Vec<Instance>> {
        let principal = auth::authorize(ctx, Access::Instances).await?;
        let instances: Vec<api::Instance> = clients::from_context(ctx)?
            .ordering
            .get_query("/internal/instances", &[("tenant_id", principal.tenant_id)])
            .await?;
        Ok(instances.into_iter().map(Into::into).collect())
    }

    /// Usage of the caller's tenant, optionally of one instance.
    async fn usage(
        &self,
        ctx: &Context<'_>,
        instance_id: Option<ID>,
    ) -> GqlResult<Vec<UsageInterval>> {
        let principal = auth::authorize(ctx, Access::Billing).await?;
        let mut query = vec![("tenant_id", principal.tenant_id)];
        if let Some(id) = instance_id {
            query.push(("instance_id", validate::id("instanceId", &id)?));
        }
        let usage: Vec<api::UsageInterval> = clients::from_context(ctx)?
            .metering
            .get_query("/internal/usage", &query)
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
        let offer_id = validate::id("offerId", &input.offer_id)?;
        validate::at_least("gpuCount", input.gpu_count, 1)?;
        validate::idempotency_key("idempotencyKey", &input.idempotency_key)?;
        if let Some(price) = input.max_price_per_gpu_hour {
            validate::non_negative("maxPricePerGpuHour", price)?;
        }
        let request = api::CreateOrderRequest {
            tenant_id: principal.tenant_id,
            user_id: principal.user_id,
            idempotency_key: input.idempotency_key,
            offer_id,
            gpu_count: input.gpu_count,
            max_price_per_gpu_hour: input.max_price_per_gpu_hour,
            ssh_public_key: input.ssh_public_key.filter(|k| !k.trim().is_empty()),
            image: input.image.filter(|i| !i.trim().is_empty()),
        };
        let instance: api::Instance = clients::from_context(ctx)?
            .ordering
            .post("/internal/orders", &request)
            .await?;
        Ok(instance.into())
    }

    /// Stops billing now and gives the GPUs back; the disk stays.
    async fn stop_instance(&self, ctx: &Context<'_>, id: ID) -> GqlResult<Instance> {
        instance_action(ctx, &id, "stop").await
    }

    /// Starts a stopped instance again on the same machine (or fails with
    /// INSUFFICIENT_CAPACITY when its GPUs are taken).
    async fn start_instance(&self, ctx: &Context<'_>, id: ID) -> GqlResult<Instance> {
        instance_action(ctx, &id, "start").await
    }

    /// Stops billing now (if running) and deprovisions the instance; it is
    /// `destroyed` once its machine validates clean. Destroying a destroyed
    /// instance changes nothing.
    async fn destroy_instance(&self, ctx: &Context<'_>, id: ID) -> GqlResult<Instance> {
        instance_action(ctx, &id, "destroy").await
    }
}

/// A renter's action on one of its tenant's instances.
async fn instance_action(ctx: &Context<'_>, id: &ID, action: &str) -> GqlResult<Instance> {
    let principal = auth::authorize(ctx, Access::Rent).await?;
    let id = validate::id("id", id)?;
    let instance: api::Instance = clients::from_context(ctx)?
        .ordering
        .post(
            &format!("/internal/instances/{id}/{action}"),
            &api::TenantRequest {
                tenant_id: principal.tenant_id,
            },
        )
        .await?;
    Ok(instance.into())
}
