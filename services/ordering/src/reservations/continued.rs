//! An instance that goes on after its block (`catalog.allocation.continued`,
//! docs/reservations.md "When the block ends"). The catalog has already
//! turned the block's allocation into an on-demand rental of the same GPUs
//! at the block's end; here ordering makes the renter's side agree:
//!
//! 1. the instance's GPUs now count against the renter's quota like any
//!    on-demand rental's: a hold under the allocation's key, at the team of
//!    the reservation's hold, which it takes over once the reservation is
//!    over (`moves`);
//! 2. in one transaction with the inbox record, the run inside the block is
//!    closed at the block's end (`ordering.instance.stopped`) and the next
//!    opens at that instant at the on-demand price (`ordering.instance.
//!    running`, `run_seq + 1`), so metering bills the block's seconds at 0
//!    and every second after it at the price, each second once;
//! 3. when the quota refuses, the instance is stopped at the block's end
//!    instead (as if it had not asked), and its GPUs go back.
//!
//! A redelivery finds the hold already taken (quota is idempotent by key)
//! and the inbox record, and changes nothing.

use chrono::{DateTime, Utc};
use contracts::api::{QuotaReservation, ReserveQuotaRequest};
use contracts::events::AllocationContinued;
use contracts::ids::OrderId;
use contracts::states::{InstanceEventKind, InstanceState};
use contracts::{Envelope, ErrorCode};
use diesel::prelude::*;
use platform::Db;
use platform::consumer::HandlerError;
use rust_decimal::Decimal;
use schema::ordering::instances;
use uuid::Uuid;

use crate::instances::{InstanceRow, current_holding_key, lock, publish_running, publish_stopped};
use crate::{Deps, Error, SCHEMA};

/// What the quota said about the instance going on.
enum Admission {
    Admitted,
    Refused(String),
}

pub(crate) async fn continued(
    db: &Db,
    deps: &Deps,
    envelope: Envelope,
) -> Result<(), HandlerError> {
    let event: AllocationContinued = envelope
        .payload()
        .map_err(|e| HandlerError::Permanent(format!("undecodable continuation: {e}")))?;
    let transient = |e: Error| HandlerError::Transient(e.to_string());
    let key = event.allocation_key;
    let found = {
        let event = event.clone();
        db.run(move |conn| current(conn, &event)).await
    }
    .map_err(transient)?;
    // Only an instance still on this allocation goes on; anything else gives
    // the GPUs back below.
    let admission = match &found {
        Some((row, true)) => admit(db, deps, row, &event).await.map_err(transient)?,
        _ => Admission::Refused("the instance no longer runs on these GPUs".into()),
    };
    let events = deps.config.events_exchange.clone();
    let commands = deps.config.commands_exchange.clone();
    let applied = {
        let event = event.clone();
        let admitted = matches!(admission, Admission::Admitted);
        let why = match &admission {
            Admission::Refused(why) => why.clone(),
            Admission::Admitted => String::new(),
        };
        db.tx(move |conn| {
            if !platform::consumer::claim(conn, SCHEMA, &envelope)? {
                return Ok(None);
            }
            let Some((row, true)) = current(conn, &event)? else {
                return Ok(Some(false));
            };
            let row = lock(conn, row.id.into_uuid())?;
            if admitted {
                go_on(conn, &events, &row, &event)?;
                Ok(Some(true))
            } else {
                let reason = format!("reservation ended; not continued on demand: {why}");
                crate::preempted::preempt_instance(
                    conn,
                    &events,
                    &commands,
                    &row,
                    row.state,
                    event.continued_at,
                    &reason,
                )?;
                Ok(Some(false))
            }
        })
        .await
        .map_err(transient)?
    };
    // Not going on (or a redelivery of a refusal, which may have crashed
    // before this): the GPUs and any quota taken for them go back; both
    // idempotent. A redelivery of a continuation that went on keeps them.
    let release = match applied {
        Some(went_on) => !went_on,
        None => !matches!(admission, Admission::Admitted),
    };
    if release {
        crate::holdings::release_holdings(deps, OrderId(key))
            .await
            .map_err(transient)?;
    }
    Ok(())
}

/// The instance on `event`'s allocation, and whether it still runs (or is
/// starting) on it.
fn current(
    conn: &mut PgConnection,
    event: &AllocationContinued,
) -> Result<Option<(InstanceRow, bool)>, Error> {
    let id = crate::store::instance_of_allocation(conn, event.instance_id, event.allocation_key)?;
    let Some(row) = id
        .map(|id| crate::store::load(conn, id))
        .transpose()?
        .flatten()
    else {
        return Ok(None);
    };
    // A lost host's instance keeps its allocation: it goes on (at the price,
    // from its next run when the host is back) or is preempted like the rest.
    let on_it = matches!(
        row.state,
        InstanceState::Running | InstanceState::Provisioning | InstanceState::HostLost
    ) && row.tenant_id == event.tenant_id
        && current_holding_key(conn, &row)? == event.allocation_key;
    Ok(Some((row, on_it)))
}

/// Holds quota for the instance's GPUs at the on-demand price, under the
/// allocation's key. Over the reservation's end its hold moves to this one
/// (the same team, released in the same transaction); a refusal is the
/// quota's message.
async fn admit(
    db: &Db,
    deps: &Deps,
    row: &InstanceRow,
    event: &AllocationContinued,
) -> Result<Admission, Error> {
    let reservation_id = event.reservation_id.into_uuid();
    let root = db
        .run(move |conn| super::store::load(conn, reservation_id))
        .await?;
    let over = contracts::time::now() >= root.ends_at;
    let request = ReserveQuotaRequest {
        order_id: OrderId(event.allocation_key),
        tenant_id: row.tenant_id,
        gpu_count: row.gpu_count,
        gpu_model: row.gpu_model.clone(),
        hourly_rate: event.price_per_gpu_hour * Decimal::from(row.gpu_count),
        team_id: None,
        renews: (!over).then_some(reservation_id),
        moves: over.then_some(reservation_id),
        gpu_eighths: None,
    };
    match deps
        .quota
        .call(contracts::endpoints::quota::RESERVE, (), &request)
        .await
    {
        Ok(QuotaReservation { released: true, .. }) => Ok(Admission::Refused(
            "its quota hold was already released".into(),
        )),
        Ok(_) => Ok(Admission::Admitted),
        Err(e) if matches!(e.code, ErrorCode::QuotaExceeded | ErrorCode::Validation) => {
            Ok(Admission::Refused(format!("quota: {}", e.message)))
        }
        Err(e) => Err(e.into()),
    }
}

/// Closes the run inside the block at its end and opens the next at the
/// on-demand price; a starting instance, or one whose host is lost, only
/// takes the price (its next run opens when it is ready or the host is
/// back, after the block).
fn go_on(
    conn: &mut PgConnection,
    events: &str,
    row: &InstanceRow,
    event: &AllocationContinued,
) -> Result<(), Error> {
    let at: DateTime<Utc> = event.continued_at;
    let price = event.price_per_gpu_hour;
    let running = row.state == InstanceState::Running;
    let run_seq = if running {
        row.run_seq + 1
    } else {
        row.run_seq
    };
    if running {
        publish_stopped(conn, events, row, row.run_seq, at, "reservation ended")?;
    }
    diesel::update(instances::table.find(row.id))
        .set((
            instances::price_per_gpu_hour.eq(price),
            instances::reservation_id.eq(None::<Uuid>),
            instances::continue_up_to_per_gpu_hour.eq(None::<Decimal>),
            instances::run_seq.eq(run_seq),
        ))
        .execute(conn)?;
    if running {
        diesel::update(instances::table.find(row.id))
            .set(instances::running_at.eq(at))
            .execute(conn)?;
        let moved = InstanceRow {
            price_per_gpu_hour: price,
            reservation_id: None,
            continue_up_to_per_gpu_hour: None,
            run_seq,
            ..row.clone()
        };
        publish_running(conn, events, &moved, run_seq, at)?;
    }
    crate::events::record(
        conn,
        row.id.into_uuid(),
        InstanceEventKind::RuleEnforced,
        crate::events::Detail {
            reason: Some(&format!(
                "reservation ended at {}; the instance goes on on demand at {} {} per GPU-hour",
                contracts::time::format(at),
                price.normalize(),
                event.currency
            )),
            dedupe_key: Some(format!("continued:{}", event.allocation_key)),
            ..Default::default()
        },
        at,
    )?;
    tracing::info!(instance.id = %row.id, price = %price, "instance goes on on demand after its block");
    Ok(())
}
