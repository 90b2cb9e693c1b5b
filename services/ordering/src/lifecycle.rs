//! Start after stop, and destroy with its deprovisioning.
//!
//! **Start** (`stopped → provisioning → running`): quota and GPUs are taken
//! again on the instance's own machine under a fresh key per provisioning
//! attempt ([`crate::instances::holding_key`]), so a repeated start request
//! is idempotent and a new attempt never collides with the released holdings
//! of an earlier one; then the provisioning command for that attempt leaves
//! with the transition. The provisioner keeps one job per attempt, and
//! `mark_ready` counts the run (`run_seq + 1`), so metering pairs each run's
//! start and stop. A start that fails to provision goes back to `stopped`
//! (the disk is still there) and releases what it took.
//!
//! **Destroy** (`running | stopped → deprovisioning → destroyed`): from
//! running, billing stops first exactly as a stop does (T1 recorded, the
//! `stopped` event for the current run), in the transaction that moves the
//! instance to `deprovisioning` and sends the deprovisioning command. The
//! provisioner revokes credentials, stops the container, unbinds GPUs,
//! detaches the network, wipes the volume and validates the machine clean.
//! Only a clean report releases the GPUs (if still held) and the quota and
//! makes the instance `destroyed`. A failed clean leaves the instance
//! `deprovisioning` with the reason, keeps the capacity out of the market and
//! unlists the machine (the catalog has no maintenance state yet; the host
//! re-lists it after fixing it).

use contracts::api::{
    AllocateRequest, DeprovisioningResult, FundsCheckRequest, HostMachineRequest, Instance,
    QuotaReservation, ReserveQuotaRequest,
};
use contracts::endpoints;
use contracts::events::DeprovisionInstance;
use contracts::ids::{OrderId, TenantId};
use contracts::{ErrorCode, api};
use diesel::prelude::*;
use platform::Db;
use platform::internal::RemoteError;
use rust_decimal::Decimal;
use schema::ordering::instances;
use uuid::Uuid;

use crate::instances::{
    InstanceRow, attempt, current_holding_key, holding_key, load, lock, publish, publish_attempt,
    transition,
};
use crate::{Deps, Error};
use contracts::states::InstanceState;

fn owned(row: Option<InstanceRow>, id: Uuid, tenant_id: TenantId) -> Result<InstanceRow, Error> {
    row.filter(|row| row.tenant_id == tenant_id)
        .ok_or_else(|| Error::NotFound(format!("instance {id} not found")))
}

fn reload(conn: &mut PgConnection, id: Uuid) -> Result<Instance, Error> {
    load(conn, id)?
        .map(api::Instance::from)
        .ok_or_else(|| Error::NotFound(id.to_string()))
}

/// Starts a stopped instance again on the same machine.
pub async fn start(db: &Db, deps: &Deps, id: Uuid, tenant_id: TenantId) -> Result<Instance, Error> {
    let (row, current, slice) = db
        .run(move |conn| {
            let row = owned(load(conn, id)?, id, tenant_id)?;
            let current = attempt(conn, id)?;
            let slice = crate::publishing::held_slice(conn, row.id)?;
            Ok::<_, Error>((row, current, slice))
        })
        .await?;
    match row.state {
        InstanceState::Stopped => {}
        // Already started (a repeated request): answer the instance.
        InstanceState::Provisioning | InstanceState::Running => return Ok(row.into()),
        other => {
            return Err(Error::Conflict(format!(
                "instance is {other}; it can be started only when stopped"
            )));
        }
    }
    let next = current + 1;
    let key = holding_key(row.order_id, next);

    let offer = deps
        .catalog
        .call(endpoints::catalog::OFFER, row.machine_id, &())
        .await
        .map_err(|e| match e.code {
            ErrorCode::NotFound => Error::Conflict(format!(
                "the instance's machine {} is not on the market now (offline or unlisted); \
                 it cannot be started until it is back",
                row.machine_id
            )),
            _ => Error::Remote(e),
        })?;

    // A slice's quota share is its memory slices (eighths of a GPU).
    let eighths = slice.map(|s| i32::from(s.size));
    let (runway, allocation) = match take_holdings(deps, &row, key, eighths).await {
        Ok(taken) => taken,
        Err(error) => {
            if let Err(release_error) = crate::holdings::release_holdings(deps, OrderId(key)).await
            {
                tracing::error!(instance.id = %id, %release_error, "start compensation failed; reconciler must release");
            }
            return Err(error);
        }
    };
    let hourly = row.price_per_gpu_hour * Decimal::from(row.gpu_count);

    let commands = deps.config.commands_exchange.clone();
    let result = db
        .tx(move |conn| -> Result<(InstanceRow, bool), Error> {
            let row = lock(conn, id)?;
            if row.state != InstanceState::Stopped || attempt(conn, id)? != current {
                return Ok((row, false));
            }
            // The catalog preempted this start's GPUs already (its consumer
            // gives back the quota; the GPUs went to the preemptor).
            if crate::holdings::preempted(conn, key)? {
                return Err(Error::Remote(RemoteError {
                    code: ErrorCode::InsufficientCapacity,
                    message: "the GPUs were taken by a higher-priority order while the instance \
                              was starting; start it later or destroy it"
                        .into(),
                    details: None,
                }));
            }
            // The runway of what already runs plus this instance, checked
            // and admitted (`provisioning` counts) under the tenant's runway
            // lock, as an order is (`funds::admit`).
            crate::funds::lock_tenant(conn, row.tenant_id)?;
            let committed = crate::funds::committed_burn(conn, row.tenant_id, None, Some(id))?;
            runway.check(committed, hourly)?;
            let at = contracts::time::now();
            transition(
                conn,
                &row,
                InstanceState::Provisioning,
                Some("start requested"),
                at,
            )?;
            crate::publishing::record_allocation(
                conn,
                contracts::ids::InstanceId(id),
                &allocation,
            )?;
            publish_attempt(conn, &commands, &row, offer.gpu_count, next, false, at)?;
            tracing::info!(instance.id = %id, attempt = next, "instance starting");
            Ok((row, true))
        })
        .await;
    let (latest, started) = match result {
        Ok(done) => done,
        Err(refused) if refused.code() == ErrorCode::InsufficientFunds => {
            // Nothing started: the quota and GPUs just taken go back.
            if let Err(release_error) = crate::holdings::release_holdings(deps, OrderId(key)).await
            {
                tracing::error!(instance.id = %id, %release_error, "start compensation failed; reconciler must release");
            }
            return Err(refused);
        }
        Err(other) => return Err(other),
    };
    if !started {
        // A concurrent start of the same attempt shares the holdings and owns
        // them now; otherwise (a destroy meanwhile) nobody will use them.
        let holding = matches!(
            latest.state,
            InstanceState::Provisioning | InstanceState::Running | InstanceState::Stopping
        );
        let owner = db
            .run(move |conn| current_holding_key(conn, &latest).map_err(Error::from))
            .await?;
        if owner != key || !holding {
            crate::holdings::release_holdings(deps, OrderId(key)).await?;
        }
    }
    db.run(move |conn| reload(conn, id)).await
}

/// Quota, funds, then the GPUs on the instance's own machine, under `key`.
/// Returns what the runway check at the transition needs.
async fn take_holdings(
    deps: &Deps,
    row: &InstanceRow,
    key: Uuid,
    eighths: Option<i32>,
) -> Result<(crate::funds::Runway, contracts::api::Allocation), Error> {
    // An instance on a reservation holds no quota of its own (the
    // reservation's hold counts its GPUs).
    if row.reservation_id.is_none() {
        let _: QuotaReservation = deps
            .quota
            .call(
                contracts::endpoints::quota::RESERVE,
                (),
                &ReserveQuotaRequest {
                    gpu_eighths: eighths,
                    order_id: OrderId(key),
                    tenant_id: row.tenant_id,
                    gpu_count: row.gpu_count,
                    gpu_model: row.gpu_model.clone(),
                    hourly_rate: row.price_per_gpu_hour * Decimal::from(row.gpu_count),
                    team_id: None,
                    // The restarted instance counts against the order's team.
                    renews: Some(row.order_id.into()),
                    moves: None,
                },
            )
            .await?;
    }
    let hourly = row.price_per_gpu_hour * Decimal::from(row.gpu_count);
    let required = contracts::money::rate(deps.settings.min_runway_seconds, hourly);
    let balance = deps
        .billing
        .call(
            endpoints::billing::FUNDS_CHECK,
            (),
            &FundsCheckRequest {
                tenant_id: row.tenant_id,
                required,
            },
        )
        .await?;
    // What already runs next to it is checked at the transition.
    let runway = crate::funds::Runway {
        balance: balance.amount,
        currency: balance.currency,
        runway_seconds: deps.settings.min_runway_seconds,
    };
    let allocation = deps
        .catalog
        .call(
            endpoints::catalog::ALLOCATE,
            (),
            &AllocateRequest {
                reservation_id: row.reservation_id.map(contracts::ids::ReservationId),
                continue_up_to_per_gpu_hour: row.continue_up_to_per_gpu_hour,
                // A slice's instance takes a slice of its profile again
                // (wherever best-fit puts it now).
                mig_profile: row.mig_profile.clone(),
                order_id: OrderId(key),
                tenant_id: row.tenant_id,
                machine_id: row.machine_id,
                gpu_count: row.gpu_count,
                // The instance keeps its rental type and its billed rate (an
                // interruptible one bids it again).
                rental_type: row.rental_type,
                bid_per_gpu_hour: (row.rental_type == contracts::api::RentalType::Interruptible)
                    .then_some(row.price_per_gpu_hour),
                max_price_per_gpu_hour: None,
                instance_id: Some(row.id),
            },
        )
        .await
        .map_err(|e| match e.code {
            ErrorCode::InsufficientCapacity => Error::Remote(RemoteError {
                code: e.code,
                message: format!(
                    "the instance's machine cannot take its {} GPUs back now ({}); \
                     start it later or destroy it",
                    row.gpu_count, e.message
                ),
                details: e.details,
            }),
            ErrorCode::NotFound => Error::Conflict(format!(
                "the instance's machine {} is not on the market now; it cannot be started",
                row.machine_id
            )),
            _ => Error::Remote(e),
        })?;
    Ok((runway, allocation))
}

/// Destroys an instance in any state but `stopping` (a moment's state):
/// billing stops now (if running) and the deprovisioning command leaves in
/// the same transaction. One still provisioning is cancelled: its
/// provisioning job stops and nothing of it stays on the machine.
///
/// On a lost host (billing stopped at its last heartbeat) the renter's quota
/// is given back at once: the renter has nothing there any more and must not
/// wait for a host that may never return. The GPUs stay out of the market
/// until the machine validates clean, as for any destroy.
pub async fn destroy(
    db: &Db,
    deps: &Deps,
    id: Uuid,
    tenant_id: TenantId,
) -> Result<Instance, Error> {
    let events = deps.config.events_exchange.clone();
    let commands = deps.config.commands_exchange.clone();
    let (instance, lost_host_key) = db
        .tx(move |conn| destroy_in_tx(conn, &events, &commands, id, tenant_id))
        .await?;
    if let Some(key) = lost_host_key {
        crate::holdings::release_quota(deps, key).await?;
    }
    Ok(instance)
}

fn destroy_in_tx(
    conn: &mut PgConnection,
    events: &str,
    commands: &str,
    id: Uuid,
    tenant_id: TenantId,
) -> Result<(Instance, Option<Uuid>), Error> {
    {
        let row = owned(Some(lock(conn, id)?), id, tenant_id)?;
        let state = row.state;
        match state {
            // Provisioning: the renter cancels the order (or a start). The
            // provisioner cancels the provisioning job when the
            // deprovisioning command arrives, and the clean report gives the
            // GPUs and quota back; nothing ran, so no GPU time is billed.
            InstanceState::Running
            | InstanceState::Provisioning
            | InstanceState::Stopped
            | InstanceState::Preempted
            | InstanceState::HostLost => {}
            // Idempotent: already on its way out, or gone. A repeat on a lost
            // host gives its quota back again (idempotent). A failed
            // instance holds nothing: there is nothing left to destroy.
            InstanceState::Deprovisioning | InstanceState::Destroyed | InstanceState::Failed => {
                let lost = host_lost_before(conn, id)?;
                let key = current_holding_key(conn, &row)?;
                return Ok((reload(conn, id)?, lost.then_some(key)));
            }
            // Stopping lasts only while the stop gives the GPUs back.
            other => {
                return Err(Error::Conflict(format!(
                    "instance is {other}; destroy it again in a moment, once it is stopped"
                )));
            }
        }
        let at = contracts::time::now();
        let reason = if state == InstanceState::Provisioning {
            "destroy requested while provisioning: provisioning cancelled"
        } else {
            "destroy requested"
        };
        transition(conn, &row, InstanceState::Deprovisioning, Some(reason), at)?;
        if state == InstanceState::HostLost {
            // The renter gave up on the host: the outage ends here.
            crate::instances::publish_downtime(conn, events, &row, at, "destroyed")?;
        }
        if state == InstanceState::Running {
            // Billing stops at the request (T1), exactly as a stop.
            diesel::update(instances::table.find(id))
                .set(instances::stopped_at.eq(at))
                .execute(conn)?;
            crate::instances::publish_stopped(
                conn,
                events,
                &row,
                row.run_seq,
                at,
                "destroy requested",
            )?;
        }
        publish(
            conn,
            commands,
            contracts::events::kinds::DEPROVISION_INSTANCE,
            at,
            row.tenant_id,
            &DeprovisionInstance {
                instance_id: row.id,
                machine_id: row.machine_id,
                tenant_id: row.tenant_id,
            },
        )?;
        tracing::info!(instance.id = %id, from = %state, "instance deprovisioning");
        let key = current_holding_key(conn, &row)?;
        Ok((
            reload(conn, id)?,
            (state == InstanceState::HostLost).then_some(key),
        ))
    }
}

/// Whether the instance was destroyed from `host_lost` (its last transition
/// into `deprovisioning` came from there).
fn host_lost_before(conn: &mut PgConnection, id: Uuid) -> QueryResult<bool> {
    use schema::ordering::instance_transitions as t;
    let from: Option<Option<InstanceState>> = t::table
        .filter(t::instance_id.eq(id))
        .filter(t::to_state.eq(InstanceState::Deprovisioning))
        .order(t::at.desc())
        .select(t::from_state)
        .first(conn)
        .optional()?;
    Ok(from.flatten() == Some(InstanceState::HostLost))
}

/// The provisioner's report. Clean: GPUs (if still held) and quota go back,
/// then `destroyed`. Not clean: the instance stays `deprovisioning` with the
/// reason, its capacity stays out of the market, and the machine is unlisted.
/// Both are idempotent.
pub async fn deprovisioning_result(
    db: &Db,
    deps: &Deps,
    id: Uuid,
    result: DeprovisioningResult,
) -> Result<Instance, Error> {
    let (row, key) = db
        .run(move |conn| {
            let row = load(conn, id)?
                .ok_or_else(|| Error::NotFound(format!("instance {id} not found")))?;
            let key = current_holding_key(conn, &row)?;
            Ok::<_, Error>((row, key))
        })
        .await?;
    if row.state != InstanceState::Deprovisioning {
        return Ok(row.into());
    }
    if result.clean {
        // From running the run's GPUs are still held; from stopped this
        // release finds them released already.
        crate::holdings::release_holdings(deps, OrderId(key)).await?;
        return db
            .tx(move |conn| {
                let row = lock(conn, id)?;
                if row.state == InstanceState::Deprovisioning {
                    transition(
                        conn,
                        &row,
                        InstanceState::Destroyed,
                        Some("machine validated clean"),
                        contracts::time::now(),
                    )?;
                    tracing::info!(instance.id = %id, "instance destroyed");
                }
                reload(conn, id)
            })
            .await;
    }
    let reason = format!(
        "deprovisioning failed; the machine is held for maintenance and its GPUs stay out of the market: {}",
        result.reason.as_deref().unwrap_or("machine not clean")
    );
    let instance = db
        .tx(move |conn| {
            let row = lock(conn, id)?;
            if row.state == InstanceState::Deprovisioning {
                diesel::update(instances::table.find(id))
                    .filter(instances::version.eq(row.version))
                    .set((
                        instances::status_reason.eq(&reason),
                        instances::version.eq(row.version + 1),
                        instances::updated_at.eq(contracts::time::now()),
                    ))
                    .execute(conn)?;
            }
            reload(conn, id)
        })
        .await?;
    tracing::error!(instance.id = %id, machine.id = %row.machine_id, "machine failed clean validation; unlisting it");
    let unlisted = deps
        .catalog
        .call(
            endpoints::catalog::UNLIST_MACHINE,
            row.machine_id,
            &HostMachineRequest {
                host_tenant_id: row.host_tenant_id,
            },
        )
        .await;
    if let Err(error) = unlisted {
        tracing::error!(machine.id = %row.machine_id, %error, "could not unlist a dirty machine");
    }
    Ok(instance)
}
