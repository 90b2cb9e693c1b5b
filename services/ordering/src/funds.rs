//! Renters out of money. Billing posts every settlement of a running rental
//! and, when a charge takes a prepaid balance below zero, announces it
//! (`billing.balance.exhausted`, from the posting's transaction). Here every
//! running instance of that tenant is stopped, exactly as the renter's own
//! stop would (billing ends at the stop, the disk stays; the renter tops up
//! and starts again). A renter whose usage this month reached its monthly
//! budget (`billing.balance.cap_reached`, announced the same way) is stopped
//! the same way. Idempotent: a stopped instance stays stopped, and a
//! redelivered event finds nothing left running.

use contracts::Envelope;
use contracts::events::{BalanceExhausted, SPEND_CAP_REACHED, SpendCapReached};
use diesel::prelude::*;
use platform::Db;
use platform::consumer::HandlerError;
use schema::ordering::instances;
use uuid::Uuid;

use crate::state::InstanceState;
use crate::{Deps, Error};

const REASON: &str = "stopped: prepaid balance exhausted";
const CAP_REASON: &str = "stopped: monthly spend cap reached";

pub(crate) async fn handle(db: &Db, deps: &Deps, envelope: Envelope) -> Result<(), HandlerError> {
    let undecodable = |e: serde_json::Error| {
        HandlerError::Permanent(format!("undecodable {} event: {e}", envelope.kind))
    };
    let (tenant_id, reason, detail) = if envelope.kind == SPEND_CAP_REACHED {
        let event: SpendCapReached = envelope.payload().map_err(undecodable)?;
        (
            event.tenant_id,
            CAP_REASON,
            format!("spent {} of {}", event.spent, event.monthly_cap),
        )
    } else {
        let event: BalanceExhausted = envelope.payload().map_err(undecodable)?;
        (
            event.tenant_id,
            REASON,
            format!("balance {}", event.balance),
        )
    };
    let running: Vec<Uuid> = db
        .run(move |conn| {
            instances::table
                .filter(instances::tenant_id.eq(tenant_id))
                .filter(instances::state.eq(InstanceState::Running.as_str()))
                .select(instances::id)
                .load(conn)
                .map_err(Error::from)
        })
        .await
        .map_err(|e| HandlerError::Transient(e.to_string()))?;
    for id in running {
        match crate::instances::stop_because(db, deps, id, tenant_id, reason).await {
            Ok(_) => {
                tracing::warn!(instance.id = %id, tenant.id = %tenant_id, %detail, "instance {reason}")
            }
            // Stopped or destroyed meanwhile by someone else: nothing to do.
            Err(Error::Conflict(_)) => {}
            Err(e) => return Err(HandlerError::Transient(e.to_string())),
        }
    }
    Ok(())
}
