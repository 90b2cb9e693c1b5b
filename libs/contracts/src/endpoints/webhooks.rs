//! The webhooks service's internal endpoints, each scoped to the tenant the
//! caller acts for.

use super::Endpoint;
use crate::ids::{DeliveryId, TenantId, WebhookEndpointId};
use crate::webhooks::{
    CreateEndpointRequest, DeliveriesQuery, Delivery, EndpointDeleted, EndpointSecret,
    UpdateEndpointRequest,
};

/// A webhook endpoint as the service shows it (not the HTTP endpoint type).
type WebhookEndpoint = crate::webhooks::Endpoint;

/// The tenant's webhook endpoints, oldest first.
pub const ENDPOINT_LIST: Endpoint<TenantId, (), Vec<WebhookEndpoint>> =
    Endpoint::get("/internal/tenants/{tenant_id}/webhooks/endpoints");

/// Adds an endpoint; its signing secret is in the reply, once (201).
pub const ENDPOINT_CREATE: Endpoint<TenantId, CreateEndpointRequest, EndpointSecret> =
    Endpoint::post("/internal/tenants/{tenant_id}/webhooks/endpoints");

/// One of the tenant's endpoints.
pub const ENDPOINT_GET: Endpoint<(TenantId, WebhookEndpointId), (), WebhookEndpoint> =
    Endpoint::get("/internal/tenants/{tenant_id}/webhooks/endpoints/{id}");

/// Changes an endpoint's URL, description, event types or enabled flag.
pub const ENDPOINT_UPDATE: Endpoint<
    (TenantId, WebhookEndpointId),
    UpdateEndpointRequest,
    WebhookEndpoint,
> = Endpoint::put("/internal/tenants/{tenant_id}/webhooks/endpoints/{id}");

/// Deletes an endpoint and its delivery log.
pub const ENDPOINT_DELETE: Endpoint<(TenantId, WebhookEndpointId), (), EndpointDeleted> =
    Endpoint::post("/internal/tenants/{tenant_id}/webhooks/endpoints/{id}/delete");

/// Gives an endpoint a new signing secret, answered once.
pub const ENDPOINT_ROTATE_SECRET: Endpoint<(TenantId, WebhookEndpointId), (), EndpointSecret> =
    Endpoint::post("/internal/tenants/{tenant_id}/webhooks/endpoints/{id}/rotate-secret");

/// Sends a `webhook.test` event to one endpoint now (201).
pub const ENDPOINT_TEST: Endpoint<(TenantId, WebhookEndpointId), (), Delivery> =
    Endpoint::post("/internal/tenants/{tenant_id}/webhooks/endpoints/{id}/test");

/// The tenant's delivery log, newest first, optionally of one endpoint.
pub const DELIVERY_LIST: Endpoint<TenantId, DeliveriesQuery, Vec<Delivery>> =
    Endpoint::get("/internal/tenants/{tenant_id}/webhooks/deliveries");

/// Sends a delivery again now, on a fresh retry schedule.
pub const DELIVERY_REDELIVER: Endpoint<(TenantId, DeliveryId), (), Delivery> =
    Endpoint::post("/internal/tenants/{tenant_id}/webhooks/deliveries/{id}/redeliver");
