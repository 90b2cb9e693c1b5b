//! What each event on the broker becomes for a tenant's endpoints: its
//! webhook type and its `data`, in the versioned shapes of
//! `api-specs/webhooks.yaml`. Fields are copied one by one, so nothing an
//! internal event carries (a renter's env, a host's token) reaches a
//! receiver by accident.

use contracts::Envelope;
use contracts::events::{
    BALANCE_EXHAUSTED, BalanceExhausted, INSTANCE_EVENT, InstanceEvent, RUNWAY_LOW, RunwayLow,
    SPEND_CAP_REACHED, SpendCapReached,
};
use contracts::webhooks::EventType;
use platform::consumer::HandlerError;
use serde_json::{Value, json};
use uuid::Uuid;

/// The broker routing keys the service consumes.
pub const BINDINGS: [&str; 4] = [
    INSTANCE_EVENT,
    RUNWAY_LOW,
    BALANCE_EXHAUSTED,
    SPEND_CAP_REACHED,
];

/// The version of every payload shape below; a change that is not an
/// added field makes a new version (api-specs/webhooks.yaml).
pub const PAYLOAD_VERSION: u32 = 1;

/// One event for one tenant's endpoints.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    pub tenant_id: Uuid,
    pub event_type: EventType,
    pub data: Value,
}

fn undecodable(kind: &str, e: serde_json::Error) -> HandlerError {
    HandlerError::Permanent(format!("{kind}: {e}"))
}

/// The webhook event a broker message is, if any.
pub fn translate(envelope: &Envelope) -> Result<Option<Outgoing>, HandlerError> {
    match envelope.kind.as_str() {
        INSTANCE_EVENT => {
            let event: InstanceEvent = envelope
                .payload()
                .map_err(|e| undecodable(INSTANCE_EVENT, e))?;
            Ok(instance(&event))
        }
        RUNWAY_LOW => {
            let e: RunwayLow = envelope.payload().map_err(|e| undecodable(RUNWAY_LOW, e))?;
            Ok(Some(Outgoing {
                tenant_id: e.tenant_id,
                event_type: EventType::BalanceLow,
                data: json!({
                    "tenant_id": e.tenant_id,
                    "balance": e.balance,
                    "currency": e.currency,
                    "burn_rate_per_hour": e.burn_rate_per_hour,
                    "runway_seconds": e.runway_seconds,
                    "warn_below_seconds": e.warn_below_seconds,
                    "at": e.at,
                    "sequence": e.at.timestamp_micros(),
                }),
            }))
        }
        BALANCE_EXHAUSTED => {
            let e: BalanceExhausted = envelope
                .payload()
                .map_err(|e| undecodable(BALANCE_EXHAUSTED, e))?;
            Ok(Some(Outgoing {
                tenant_id: e.tenant_id,
                event_type: EventType::BalanceExhausted,
                data: json!({
                    "tenant_id": e.tenant_id,
                    "balance": e.balance,
                    "currency": e.currency,
                    "at": e.at,
                    "sequence": e.at.timestamp_micros(),
                }),
            }))
        }
        SPEND_CAP_REACHED => {
            let e: SpendCapReached = envelope
                .payload()
                .map_err(|e| undecodable(SPEND_CAP_REACHED, e))?;
            Ok(Some(Outgoing {
                tenant_id: e.tenant_id,
                event_type: EventType::SpendCapReached,
                data: json!({
                    "tenant_id": e.tenant_id,
                    "month": e.month,
                    "spent": e.spent,
                    "monthly_cap": e.monthly_cap,
                    "currency": e.currency,
                    "at": e.at,
                    "sequence": e.at.timestamp_micros(),
                }),
            }))
        }
        _ => Ok(None),
    }
}

/// States an instance has not been placed in yet: failing there is the
/// order failing.
const UNPLACED: [&str; 2] = ["pending", "allocating"];

/// A state change of an instance, as its webhook type; other instance
/// events (provisioning steps, rule notices) and passing states
/// (`allocating`, `stopping`, ...) send nothing.
fn instance(event: &InstanceEvent) -> Option<Outgoing> {
    if event.kind != "state_changed" {
        return None;
    }
    let to = event.to_state.as_deref()?;
    let event_type = match (event.from_state.as_deref(), to) {
        (None, _) => EventType::InstanceCreated,
        (_, "running") => EventType::InstanceRunning,
        (_, "stopped") => EventType::InstanceStopped,
        (_, "preempted") => EventType::InstancePreempted,
        (_, "host_lost") => EventType::InstanceHostLost,
        (Some(from), "failed") if UNPLACED.contains(&from) => EventType::OrderFailed,
        (_, "failed") => EventType::InstanceFailed,
        (_, "destroyed") => EventType::InstanceDestroyed,
        _ => return None,
    };
    let i = &event.instance;
    Some(Outgoing {
        tenant_id: event.tenant_id,
        event_type,
        data: json!({
            "instance_id": i.id,
            "order_id": i.order_id,
            "tenant_id": event.tenant_id,
            // The instance's own event number: a receiver orders by it.
            "sequence": event.seq,
            "from_state": event.from_state,
            "state": to,
            "reason": event.reason,
            "machine_id": i.machine_id,
            "gpu_model": i.gpu_model,
            "gpu_count": i.gpu_count,
            "rental_type": i.rental_type,
            "price_per_hour": i.price_per_hour_total,
            "currency": i.currency,
            "at": event.at,
        }),
    })
}

/// The Standard Webhooks body of an event.
pub fn body(event_type: EventType, at: chrono::DateTime<chrono::Utc>, data: &Value) -> Value {
    json!({
        "type": event_type.as_str(),
        "version": PAYLOAD_VERSION,
        "timestamp": at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "data": data,
    })
}
