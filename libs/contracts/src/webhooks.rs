//! Outbound webhooks (the webhooks service): the event types renters and
//! hosts can subscribe to, and the bodies of the service's internal API.
//! The payload schema of each type is in `api-specs/webhooks.yaml`.

use crate::ids::{DeliveryId, TenantId, WebhookEndpointId};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Every event type a webhook endpoint can receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventType {
    #[serde(rename = "instance.created")]
    InstanceCreated,
    #[serde(rename = "instance.running")]
    InstanceRunning,
    #[serde(rename = "instance.stopped")]
    InstanceStopped,
    #[serde(rename = "instance.preempted")]
    InstancePreempted,
    #[serde(rename = "instance.host_lost")]
    InstanceHostLost,
    #[serde(rename = "instance.failed")]
    InstanceFailed,
    #[serde(rename = "instance.destroyed")]
    InstanceDestroyed,
    #[serde(rename = "order.failed")]
    OrderFailed,
    #[serde(rename = "balance.low")]
    BalanceLow,
    #[serde(rename = "balance.exhausted")]
    BalanceExhausted,
    #[serde(rename = "spend_cap.reached")]
    SpendCapReached,
    #[serde(rename = "top_up.succeeded")]
    TopUpSucceeded,
    #[serde(rename = "invoice.finalized")]
    InvoiceFinalized,
    #[serde(rename = "invoice.paid")]
    InvoicePaid,
    #[serde(rename = "host.verification_changed")]
    HostVerificationChanged,
    #[serde(rename = "machine.online")]
    MachineOnline,
    #[serde(rename = "machine.offline")]
    MachineOffline,
    #[serde(rename = "machine.rented")]
    MachineRented,
    #[serde(rename = "machine.released")]
    MachineReleased,
    #[serde(rename = "payout.paid")]
    PayoutPaid,
    #[serde(rename = "payout.failed")]
    PayoutFailed,
    #[serde(rename = "statement.finalized")]
    StatementFinalized,
    #[serde(rename = "endpoint.disabled")]
    EndpointDisabled,
    #[serde(rename = "webhook.test")]
    Test,
}

impl EventType {
    pub const ALL: [EventType; 24] = [
        EventType::InstanceCreated,
        EventType::InstanceRunning,
        EventType::InstanceStopped,
        EventType::InstancePreempted,
        EventType::InstanceHostLost,
        EventType::InstanceFailed,
        EventType::InstanceDestroyed,
        EventType::OrderFailed,
        EventType::BalanceLow,
        EventType::BalanceExhausted,
        EventType::SpendCapReached,
        EventType::TopUpSucceeded,
        EventType::InvoiceFinalized,
        EventType::InvoicePaid,
        EventType::HostVerificationChanged,
        EventType::MachineOnline,
        EventType::MachineOffline,
        EventType::MachineRented,
        EventType::MachineReleased,
        EventType::PayoutPaid,
        EventType::PayoutFailed,
        EventType::StatementFinalized,
        EventType::EndpointDisabled,
        EventType::Test,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventType::InstanceCreated => "instance.created",
            EventType::InstanceRunning => "instance.running",
            EventType::InstanceStopped => "instance.stopped",
            EventType::InstancePreempted => "instance.preempted",
            EventType::InstanceHostLost => "instance.host_lost",
            EventType::InstanceFailed => "instance.failed",
            EventType::InstanceDestroyed => "instance.destroyed",
            EventType::OrderFailed => "order.failed",
            EventType::BalanceLow => "balance.low",
            EventType::BalanceExhausted => "balance.exhausted",
            EventType::SpendCapReached => "spend_cap.reached",
            EventType::TopUpSucceeded => "top_up.succeeded",
            EventType::InvoiceFinalized => "invoice.finalized",
            EventType::InvoicePaid => "invoice.paid",
            EventType::HostVerificationChanged => "host.verification_changed",
            EventType::MachineOnline => "machine.online",
            EventType::MachineOffline => "machine.offline",
            EventType::MachineRented => "machine.rented",
            EventType::MachineReleased => "machine.released",
            EventType::PayoutPaid => "payout.paid",
            EventType::PayoutFailed => "payout.failed",
            EventType::StatementFinalized => "statement.finalized",
            EventType::EndpointDisabled => "endpoint.disabled",
            EventType::Test => "webhook.test",
        }
    }

    pub fn parse(raw: &str) -> Option<EventType> {
        EventType::ALL.into_iter().find(|t| t.as_str() == raw)
    }

    /// What the event says, for the catalog shown to users.
    pub fn description(self) -> &'static str {
        match self {
            EventType::InstanceCreated => "An order became an instance (state pending).",
            EventType::InstanceRunning => "An instance is running and can be logged in to.",
            EventType::InstanceStopped => "An instance stopped; its disk is kept.",
            EventType::InstancePreempted => {
                "An interruptible instance's GPUs were taken by a higher bid."
            }
            EventType::InstanceHostLost => "An instance's host went silent.",
            EventType::InstanceFailed => "An instance that had been placed failed.",
            EventType::InstanceDestroyed => "An instance and its disk are gone.",
            EventType::OrderFailed => "An order failed before it was placed on a machine.",
            EventType::BalanceLow => "The prepaid balance lasts less than the warning time.",
            EventType::BalanceExhausted => "The prepaid balance went below zero.",
            EventType::SpendCapReached => "This month's spend reached the monthly budget.",
            EventType::TopUpSucceeded => "A card top-up was credited to the prepaid balance.",
            EventType::InvoiceFinalized => "An invoice of a period was finalized and numbered.",
            EventType::InvoicePaid => {
                "An invoice was paid (by the balance, a top-up or an operator)."
            }
            EventType::HostVerificationChanged => {
                "An operator verified, suspended or unverified the host (its machines' badge)."
            }
            EventType::MachineOnline => {
                "One of the host's machines heartbeats again after going offline."
            }
            EventType::MachineOffline => {
                "One of the host's listed machines stopped heartbeating past the grace period."
            }
            EventType::MachineRented => "GPUs of one of the host's machines were rented.",
            EventType::MachineReleased => {
                "A rental gave GPUs of one of the host's machines back (ended or preempted)."
            }
            EventType::PayoutPaid => "A payout was transferred to the host's Stripe account.",
            EventType::PayoutFailed => {
                "Stripe refused a payout; the earnings stay on the host's account."
            }
            EventType::StatementFinalized => "A statement of the host's earnings was finalized.",
            EventType::EndpointDisabled => {
                "Another endpoint of the tenant was disabled after failing for days."
            }
            EventType::Test => "A test ping sent on request to one endpoint.",
        }
    }

    /// Whether an endpoint can subscribe to the type (a test ping is sent
    /// to one endpoint on request, never by subscription).
    pub fn subscribable(self) -> bool {
        self != EventType::Test
    }
}

impl std::fmt::Display for EventType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateEndpointRequest {
    pub url: String,
    #[serde(default)]
    pub description: String,
    /// Empty: every type.
    #[serde(default)]
    pub event_types: Vec<String>,
}

/// A change to an endpoint; absent fields stay as they are.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct UpdateEndpointRequest {
    pub url: Option<String>,
    pub description: Option<String>,
    pub event_types: Option<Vec<String>>,
    pub enabled: Option<bool>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Endpoint {
    pub id: WebhookEndpointId,
    pub tenant_id: TenantId,
    pub url: String,
    pub description: String,
    pub event_types: Vec<String>,
    pub enabled: bool,
    pub disabled_reason: Option<String>,
    pub disabled_at: Option<DateTime<Utc>>,
    /// Until when the previous secret still signs (after a rotation).
    pub previous_secret_until: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// An endpoint with its signing secret: answered once, when the endpoint
/// is created or its secret rotated.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EndpointSecret {
    pub endpoint: Endpoint,
    pub secret: String,
}

/// The reply to deleting an endpoint: always `deleted: true`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointDeleted {
    pub deleted: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Attempt {
    pub started_at: DateTime<Utc>,
    pub status_code: Option<i32>,
    pub succeeded: bool,
    pub latency_ms: i32,
    /// The start of the response body (at most 1 KiB).
    pub response_head: String,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Delivery {
    pub id: DeliveryId,
    /// The `webhook-id` header of every attempt.
    pub webhook_id: String,
    pub endpoint_id: WebhookEndpointId,
    pub event_type: String,
    /// `pending`, `delivered` or `failed`.
    pub status: String,
    pub attempts: i32,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub payload: serde_json::Value,
    /// Newest first, at most 20.
    pub attempt_log: Vec<Attempt>,
}

/// `GET /internal/tenants/{tenant_id}/webhooks/deliveries` query.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DeliveriesQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_id: Option<WebhookEndpointId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
}
