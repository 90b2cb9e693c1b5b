//! The order saga: resolve the offer and snapshot its price, then reserve
//! quota → check funds → allocate GPUs, each step idempotent by order id and
//! compensated when a later one fails; finally create the instance and the
//! provisioning command in one transaction.
//!
//! The saga runs inside the `createOrder` request, so the renter gets a
//! definite answer (an instance, or the reason there is none). An order whose
//! request died mid-saga is resumed by repeating `createOrder` with the same
//! idempotency key, since every step is idempotent.

use contracts::api::{
    AllocateRequest, Allocation, Balance, CreateOrderRequest, FundsCheckRequest, Instance, Offer,
    QuotaReservation, ReserveQuotaRequest,
};
use contracts::events::{PROVISION_INSTANCE, ProvisionInstance};
use diesel::prelude::*;
use platform::Db;
use rust_decimal::Decimal;
use schema::ordering::{instances, orders};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::instances::{InstanceRow, publish};
use crate::state::InstanceState;
use crate::{Deps, Error};

const DEFAULT_IMAGE: &str = "nvidia/cuda:12.4.1-runtime-ubuntu22.04";
const RENTAL_TYPE: &str = "on_demand";

#[derive(Queryable, Selectable)]
#[diesel(table_name = orders)]
struct OrderRow {
    id: Uuid,
    request_fingerprint: String,
    state: String,
    failure_code: Option<String>,
    failure_reason: Option<String>,
}

fn validate(req: &CreateOrderRequest) -> Result<(), Error> {
    if req.gpu_count < 1 {
        return Err(Error::Validation("gpuCount: at least 1".into()));
    }
    if req.idempotency_key.trim().is_empty() || req.idempotency_key.len() > 200 {
        return Err(Error::Validation(
            "idempotencyKey: 1 to 200 characters".into(),
        ));
    }
    if let Some(max) = req.max_price_per_gpu_hour
        && max < Decimal::ZERO
    {
        return Err(Error::Validation(
            "maxPricePerGpuHour: must not be negative".into(),
        ));
    }
    if let Some(key) = &req.ssh_public_key
        && (key.len() > 16 * 1024 || !key.starts_with("ssh-") && !key.starts_with("ecdsa-"))
    {
        return Err(Error::Validation(
            "sshPublicKey: an OpenSSH public key".into(),
        ));
    }
    if let Some(image) = &req.image
        && (image.is_empty() || image.len() > 500 || image.chars().any(char::is_whitespace))
    {
        return Err(Error::Validation(
            "image: an image reference without spaces".into(),
        ));
    }
    Ok(())
}

/// Same key and same request → same order; same key, other request → conflict.
fn fingerprint(req: &CreateOrderRequest) -> String {
    let canonical = serde_json::json!({
        "offer_id": req.offer_id,
        "gpu_count": req.gpu_count,
        "max_price_per_gpu_hour": req.max_price_per_gpu_hour.map(|p| p.normalize().to_string()),
        "ssh_public_key": req.ssh_public_key,
        "image": req.image,
    });
    hex::encode(Sha256::digest(canonical.to_string().as_bytes()))
}

pub async fn create_order(
    db: &Db,
    deps: &Deps,
    req: CreateOrderRequest,
) -> Result<Instance, Error> {
    validate(&req)?;
    let print = fingerprint(&req);

    // A repeated request: answer what the first one got.
    let previous = find_order(db, req.tenant_id, req.idempotency_key.clone()).await?;
    let order_id = match previous {
        Some(order) => {
            if order.request_fingerprint != print {
                return Err(Error::Conflict(
                    "idempotencyKey: already used for a different order".into(),
                ));
            }
            if let Some(instance) = instance_of(db, order.id).await? {
                return Ok(instance);
            }
            if order.state == InstanceState::Failed.as_str() {
                return Err(failure(order.failure_code.as_deref(), order.failure_reason));
            }
            order.id
        }
        None => {
            let offer: Offer = deps
                .catalog
                .get(&format!("/internal/offers/{}", req.offer_id))
                .await?;
            check_offer(&req, &offer)?;
            insert_order(db, &req, &offer, &print).await?
        }
    };

    // Resume-safe from here on: every call is idempotent by order id.
    let offer: Offer = deps
        .catalog
        .get(&format!("/internal/offers/{}", req.offer_id))
        .await?;
    match run_steps(db, deps, order_id, &req, &offer).await {
        Ok(instance) => Ok(instance),
        Err(error) => {
            // A concurrent request with the same key may have finished the
            // order meanwhile: its instance owns the holdings now.
            if let Some(instance) = instance_of(db, order_id).await? {
                return Ok(instance);
            }
            // Compensate in reverse; both releases are no-ops if never taken.
            if let Err(release_error) = release_holdings(deps, order_id).await {
                tracing::error!(order.id = %order_id, %release_error, "compensation failed; reconciler must release");
            }
            fail_order(db, order_id, &error).await?;
            Err(error)
        }
    }
}

fn check_offer(req: &CreateOrderRequest, offer: &Offer) -> Result<(), Error> {
    if let Some(max) = req.max_price_per_gpu_hour
        && offer.price_per_gpu_hour > max
    {
        return Err(Error::Validation(format!(
            "maxPricePerGpuHour: the offer costs {} {} per GPU-hour, above your maximum of {max}",
            offer.price_per_gpu_hour, offer.currency
        )));
    }
    if req.gpu_count > offer.gpu_count {
        return Err(Error::Validation(format!(
            "gpuCount: the machine has {} GPUs",
            offer.gpu_count
        )));
    }
    Ok(())
}

async fn run_steps(
    db: &Db,
    deps: &Deps,
    order_id: Uuid,
    req: &CreateOrderRequest,
    offer: &Offer,
) -> Result<Instance, Error> {
    let snapshot: Decimal = db
        .run(move |conn| {
            orders::table
                .find(order_id)
                .select(orders::price_per_gpu_hour)
                .first::<Option<Decimal>>(conn)
                .map_err(Error::from)
        })
        .await?
        .unwrap_or(offer.price_per_gpu_hour);

    let _: QuotaReservation = deps
        .quota
        .post(
            "/internal/reservations",
            &ReserveQuotaRequest {
                order_id,
                tenant_id: req.tenant_id,
                gpu_count: req.gpu_count,
            },
        )
        .await?;

    // The balance must cover a minimum runway at the snapshot price.
    let hourly = snapshot * Decimal::from(req.gpu_count);
    let required = contracts::money::rate(deps.config.min_runway_seconds, hourly);
    let _: Balance = deps
        .billing
        .post(
            "/internal/funds-checks",
            &FundsCheckRequest {
                tenant_id: req.tenant_id,
                required,
            },
        )
        .await?;

    set_order_state(db, order_id, InstanceState::Allocating).await?;
    let allocation: Allocation = deps
        .catalog
        .post(
            "/internal/allocations",
            &AllocateRequest {
                order_id,
                tenant_id: req.tenant_id,
                machine_id: offer.machine_id,
                gpu_count: req.gpu_count,
            },
        )
        .await?;

    create_instance(db, deps, order_id, req, offer, snapshot, &allocation).await
}

async fn create_instance(
    db: &Db,
    deps: &Deps,
    order_id: Uuid,
    req: &CreateOrderRequest,
    offer: &Offer,
    price: Decimal,
    allocation: &Allocation,
) -> Result<Instance, Error> {
    let commands = deps.config.commands_exchange.clone();
    let req = req.clone();
    let offer = offer.clone();
    let host_tenant_id = allocation.host_tenant_id;
    let created = db
        .tx(move |conn| {
            if let Some(existing) = instances::table
                .filter(instances::order_id.eq(order_id))
                .select(InstanceRow::as_select())
                .first(conn)
                .optional()?
            {
                return Ok(existing.into());
            }
            let id = Uuid::now_v7();
            let at = contracts::time::now();
            let image = req
                .image
                .clone()
                .unwrap_or_else(|| DEFAULT_IMAGE.to_owned());
            diesel::insert_into(instances::table)
                .values((
                    instances::id.eq(id),
                    instances::order_id.eq(order_id),
                    instances::tenant_id.eq(req.tenant_id),
                    instances::host_tenant_id.eq(host_tenant_id),
                    instances::machine_id.eq(offer.machine_id),
                    instances::gpu_model.eq(&offer.gpu_model),
                    instances::gpu_count.eq(req.gpu_count),
                    instances::rental_type.eq(RENTAL_TYPE),
                    instances::price_per_gpu_hour.eq(price),
                    instances::currency.eq(&offer.currency),
                    instances::image.eq(&image),
                    instances::ssh_public_key.eq(&req.ssh_public_key),
                    instances::state.eq(InstanceState::Provisioning.as_str()),
                    instances::created_at.eq(at),
                    instances::updated_at.eq(at),
                ))
                .execute(conn)?;
            diesel::update(orders::table.find(order_id))
                .set((
                    orders::state.eq(InstanceState::Provisioning.as_str()),
                    orders::machine_id.eq(offer.machine_id),
                    orders::updated_at.eq(at),
                ))
                .execute(conn)?;
            publish(
                conn,
                &commands,
                PROVISION_INSTANCE,
                at,
                req.tenant_id,
                &ProvisionInstance {
                    instance_id: id,
                    order_id,
                    tenant_id: req.tenant_id,
                    machine_id: offer.machine_id,
                    gpu_count: req.gpu_count,
                    machine_gpu_count: offer.gpu_count,
                    image,
                    ssh_public_key: req.ssh_public_key.clone(),
                },
            )?;
            tracing::info!(order.id = %order_id, instance.id = %id, "instance provisioning");
            let row =
                crate::instances::load(conn, id)?.ok_or_else(|| Error::NotFound(id.to_string()))?;
            Ok(row.into())
        })
        .await;
    match created {
        // A concurrent request for the same order created it first.
        Err(Error::Database(diesel::result::Error::DatabaseError(
            diesel::result::DatabaseErrorKind::UniqueViolation,
            _,
        ))) => instance_of(db, order_id)
            .await?
            .ok_or_else(|| Error::Conflict("order changed concurrently; retry".into())),
        other => other,
    }
}

/// Gives back what a holding key (an order id, or a later provisioning attempt's key, see
/// [`crate::instances::holding_key`]) holds: its GPUs, then its quota. Both
/// calls are idempotent, so this is safe to repeat.
pub async fn release_holdings(deps: &Deps, order_id: Uuid) -> Result<(), Error> {
    let _: serde_json::Value = deps
        .catalog
        .post(
            &format!("/internal/allocations/{order_id}/release"),
            &serde_json::json!({}),
        )
        .await?;
    let _: serde_json::Value = deps
        .quota
        .post(
            &format!("/internal/reservations/{order_id}/release"),
            &serde_json::json!({}),
        )
        .await?;
    Ok(())
}

async fn find_order(db: &Db, tenant_id: Uuid, key: String) -> Result<Option<OrderRow>, Error> {
    db.run(move |conn| {
        orders::table
            .filter(orders::tenant_id.eq(tenant_id))
            .filter(orders::idempotency_key.eq(key))
            .select(OrderRow::as_select())
            .first(conn)
            .optional()
            .map_err(Error::from)
    })
    .await
}

async fn instance_of(db: &Db, order_id: Uuid) -> Result<Option<Instance>, Error> {
    db.run(move |conn| {
        Ok(instances::table
            .filter(instances::order_id.eq(order_id))
            .select(InstanceRow::as_select())
            .first(conn)
            .optional()?
            .map(Instance::from))
    })
    .await
}

async fn insert_order(
    db: &Db,
    req: &CreateOrderRequest,
    offer: &Offer,
    print: &str,
) -> Result<Uuid, Error> {
    let req = req.clone();
    let offer = offer.clone();
    let print = print.to_owned();
    db.tx(move |conn| {
        let id = Uuid::now_v7();
        let inserted = diesel::insert_into(orders::table)
            .values((
                orders::id.eq(id),
                orders::tenant_id.eq(req.tenant_id),
                orders::user_id.eq(req.user_id),
                orders::idempotency_key.eq(&req.idempotency_key),
                orders::request_fingerprint.eq(&print),
                orders::offer_id.eq(req.offer_id),
                orders::gpu_count.eq(req.gpu_count),
                orders::max_price_per_gpu_hour.eq(req.max_price_per_gpu_hour),
                orders::price_per_gpu_hour.eq(offer.price_per_gpu_hour),
                orders::currency.eq(&offer.currency),
                orders::rental_type.eq(RENTAL_TYPE),
                orders::state.eq(InstanceState::Pending.as_str()),
            ))
            .on_conflict((orders::tenant_id, orders::idempotency_key))
            .do_nothing()
            .execute(conn)?;
        if inserted == 1 {
            return Ok(id);
        }
        // A concurrent request with the same key won the insert.
        let other: OrderRow = orders::table
            .filter(orders::tenant_id.eq(req.tenant_id))
            .filter(orders::idempotency_key.eq(&req.idempotency_key))
            .select(OrderRow::as_select())
            .first(conn)?;
        if other.request_fingerprint != print {
            return Err(Error::Conflict(
                "idempotencyKey: already used for a different order".into(),
            ));
        }
        Ok(other.id)
    })
    .await
}

async fn set_order_state(db: &Db, order_id: Uuid, state: InstanceState) -> Result<(), Error> {
    db.run(move |conn| {
        diesel::update(orders::table.find(order_id))
            .set((
                orders::state.eq(state.as_str()),
                orders::updated_at.eq(diesel::dsl::now),
            ))
            .execute(conn)
            .map(|_| ())
            .map_err(Error::from)
    })
    .await
}

async fn fail_order(db: &Db, order_id: Uuid, error: &Error) -> Result<(), Error> {
    let code = error.code().as_str().to_owned();
    let reason = error.to_string();
    db.run(move |conn| {
        diesel::update(orders::table.find(order_id))
            .filter(orders::state.ne(InstanceState::Provisioning.as_str()))
            .set((
                orders::state.eq(InstanceState::Failed.as_str()),
                orders::failure_code.eq(code),
                orders::failure_reason.eq(reason),
                orders::updated_at.eq(diesel::dsl::now),
            ))
            .execute(conn)
            .map(|_| ())
            .map_err(Error::from)
    })
    .await
}

/// Rebuilds the error a failed order got the first time.
fn failure(code: Option<&str>, reason: Option<String>) -> Error {
    let message = reason.unwrap_or_else(|| "the order failed".into());
    let code = code
        .and_then(|c| serde_json::from_value(serde_json::Value::String(c.to_owned())).ok())
        .unwrap_or(contracts::ErrorCode::Conflict);
    Error::Remote(platform::internal::RemoteError { code, message })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> CreateOrderRequest {
        CreateOrderRequest {
            tenant_id: Uuid::nil(),
            user_id: Uuid::nil(),
            idempotency_key: "k".into(),
            offer_id: Uuid::nil(),
            gpu_count: 1,
            max_price_per_gpu_hour: None,
            ssh_public_key: None,
            image: None,
        }
    }

    #[test]
    fn fingerprint_ignores_decimal_spelling_but_not_content() {
        let a = CreateOrderRequest {
            max_price_per_gpu_hour: Some("2.5".parse().unwrap()),
            ..request()
        };
        let b = CreateOrderRequest {
            max_price_per_gpu_hour: Some("2.50".parse().unwrap()),
            ..request()
        };
        let c = CreateOrderRequest {
            gpu_count: 2,
            ..request()
        };
        assert_eq!(fingerprint(&a), fingerprint(&b));
        assert_ne!(fingerprint(&a), fingerprint(&c));
    }

    #[test]
    fn zero_gpus_is_refused() {
        assert!(matches!(
            validate(&CreateOrderRequest {
                gpu_count: 0,
                ..request()
            }),
            Err(Error::Validation(_))
        ));
        assert!(validate(&request()).is_ok());
    }
}
