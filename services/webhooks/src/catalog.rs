//! What each event on the broker becomes for a tenant's endpoints: its
//! webhook type and its `data`, in the versioned shapes of
//! `api-specs/webhooks.yaml`. Fields are copied one by one, so nothing an
//! internal event carries (a renter's env, a host's token) reaches a
//! receiver by accident.

use contracts::Envelope;
use contracts::events::{
    BALANCE_EXHAUSTED, BalanceExhausted, HOST_VERIFICATION, HostVerification, INSTANCE_EVENT,
    INVOICE_FINALIZED, INVOICE_PAID, InstanceEvent, InvoiceChanged, MACHINE_OFFLINE,
    MACHINE_ONLINE, MACHINE_RELEASED, MACHINE_RENTED, MachineLiveness, MachineRental,
    PAYOUT_FAILED, PAYOUT_PAID, PayoutSettled, RUNWAY_LOW, RunwayLow, SPEND_CAP_REACHED,
    STATEMENT_FINALIZED, SpendCapReached, StatementFinalized, TOP_UP_SUCCEEDED, TopUpSucceeded,
};
use contracts::ids::TenantId;
use contracts::states::{InstanceEventKind, InstanceState};
use contracts::webhooks::EventType;
use platform::consumer::HandlerError;
use serde_json::{Value, json};

/// The broker routing keys the service consumes.
pub const BINDINGS: [&str; 15] = [
    INSTANCE_EVENT,
    RUNWAY_LOW,
    BALANCE_EXHAUSTED,
    SPEND_CAP_REACHED,
    TOP_UP_SUCCEEDED,
    MACHINE_ONLINE,
    MACHINE_OFFLINE,
    MACHINE_RENTED,
    MACHINE_RELEASED,
    PAYOUT_PAID,
    PAYOUT_FAILED,
    INVOICE_FINALIZED,
    INVOICE_PAID,
    STATEMENT_FINALIZED,
    HOST_VERIFICATION,
];

/// The version of every payload shape below; a change that is not an
/// added field makes a new version (api-specs/webhooks.yaml).
pub const PAYLOAD_VERSION: u32 = 1;

/// One event for one tenant's endpoints.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    pub tenant_id: TenantId,
    pub event_type: EventType,
    pub data: Value,
}

fn undecodable(kind: &str, e: serde_json::Error) -> HandlerError {
    HandlerError::Permanent(format!("{kind}: {e}"))
}

/// The webhook event a broker message is, if any. `sequence` is the
/// publisher's number of the event within its resource (the instance, the
/// invoice, the machine, the renter's balance, ...: contracts::events::resource),
/// increasing in the order the changes committed, so a receiver orders one
/// resource's events by it whatever order they are delivered in.
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
                    "sequence": e.sequence,
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
                    "sequence": e.sequence,
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
                    "sequence": e.sequence,
                }),
            }))
        }
        TOP_UP_SUCCEEDED => {
            let e: TopUpSucceeded = envelope
                .payload()
                .map_err(|e| undecodable(TOP_UP_SUCCEEDED, e))?;
            Ok(Some(Outgoing {
                tenant_id: e.tenant_id,
                event_type: EventType::TopUpSucceeded,
                data: json!({
                    "tenant_id": e.tenant_id,
                    "top_up_id": e.top_up_id,
                    "amount": e.amount,
                    "currency": e.currency,
                    "at": e.at,
                    "sequence": e.sequence,
                }),
            }))
        }
        kind @ (INVOICE_FINALIZED | INVOICE_PAID) => {
            let e: InvoiceChanged = envelope.payload().map_err(|e| undecodable(kind, e))?;
            let event_type = if kind == INVOICE_FINALIZED {
                EventType::InvoiceFinalized
            } else {
                EventType::InvoicePaid
            };
            Ok(Some(Outgoing {
                tenant_id: e.tenant_id,
                event_type,
                data: json!({
                    "tenant_id": e.tenant_id,
                    "invoice_id": e.invoice_id,
                    "number": e.number,
                    "total": e.total,
                    "currency": e.currency,
                    "status": e.status,
                    "period_start": e.period_start,
                    "period_end": e.period_end,
                    "at": e.at,
                    "sequence": e.sequence,
                }),
            }))
        }
        HOST_VERIFICATION => {
            let e: HostVerification = envelope
                .payload()
                .map_err(|e| undecodable(HOST_VERIFICATION, e))?;
            Ok(Some(Outgoing {
                tenant_id: e.host_tenant_id,
                event_type: EventType::HostVerificationChanged,
                data: json!({
                    "host_tenant_id": e.host_tenant_id,
                    "verification": e.verification,
                    "reason": e.reason,
                    "at": e.at,
                    "sequence": e.sequence,
                }),
            }))
        }
        STATEMENT_FINALIZED => {
            let e: StatementFinalized = envelope
                .payload()
                .map_err(|e| undecodable(STATEMENT_FINALIZED, e))?;
            Ok(Some(Outgoing {
                tenant_id: e.host_tenant_id,
                event_type: EventType::StatementFinalized,
                data: json!({
                    "host_tenant_id": e.host_tenant_id,
                    "statement_id": e.statement_id,
                    "number": e.number,
                    "earnings": e.earnings,
                    "currency": e.currency,
                    "period_start": e.period_start,
                    "period_end": e.period_end,
                    "at": e.at,
                    "sequence": e.sequence,
                }),
            }))
        }
        kind @ (MACHINE_ONLINE | MACHINE_OFFLINE) => {
            let e: MachineLiveness = envelope.payload().map_err(|e| undecodable(kind, e))?;
            let event_type = if e.online {
                EventType::MachineOnline
            } else {
                EventType::MachineOffline
            };
            Ok(Some(Outgoing {
                tenant_id: e.host_tenant_id,
                event_type,
                data: json!({
                    "host_tenant_id": e.host_tenant_id,
                    "machine_id": e.machine_id,
                    "online": e.online,
                    "silent_since": e.silent_since,
                    "back_at": e.back_at,
                    "at": e.at,
                    "sequence": e.sequence,
                }),
            }))
        }
        kind @ (MACHINE_RENTED | MACHINE_RELEASED) => {
            let e: MachineRental = envelope.payload().map_err(|e| undecodable(kind, e))?;
            let event_type = if kind == MACHINE_RENTED {
                EventType::MachineRented
            } else {
                EventType::MachineReleased
            };
            Ok(Some(Outgoing {
                tenant_id: e.host_tenant_id,
                event_type,
                data: json!({
                    "host_tenant_id": e.host_tenant_id,
                    "machine_id": e.machine_id,
                    "allocation_id": e.allocation_id,
                    "gpu_count": e.gpu_count,
                    "preempted": e.preempted,
                    "at": e.at,
                    "sequence": e.sequence,
                    // A MIG slice's profile and placement; null for whole GPUs.
                    "mig": e.mig.as_ref().map(|m| json!({
                        "profile": m.profile,
                        "gpu_index": m.gpu_index,
                        "start": m.start,
                        "size": m.size,
                    })),
                }),
            }))
        }
        kind @ (PAYOUT_PAID | PAYOUT_FAILED) => {
            let e: PayoutSettled = envelope.payload().map_err(|e| undecodable(kind, e))?;
            let event_type = if kind == PAYOUT_PAID {
                EventType::PayoutPaid
            } else {
                EventType::PayoutFailed
            };
            Ok(Some(Outgoing {
                tenant_id: e.host_tenant_id,
                event_type,
                data: json!({
                    "host_tenant_id": e.host_tenant_id,
                    "payout_id": e.payout_id,
                    "amount": e.amount,
                    "currency": e.currency,
                    "status": e.status,
                    "stripe_transfer_id": e.stripe_transfer_id,
                    "failure_reason": e.failure_reason,
                    "at": e.at,
                    "sequence": e.sequence,
                }),
            }))
        }
        _ => Ok(None),
    }
}

/// States an instance has not been placed in yet: failing there is the
/// order failing.
const UNPLACED: [InstanceState; 2] = [InstanceState::Pending, InstanceState::Allocating];

/// A state change of an instance, as its webhook type; other instance
/// events (provisioning steps, rule notices) and passing states
/// (`allocating`, `stopping`, ...) send nothing.
fn instance(event: &InstanceEvent) -> Option<Outgoing> {
    if event.kind != InstanceEventKind::StateChanged {
        return None;
    }
    let to = event.to_state?;
    let event_type = match (event.from_state, to) {
        (None, _) => EventType::InstanceCreated,
        (_, InstanceState::Running) => EventType::InstanceRunning,
        (_, InstanceState::Stopped) => EventType::InstanceStopped,
        (_, InstanceState::Preempted) => EventType::InstancePreempted,
        (_, InstanceState::HostLost) => EventType::InstanceHostLost,
        (Some(from), InstanceState::Failed) if UNPLACED.contains(&from) => EventType::OrderFailed,
        (_, InstanceState::Failed) => EventType::InstanceFailed,
        (_, InstanceState::Destroyed) => EventType::InstanceDestroyed,
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

#[cfg(test)]
mod tests {
    use super::*;
    use contracts::api::Instance;
    use contracts::ids::{InstanceId, TenantId};
    use uuid::Uuid;

    /// api-specs/webhooks.yaml documents exactly the types there are.
    #[test]
    fn the_published_catalog_lists_every_type() {
        let spec = include_str!("../../../api-specs/webhooks.yaml");
        let (_, listed) = spec
            .split_once("\nwebhooks:\n")
            .expect("a webhooks section");
        let names: Vec<&str> = listed
            .lines()
            .filter(|l| l.starts_with("  ") && !l.starts_with("   ") && l.ends_with(':'))
            .map(|l| l.trim().trim_end_matches(':'))
            .collect();
        let expected: Vec<&str> = EventType::ALL.iter().map(|t| t.as_str()).collect();
        assert_eq!(names, expected);
    }

    fn event(from: Option<&str>, to: &str) -> InstanceEvent {
        let instance: Instance = serde_json::from_value(json!({
            "id": Uuid::nil(), "order_id": Uuid::nil(), "tenant_id": Uuid::nil(),
            "machine_id": Uuid::nil(), "gpu_model": "RTX 4090", "gpu_count": 1,
            "rental_type": "on_demand", "price_per_gpu_hour": "0.40",
            "price_per_hour_total": "0.40", "currency": "USD", "status": to,
            "status_reason": null, "allowed_actions": [], "image": "img",
            "run_seq": 1, "running_at": null, "stopped_at": null,
            "created_at": "2026-12-06T00:00:00Z", "updated_at": "2026-12-06T00:00:00Z",
            "env": {"SECRET": "hunter2"}
        }))
        .expect("instance");
        InstanceEvent {
            instance_id: InstanceId(Uuid::nil()),
            tenant_id: TenantId(Uuid::nil()),
            seq: 3,
            kind: InstanceEventKind::StateChanged,
            from_state: from.map(|s| InstanceState::parse(s).expect("a state")),
            to_state: Some(InstanceState::parse(to).expect("a state")),
            reason: None,
            step: None,
            rule: None,
            instance,
            at: chrono::Utc::now(),
        }
    }

    #[test]
    fn state_changes_become_their_webhook_types() {
        let cases = [
            (None, "pending", Some(EventType::InstanceCreated)),
            (
                Some("provisioning"),
                "running",
                Some(EventType::InstanceRunning),
            ),
            (
                Some("stopping"),
                "stopped",
                Some(EventType::InstanceStopped),
            ),
            (
                Some("running"),
                "preempted",
                Some(EventType::InstancePreempted),
            ),
            (
                Some("running"),
                "host_lost",
                Some(EventType::InstanceHostLost),
            ),
            (Some("allocating"), "failed", Some(EventType::OrderFailed)),
            (Some("pending"), "failed", Some(EventType::OrderFailed)),
            (
                Some("provisioning"),
                "failed",
                Some(EventType::InstanceFailed),
            ),
            (
                Some("deprovisioning"),
                "destroyed",
                Some(EventType::InstanceDestroyed),
            ),
            (Some("pending"), "allocating", None),
            (Some("running"), "stopping", None),
        ];
        for (from, to, expected) in cases {
            let got = instance(&event(from, to)).map(|o| o.event_type);
            assert_eq!(got, expected, "{from:?} -> {to}");
        }
        let mut step = event(Some("provisioning"), "running");
        step.kind = InstanceEventKind::ProvisioningStep;
        assert_eq!(instance(&step), None);
    }

    #[test]
    fn a_payload_carries_the_sequence_and_nothing_private() {
        let out = instance(&event(Some("provisioning"), "running")).expect("running");
        assert_eq!(out.data["sequence"], 3);
        assert!(!out.data.to_string().contains("hunter2"));
        let body = body(out.event_type, chrono::Utc::now(), &out.data);
        assert_eq!(body["type"], "instance.running");
        assert_eq!(body["version"], 1);
    }
}

#[cfg(test)]
mod money_and_host_events {
    use super::*;
    use contracts::events::{MachineRental, PayoutSettled, TopUpSucceeded};
    use contracts::ids::{MachineId, TenantId};
    use rust_decimal::Decimal;
    use uuid::Uuid;

    fn envelope<P: serde::Serialize>(kind: &str, payload: &P) -> Envelope {
        Envelope::named(kind, chrono::Utc::now(), None, None, payload).unwrap()
    }

    #[test]
    fn money_and_host_events_go_to_their_owner() {
        let (renter, host) = (TenantId::new(), TenantId::new());
        let at = chrono::Utc::now();
        let top_up = TopUpSucceeded {
            tenant_id: renter,
            top_up_id: Uuid::now_v7(),
            amount: Decimal::new(2500, 2),
            currency: "USD".into(),
            at,
            sequence: 4,
        };
        let out = translate(&envelope(TOP_UP_SUCCEEDED, &top_up))
            .unwrap()
            .unwrap();
        assert_eq!(
            (out.tenant_id, out.event_type),
            (renter, EventType::TopUpSucceeded)
        );
        assert_eq!(out.data["amount"], "25.00");
        // The publisher's per-resource number, not a timestamp.
        assert_eq!(out.data["sequence"], 4);

        let rental = MachineRental {
            host_tenant_id: host,
            machine_id: MachineId(Uuid::now_v7()),
            allocation_id: Uuid::now_v7(),
            gpu_count: 2,
            preempted: true,
            at,
            sequence: 7,
            mig: None,
        };
        let out = translate(&envelope(MACHINE_RELEASED, &rental))
            .unwrap()
            .unwrap();
        assert_eq!(
            (out.tenant_id, out.event_type),
            (host, EventType::MachineReleased)
        );
        assert_eq!(out.data["preempted"], true);
        assert_eq!(out.data["sequence"], 7);
        assert_eq!(out.data["mig"], serde_json::Value::Null);
        let slice = MachineRental {
            gpu_count: 1,
            preempted: false,
            mig: Some(contracts::mig::MigSlice {
                profile: "3g.40gb".into(),
                gpu_index: 2,
                start: 4,
                size: 4,
                nvml_profile: 2,
            }),
            ..rental.clone()
        };
        let out = translate(&envelope(MACHINE_RENTED, &slice))
            .unwrap()
            .unwrap();
        assert_eq!(
            out.data["mig"],
            json!({ "profile": "3g.40gb", "gpu_index": 2, "start": 4, "size": 4 })
        );
        let out = translate(&envelope(MACHINE_RENTED, &rental))
            .unwrap()
            .unwrap();
        assert_eq!(out.event_type, EventType::MachineRented);

        let payout = PayoutSettled {
            host_tenant_id: host,
            payout_id: Uuid::now_v7(),
            amount: Decimal::new(10_000, 2),
            currency: "USD".into(),
            status: contracts::states::PayoutStatus::Failed,
            stripe_transfer_id: None,
            failure_reason: Some("account closed".into()),
            at,
            sequence: 1,
        };
        let out = translate(&envelope(PAYOUT_FAILED, &payout))
            .unwrap()
            .unwrap();
        assert_eq!(
            (out.tenant_id, out.event_type),
            (host, EventType::PayoutFailed)
        );
        assert_eq!(out.data["failure_reason"], "account closed");
        assert_eq!(out.data["sequence"], 1);
        assert!(
            translate(&envelope("billing.something.else", &payout))
                .unwrap()
                .is_none()
        );
        assert!(matches!(
            translate(&envelope(PAYOUT_PAID, &json!({"nope": 1}))),
            Err(HandlerError::Permanent(_))
        ));
    }

    /// A message published before the sequence was carried (still in a
    /// queue across the upgrade) decodes with sequence 0.
    #[test]
    fn an_older_message_without_a_sequence_has_sequence_zero() {
        let old = json!({
            "host_tenant_id": Uuid::now_v7(), "machine_id": Uuid::now_v7(),
            "online": false, "silent_since": "2026-12-06T00:00:00Z",
            "back_at": null, "at": "2026-12-06T00:01:00Z"
        });
        let out = translate(&envelope(MACHINE_OFFLINE, &old))
            .unwrap()
            .unwrap();
        assert_eq!(out.event_type, EventType::MachineOffline);
        assert_eq!(out.data["sequence"], 0);
    }
}
