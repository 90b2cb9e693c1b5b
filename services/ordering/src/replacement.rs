//! Re-placement: an order by constraints whose first run failed to provision
//! is moved to another matching machine instead of failing, while its quota
//! stays held.
//!
//! A renter who asked for "a 4090 under $0.50 in the EU" wants an
//! environment, not that particular host; one broken host should cost them a
//! few seconds, not a failed order. An order for a named offer is for that
//! machine and fails as before (the renter chooses again).
//!
//! The move is a new provisioning attempt (`provisioning → provisioning`),
//! so it holds under the attempt's own key ([`crate::store::holding_key`])
//! and every step is idempotent by it: the provisioner repeats its failure
//! report until ordering has answered, and a repeated report redoes what a
//! crashed one left half-done.
//!
//! 1. quota: the failed attempt's hold *moves* to the new key in one quota
//!    transaction (never released in between);
//! 2. GPUs: the cheapest matching offer on a machine not yet tried, of the
//!    instance's GPU model (its quota is per model), at no more than the
//!    order's maximum price (or, without one, the rate it was committed at);
//! 3. the failed machine's GPUs are released (its leftovers are cleaned up by
//!    the worker's cleanup job, as for any dead never-run attempt);
//! 4. one transaction: the instance moves to the new machine and rates, the
//!    failed machine is remembered, the transition is recorded and the new
//!    provisioning command leaves through the outbox.

use contracts::api::{
    Allocation, CreateOrderRequest, PlacementConstraints, QuotaReservation, RentalType,
    ReserveQuotaRequest,
};
use contracts::endpoints;
use contracts::ids::OrderId;
use diesel::prelude::*;
use platform::Db;
use rust_decimal::Decimal;
use schema::ordering::{instances, orders};
use uuid::Uuid;

use crate::publishing::publish_attempt;
use crate::store::{InstanceRow, attempt, holding_key, load, lock};
use crate::transitions::transition;
use crate::{Deps, Error};
use contracts::states::InstanceState;

/// Machines a first run is tried on before the order fails.
pub const MAX_MACHINES: usize = 3;

/// What a re-placement needs to know about the instance and its order.
struct Failed {
    row: InstanceRow,
    attempt: i32,
    failed_machines: Vec<Uuid>,
    request: CreateOrderRequest,
}

/// Whether a failed run may move: a first run (never running), of an order
/// by constraints, that has machines left to try.
fn eligible(run_seq: i32, constraints: bool, failed_machines: usize) -> bool {
    run_seq == 0 && constraints && failed_machines + 1 < MAX_MACHINES
}

async fn load_failed(db: &Db, id: Uuid) -> Result<Option<Failed>, Error> {
    db.run(move |conn| {
        let Some(row) = load(conn, id)? else {
            return Ok(None);
        };
        if row.state != InstanceState::Provisioning {
            return Ok(None);
        }
        let failed_machines: Vec<Uuid> = instances::table
            .find(id)
            .select(instances::failed_machine_ids)
            .first(conn)?;
        #[allow(clippy::type_complexity)]
        let (user_id, key, max_price, rental_type, bid, constraints): (
            Uuid,
            String,
            Option<Decimal>,
            String,
            Option<Decimal>,
            Option<serde_json::Value>,
        ) = orders::table
            .find(row.order_id)
            .select((
                orders::user_id,
                orders::idempotency_key,
                orders::max_price_per_gpu_hour,
                orders::rental_type,
                orders::bid_per_gpu_hour,
                orders::constraints,
            ))
            .first(conn)?;
        let constraints: Option<PlacementConstraints> =
            constraints.and_then(|c| serde_json::from_value(c).ok());
        // A slice is not re-placed (yet): it fails like an order for a
        // named offer (docs/mig.md).
        let movable = constraints.is_some() && row.mig_profile.is_none();
        if !eligible(row.run_seq, movable, failed_machines.len()) {
            return Ok(None);
        }
        let request = CreateOrderRequest {
            when_block_ends: Default::default(),
            reservation_id: Default::default(),
            mig_profile: None,
            tenant_id: row.tenant_id,
            user_id,
            idempotency_key: key,
            offer_id: None,
            constraints,
            gpu_count: row.gpu_count,
            max_price_per_gpu_hour: max_price,
            rental_type: RentalType::parse(&rental_type).unwrap_or_default(),
            bid_per_gpu_hour: bid,
            ssh_public_key: None,
            image: None,
            team_id: None,
            disk_gib: row.disk_gib,
            // Placement only: the attempt's command reads the instance's.
            command: None,
            env: Vec::new(),
            ports: Vec::new(),
        };
        let attempt = attempt(conn, id)?;
        Ok(Some(Failed {
            row,
            attempt,
            failed_machines,
            request,
        }))
    })
    .await
}

/// Tries to move a failed never-run instance to another machine. Returns the
/// instance when it moved (it is `provisioning` again, elsewhere); None when
/// it may not or could not, and the caller fails it as before.
pub async fn try_replace(
    db: &Db,
    deps: &Deps,
    id: Uuid,
    reason: &str,
) -> Result<Option<contracts::api::Instance>, Error> {
    let Some(failed) = load_failed(db, id).await? else {
        return Ok(None);
    };
    let row = &failed.row;
    let old_key = holding_key(row.order_id, failed.attempt);
    let next = failed.attempt + 1;
    let new_key = holding_key(row.order_id, next);
    let mut avoid = failed.failed_machines.clone();
    avoid.push(row.machine_id.into());

    let moved: Result<QuotaReservation, _> = deps
        .quota
        .call(
            contracts::endpoints::quota::RESERVE,
            (),
            &ReserveQuotaRequest {
                gpu_eighths: None,
                order_id: OrderId(new_key),
                tenant_id: row.tenant_id,
                gpu_count: row.gpu_count,
                gpu_model: row.gpu_model.clone(),
                // Projected at the most the new machine may cost.
                hourly_rate: ceiling(&failed) * Decimal::from(row.gpu_count),
                team_id: None,
                renews: None,
                moves: Some(old_key),
            },
        )
        .await;
    if let Err(e) = moved {
        tracing::warn!(instance.id = %id, error = %e, "quota refused to move the hold; the order fails");
        return Ok(None);
    }

    let Some(allocation) = allocate_elsewhere(deps, &failed, new_key, &avoid).await? else {
        tracing::info!(instance.id = %id, tried = avoid.len(), "no other machine can take the order; it fails");
        crate::holdings::release_holdings(deps, OrderId(new_key)).await?;
        return Ok(None);
    };
    // The failed machine's GPUs go back whatever happens next: the instance
    // either runs elsewhere or fails.
    crate::holdings::release_gpus(deps, old_key).await?;

    let commands = deps.config.commands_exchange.clone();
    let reason = format!(
        "provisioning failed on machine {}: {reason}; re-placed on machine {}",
        row.machine_id, allocation.machine_id
    );
    let current = failed.attempt;
    let outcome = db
        .tx(move |conn| -> Result<Option<contracts::api::Instance>, Error> {
            let row = lock(conn, id)?;
            if row.state != InstanceState::Provisioning || attempt(conn, id)? != current {
                return Ok(None);
            }
            if crate::holdings::preempted(conn, new_key)? {
                return Ok(None);
            }
            let at = contracts::time::now();
            diesel::update(instances::table.find(id))
                .set((
                    instances::machine_id.eq(allocation.machine_id),
                    instances::host_tenant_id.eq(allocation.host_tenant_id),
                    instances::price_per_gpu_hour.eq(allocation.price_per_gpu_hour),
                    instances::storage_price_per_gb_month.eq(allocation.storage_price_per_gb_month),
                    instances::bandwidth_up_price_per_tb.eq(allocation.bandwidth_up_price_per_tb),
                    instances::bandwidth_down_price_per_tb
                        .eq(allocation.bandwidth_down_price_per_tb),
                    instances::currency.eq(&allocation.currency),
                    instances::failed_machine_ids.eq(&avoid),
                ))
                .execute(conn)?;
            diesel::update(orders::table.find(row.order_id))
                .set((
                    orders::machine_id.eq(allocation.machine_id),
                    orders::price_per_gpu_hour.eq(allocation.price_per_gpu_hour),
                    orders::updated_at.eq(at),
                ))
                .execute(conn)?;
            crate::publishing::record_allocation(conn, contracts::ids::InstanceId(id), &allocation)?;
            // The snapshot of the event shows the new machine and rates.
            let moved = load(conn, id)?.ok_or_else(|| Error::NotFound(id.to_string()))?;
            transition(conn, &moved, InstanceState::Provisioning, Some(&reason), at)?;
            publish_attempt(
                conn,
                &commands,
                &moved,
                allocation.machine_gpu_count,
                next,
                true,
                at,
            )?;
            tracing::info!(instance.id = %id, machine.id = %allocation.machine_id, attempt = next, "instance re-placed after a failed first run");
            Ok(load(conn, id)?.map(Into::into))
        })
        .await?;
    if outcome.is_none() {
        // Destroyed, preempted or moved by a concurrent report meanwhile:
        // the current attempt's owner releases its own holdings.
        let owner = db
            .run(move |conn| {
                let row = load(conn, id)?.ok_or_else(|| Error::NotFound(id.to_string()))?;
                Ok::<_, Error>(holding_key(row.order_id, attempt(conn, id)?))
            })
            .await?;
        if owner != new_key {
            crate::holdings::release_holdings(deps, OrderId(new_key)).await?;
        }
    }
    Ok(outcome)
}

/// The most a re-placed instance may cost per GPU-hour: the order's maximum
/// when it gave one, else the rate it was committed at (its quote); an
/// interruptible one bids the same again.
fn ceiling(failed: &Failed) -> Decimal {
    match failed.request.rental_type {
        RentalType::OnDemand => failed
            .request
            .max_price_per_gpu_hour
            .unwrap_or(failed.row.price_per_gpu_hour),
        RentalType::Interruptible => failed.row.price_per_gpu_hour,
    }
}

/// The GPUs under `key` on the cheapest matching machine not in `avoid`, of
/// the instance's model, at no more than its [`ceiling`]; None when no such
/// machine can take them now.
async fn allocate_elsewhere(
    deps: &Deps,
    failed: &Failed,
    key: Uuid,
    avoid: &[Uuid],
) -> Result<Option<Allocation>, Error> {
    let row = &failed.row;
    // A repeated report finds what an earlier one took.
    let mut tried: Vec<Uuid> = avoid.to_vec();
    for _ in 0..crate::holdings::PLACEMENT_ATTEMPTS {
        let offers = crate::holdings::candidates(deps, &failed.request).await?;
        let Some(offer) = offers.into_iter().find(|o| {
            !tried.contains(&o.machine_id.0)
                && o.gpu_model.eq_ignore_ascii_case(&row.gpu_model)
                && (failed.request.rental_type == RentalType::Interruptible
                    || o.price_per_gpu_hour <= ceiling(failed))
        }) else {
            return Ok(None);
        };
        // The catalog enforces the same ceiling under the machine's lock.
        let mut request = crate::holdings::allocate_request(
            OrderId(key),
            &failed.request,
            offer.machine_id,
            row.price_per_gpu_hour,
        );
        request.instance_id = Some(row.id);
        let result = deps
            .catalog
            .call(endpoints::catalog::ALLOCATE, (), &request)
            .await;
        match result {
            Ok(allocation) if !allocation.released => return Ok(Some(allocation)),
            Ok(_) => return Ok(None),
            Err(e) if crate::holdings::lost_race(&e) => {
                tracing::debug!(instance.id = %row.id, machine.id = %offer.machine_id, code = e.code.as_str(), "re-placement lost a race; trying the next offer");
                tried.push(offer.machine_id.into());
            }
            Err(e) => return Err(Error::Remote(e)),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_never_run_constraint_orders_with_machines_left_move() {
        assert!(eligible(0, true, 0));
        assert!(eligible(0, true, MAX_MACHINES - 2));
        assert!(!eligible(0, true, MAX_MACHINES - 1));
        assert!(!eligible(0, false, 0), "an order for a named offer");
        assert!(!eligible(1, true, 0), "a start after a stop");
    }
}
