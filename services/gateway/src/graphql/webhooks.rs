//! Outbound webhooks: the caller's tenant's endpoints (the signing secret is
//! answered once, on creation and on rotation), the delivery log, test pings
//! and redelivery. The webhooks service scopes every call to the tenant in
//! the caller's token: another tenant's endpoint is NOT_FOUND.

use async_graphql::{Context, Enum, ID, InputObject, Object, SimpleObject};
use chrono::{DateTime, Utc};
use contracts::endpoints::webhooks as endpoints;
use contracts::ids::{DeliveryId, WebhookEndpointId};
use contracts::webhooks as api;

use crate::auth::{self, Access};
use crate::clients;
use crate::error::{GatewayError, GqlResult};
use crate::validate;

/// An event type an endpoint can receive (`api-specs/webhooks.yaml` has
/// each payload's schema).
#[derive(SimpleObject)]
pub struct WebhookEventType {
    /// As in the payload's `type`, e.g. `instance.running`.
    name: String,
    description: String,
}

/// Where a tenant's events are sent.
#[derive(SimpleObject)]
pub struct WebhookEndpoint {
    id: ID,
    url: String,
    description: String,
    /// The types it receives; empty means every type.
    event_types: Vec<String>,
    /// False after its owner disabled it, or after it failed every delivery
    /// for the whole retry schedule (`disabledReason` says which).
    enabled: bool,
    disabled_reason: Option<String>,
    disabled_at: Option<DateTime<Utc>>,
    /// After a rotation: until when the previous secret also signs.
    previous_secret_until: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl From<api::Endpoint> for WebhookEndpoint {
    fn from(e: api::Endpoint) -> Self {
        Self {
            id: e.id.into(),
            url: e.url,
            description: e.description,
            event_types: e.event_types,
            enabled: e.enabled,
            disabled_reason: e.disabled_reason,
            disabled_at: e.disabled_at,
            previous_secret_until: e.previous_secret_until,
            created_at: e.created_at,
            updated_at: e.updated_at,
        }
    }
}

/// An endpoint with its signing secret, shown this once.
#[derive(SimpleObject)]
pub struct WebhookEndpointSecret {
    endpoint: WebhookEndpoint,
    /// `whsec_…`: verify deliveries with it (Standard Webhooks).
    secret: String,
}

impl From<api::EndpointSecret> for WebhookEndpointSecret {
    fn from(e: api::EndpointSecret) -> Self {
        Self {
            endpoint: e.endpoint.into(),
            secret: e.secret,
        }
    }
}

#[derive(Enum, Copy, Clone, Eq, PartialEq)]
pub enum WebhookDeliveryStatus {
    /// Not delivered yet; `nextAttemptAt` says when it is tried.
    Pending,
    Delivered,
    /// The retry schedule ran out (or the endpoint was disabled).
    Failed,
}

/// One HTTP attempt of a delivery.
#[derive(SimpleObject)]
pub struct WebhookAttempt {
    started_at: DateTime<Utc>,
    /// The receiver's HTTP status; none when no response came.
    status_code: Option<i32>,
    succeeded: bool,
    latency_ms: i32,
    /// The start of the response body (at most 1 KiB).
    response_head: String,
    error: Option<String>,
}

/// One event sent to one endpoint.
#[derive(SimpleObject)]
pub struct WebhookDelivery {
    id: ID,
    /// The `webhook-id` header of every attempt (the receiver's
    /// de-duplication key).
    webhook_id: String,
    endpoint_id: ID,
    event_type: String,
    status: WebhookDeliveryStatus,
    attempts: i32,
    next_attempt_at: Option<DateTime<Utc>>,
    delivered_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    /// The body sent, as JSON text.
    payload: String,
    /// Newest first, at most 20.
    attempt_log: Vec<WebhookAttempt>,
}

impl From<api::Delivery> for WebhookDelivery {
    fn from(d: api::Delivery) -> Self {
        Self {
            id: d.id.into(),
            webhook_id: d.webhook_id,
            endpoint_id: d.endpoint_id.into(),
            event_type: d.event_type,
            status: match d.status.as_str() {
                "delivered" => WebhookDeliveryStatus::Delivered,
                "failed" => WebhookDeliveryStatus::Failed,
                _ => WebhookDeliveryStatus::Pending,
            },
            attempts: d.attempts,
            next_attempt_at: d.next_attempt_at,
            delivered_at: d.delivered_at,
            created_at: d.created_at,
            payload: d.payload.to_string(),
            attempt_log: d
                .attempt_log
                .into_iter()
                .map(|a| WebhookAttempt {
                    started_at: a.started_at,
                    status_code: a.status_code,
                    succeeded: a.succeeded,
                    latency_ms: a.latency_ms,
                    response_head: a.response_head,
                    error: a.error,
                })
                .collect(),
        }
    }
}

#[derive(InputObject)]
pub struct CreateWebhookEndpointInput {
    /// `https://…`; private, loopback and link-local addresses are refused.
    url: String,
    description: Option<String>,
    /// Empty or absent: every type.
    event_types: Option<Vec<String>>,
}

#[derive(InputObject)]
pub struct UpdateWebhookEndpointInput {
    url: Option<String>,
    description: Option<String>,
    event_types: Option<Vec<String>>,
    /// True re-enables a disabled endpoint.
    enabled: Option<bool>,
}

#[derive(Default)]
pub struct WebhooksQuery;

#[Object]
impl WebhooksQuery {
    /// Every event type an endpoint can subscribe to.
    async fn webhook_event_types(&self) -> Vec<WebhookEventType> {
        api::EventType::ALL
            .into_iter()
            .filter(|t| t.subscribable())
            .map(|t| WebhookEventType {
                name: t.as_str().to_owned(),
                description: t.description().to_owned(),
            })
            .collect()
    }

    /// The caller's tenant's webhook endpoints, oldest first.
    async fn webhook_endpoints(&self, ctx: &Context<'_>) -> GqlResult<Vec<WebhookEndpoint>> {
        let principal = auth::authorize(ctx, Access::Webhooks).await?;
        let list = clients::from_context(ctx)?
            .webhooks
            .call(endpoints::ENDPOINT_LIST, principal.tenant_id, &())
            .await?;
        Ok(list.into_iter().map(Into::into).collect())
    }

    /// The delivery log, newest first (`limit` 1 to 100, default 50).
    async fn webhook_deliveries(
        &self,
        ctx: &Context<'_>,
        endpoint_id: Option<ID>,
        limit: Option<i32>,
    ) -> GqlResult<Vec<WebhookDelivery>> {
        let principal = auth::authorize(ctx, Access::Webhooks).await?;
        let limit = limit.unwrap_or(50);
        if !(1..=100).contains(&limit) {
            return Err(GatewayError::validation("limit", "between 1 and 100").into());
        }
        let query = api::DeliveriesQuery {
            endpoint_id: endpoint_id
                .as_ref()
                .map(|id| validate::id("endpointId", id).map(WebhookEndpointId))
                .transpose()?,
            limit: Some(i64::from(limit)),
        };
        let list = clients::from_context(ctx)?
            .webhooks
            .call(endpoints::DELIVERY_LIST, principal.tenant_id, &query)
            .await?;
        Ok(list.into_iter().map(Into::into).collect())
    }
}

#[derive(Default)]
pub struct WebhooksMutation;

#[Object]
impl WebhooksMutation {
    /// Adds an endpoint; its signing secret is in the answer and never shown
    /// again (rotate it to get a new one).
    async fn create_webhook_endpoint(
        &self,
        ctx: &Context<'_>,
        input: CreateWebhookEndpointInput,
    ) -> GqlResult<WebhookEndpointSecret> {
        let principal = auth::authorize(ctx, Access::Webhooks).await?;
        validate::not_blank("url", &input.url)?;
        let body = api::CreateEndpointRequest {
            url: input.url,
            description: input.description.unwrap_or_default(),
            event_types: input.event_types.unwrap_or_default(),
        };
        let created = clients::from_context(ctx)?
            .webhooks
            .call(endpoints::ENDPOINT_CREATE, principal.tenant_id, &body)
            .await?;
        Ok(created.into())
    }

    async fn update_webhook_endpoint(
        &self,
        ctx: &Context<'_>,
        id: ID,
        input: UpdateWebhookEndpointInput,
    ) -> GqlResult<WebhookEndpoint> {
        let principal = auth::authorize(ctx, Access::Webhooks).await?;
        let id = validate::id("id", &id)?;
        let body = api::UpdateEndpointRequest {
            url: input.url,
            description: input.description,
            event_types: input.event_types,
            enabled: input.enabled,
        };
        let updated = clients::from_context(ctx)?
            .webhooks
            .call(
                endpoints::ENDPOINT_UPDATE,
                (principal.tenant_id, WebhookEndpointId(id)),
                &body,
            )
            .await?;
        Ok(updated.into())
    }

    /// Deletes an endpoint and its delivery log.
    async fn delete_webhook_endpoint(&self, ctx: &Context<'_>, id: ID) -> GqlResult<bool> {
        let principal = auth::authorize(ctx, Access::Webhooks).await?;
        let id = validate::id("id", &id)?;
        clients::from_context(ctx)?
            .webhooks
            .call(
                endpoints::ENDPOINT_DELETE,
                (principal.tenant_id, WebhookEndpointId(id)),
                &(),
            )
            .await?;
        Ok(true)
    }

    /// A new signing secret, shown this once; the old one keeps signing
    /// beside it for a day (`previousSecretUntil`), so receivers can switch.
    async fn rotate_webhook_secret(
        &self,
        ctx: &Context<'_>,
        id: ID,
    ) -> GqlResult<WebhookEndpointSecret> {
        let principal = auth::authorize(ctx, Access::Webhooks).await?;
        let id = validate::id("id", &id)?;
        let rotated = clients::from_context(ctx)?
            .webhooks
            .call(
                endpoints::ENDPOINT_ROTATE_SECRET,
                (principal.tenant_id, WebhookEndpointId(id)),
                &(),
            )
            .await?;
        Ok(rotated.into())
    }

    /// Sends a `webhook.test` event to one endpoint now.
    async fn send_webhook_test(
        &self,
        ctx: &Context<'_>,
        endpoint_id: ID,
    ) -> GqlResult<WebhookDelivery> {
        let principal = auth::authorize(ctx, Access::Webhooks).await?;
        let id = validate::id("endpointId", &endpoint_id)?;
        let delivery = clients::from_context(ctx)?
            .webhooks
            .call(
                endpoints::ENDPOINT_TEST,
                (principal.tenant_id, WebhookEndpointId(id)),
                &(),
            )
            .await?;
        Ok(delivery.into())
    }

    /// Sends a delivery again now, with the same `webhook-id`, on a fresh
    /// retry schedule.
    async fn redeliver_webhook(
        &self,
        ctx: &Context<'_>,
        delivery_id: ID,
    ) -> GqlResult<WebhookDelivery> {
        let principal = auth::authorize(ctx, Access::Webhooks).await?;
        let id = validate::id("deliveryId", &delivery_id)?;
        let delivery = clients::from_context(ctx)?
            .webhooks
            .call(
                endpoints::DELIVERY_REDELIVER,
                (principal.tenant_id, DeliveryId(id)),
                &(),
            )
            .await?;
        Ok(delivery.into())
    }
}
