//! The order saga: resolve the offer and snapshot its price, then reserve
//! quota → check funds → allocate GPUs, each step idempotent by order id and
//! compensated when a later one fails; finally create the instance and the
//! provisioning command in one transaction.
//!
//! The saga runs inside the `createOrder` request, so the renter gets a
//! definite answer (an instance, or the reason there is none). An order whose
//! request died mid-saga is resumed by repeating `createOrder` with the same
//! idempotency key, since every step is idempotent.

use contracts::ErrorCode;
use contracts::api::{
    Allocation, CreateOrderRequest, FundsCheckRequest, Instance, Offer, RentalType,
    ReserveQuotaRequest,
};
use contracts::endpoints;
use contracts::events::ProvisionInstance;
use contracts::ids::{InstanceId, MachineId, OrderId, TenantId};
use diesel::prelude::*;
use platform::Db;
use platform::internal::RemoteError;
use rust_decimal::Decimal;
use schema::ordering::{instances, orders};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::holdings::{
    PLACEMENT_ATTEMPTS, allocate_request, candidates, disk_gib, lost_race, release_holdings,
};
use crate::instances::{InstanceRow, publish};
use crate::{Deps, Error};
use contracts::states::InstanceState;

const DEFAULT_IMAGE: &str = "nvidia/cuda:12.4.1-runtime-ubuntu22.04";

fn remote(code: ErrorCode, message: String) -> Error {
    Error::Remote(RemoteError {
        code,
        message,
        details: None,
    })
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = orders)]
struct OrderRow {
    id: OrderId,
    request_fingerprint: String,
    /// An order moves through the first states of its instance.
    state: InstanceState,
    failure_code: Option<String>,
    failure_reason: Option<String>,
    expired_at: Option<chrono::DateTime<chrono::Utc>>,
    price_per_gpu_hour: Option<Decimal>,
    currency: Option<String>,
    gpu_model: Option<String>,
    gpu_eighths: Option<i32>,
    planned_instance_id: Option<Uuid>,
    offer_id: Option<Uuid>,
}

impl OrderRow {
    /// The quote the order was recorded at (its price snapshot and model).
    /// An order without one (a row from before quotes were recorded) is
    /// refused, never resumed at a price of zero: the runway admission
    /// would then let it start on any balance.
    fn quote(&self) -> Result<Quote, Error> {
        match (
            self.price_per_gpu_hour,
            self.currency.clone(),
            self.gpu_model.clone(),
        ) {
            (Some(price), Some(currency), Some(gpu_model)) => Ok(Quote {
                price,
                currency,
                gpu_model,
                gpu_eighths: self.gpu_eighths,
                instance_id: self.planned_instance_id.map(InstanceId),
                machine_id: self.offer_id.map(MachineId),
            }),
            _ => Err(Error::Conflict(format!(
                "order {} has no recorded quote and cannot be resumed; place a new order with another idempotencyKey",
                self.id
            ))),
        }
    }

    /// Failed only because a service it needed did not answer
    /// (`UNAVAILABLE`), and not expired: nothing about the order itself was
    /// refused, so repeating it with its key is a fresh attempt rather than
    /// a replay of that failure.
    fn failed_on_a_dependency(&self) -> bool {
        self.state == InstanceState::Failed
            && self.expired_at.is_none()
            && self.failure_code.as_deref() == Some(ErrorCode::Unavailable.as_str())
    }
}

fn validate(req: &CreateOrderRequest) -> Result<(), Error> {
    if req.gpu_count < 1 {
        return Err(Error::Validation("gpuCount: at least 1".into()));
    }
    if req.disk_gib.is_some_and(|d| d < 1) {
        return Err(Error::Validation("diskGib: at least 1".into()));
    }
    if let Some(profile) = &req.mig_profile {
        contracts::mig::check_slice_order(profile, req.gpu_count, req.rental_type)
            .map_err(Error::Validation)?;
    }
    if req.reservation_id.is_some() {
        crate::reservations::launch::validate(req)?;
    } else if req.when_block_ends.is_some() {
        return Err(Error::Validation(
            "whenBlockEnds: only for an order on a reservation (reservationId)".into(),
        ));
    }
    match (&req.offer_id, &req.constraints) {
        // An order on a reservation names neither (checked above).
        _ if req.reservation_id.is_some() => {}
        (Some(_), Some(_)) => {
            return Err(Error::Validation(
                "constraints: give either an offerId or constraints, not both".into(),
            ));
        }
        (None, None) => {
            return Err(Error::Validation(
                "offerId: give an offerId or constraints for auto-placement".into(),
            ));
        }
        _ => {}
    }
    if let Some(c) = &req.constraints {
        if let Some(r) = c.min_reliability
            && !(Decimal::ZERO..=Decimal::ONE).contains(&r)
        {
            return Err(Error::Validation(
                "constraints.minReliability: between 0 and 1".into(),
            ));
        }
        if c.min_vram_gib.is_some_and(|v| v < 1) {
            return Err(Error::Validation(
                "constraints.minVramGib: at least 1".into(),
            ));
        }
    }
    match (req.rental_type, req.bid_per_gpu_hour) {
        (RentalType::Interruptible, None) => {
            return Err(Error::Validation(
                "bidPerGpuHour: required for an interruptible rental".into(),
            ));
        }
        (RentalType::Interruptible, Some(bid)) => {
            if bid <= Decimal::ZERO {
                return Err(Error::Validation("bidPerGpuHour: must be positive".into()));
            }
            if let Some(max) = req.max_price_per_gpu_hour
                && bid > max
            {
                return Err(Error::Validation(
                    "bidPerGpuHour: above your maxPricePerGpuHour".into(),
                ));
            }
        }
        (RentalType::OnDemand, Some(_)) => {
            return Err(Error::Validation(
                "bidPerGpuHour: only for interruptible rentals (rentalType INTERRUPTIBLE)".into(),
            ));
        }
        (RentalType::OnDemand, None) => {}
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
    if let Some(image) = &req.image
        && (image.is_empty() || image.len() > 500 || image.chars().any(char::is_whitespace))
    {
        return Err(Error::Validation(
            "image: an image reference without spaces".into(),
        ));
    }
    rental_fields(req).into_result()?;
    Ok(())
}

/// Bounds on what an order asks its container to run (issue 16).
pub const MAX_ENV_VARS: usize = 64;
pub const MAX_ENV_NAME: usize = 128;
pub const MAX_ENV_VALUE: usize = 32 * 1024;
pub const MAX_ENV_TOTAL: usize = 64 * 1024;
pub const MAX_COMMAND_ARGS: usize = 64;
pub const MAX_COMMAND_ARG: usize = 4 * 1024;
pub const MAX_PORTS: usize = 16;
pub const MAX_SSH_KEYS: usize = 32;
pub const MAX_SSH_KEYS_LEN: usize = 16 * 1024;

/// Checks the keys, command, env and ports of an order, all at once. The
/// messages never quote an env value (they are secrets).
fn rental_fields(req: &CreateOrderRequest) -> contracts::FieldErrors {
    let mut errors = contracts::FieldErrors::new();
    if let Some(keys) = &req.ssh_public_key {
        let lines: Vec<&str> = keys
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect();
        if keys.len() > MAX_SSH_KEYS_LEN || lines.len() > MAX_SSH_KEYS {
            errors.add(
                "sshPublicKey",
                format!("at most {MAX_SSH_KEYS} keys and {MAX_SSH_KEYS_LEN} bytes"),
            );
        } else if lines.is_empty()
            || !lines.iter().all(|l| {
                let mut words = l.split_whitespace();
                let kind = words.next().unwrap_or_default();
                (kind.starts_with("ssh-") || kind.starts_with("ecdsa-") || kind.starts_with("sk-"))
                    && words.next().is_some()
            })
        {
            errors.add(
                "sshPublicKey",
                "OpenSSH public keys, one per line (`ssh-ed25519 AAAA... comment`)",
            );
        }
    }
    if let Some(command) = &req.command {
        errors.check(
            !command.is_empty() && command.len() <= MAX_COMMAND_ARGS,
            "command",
            format!("1 to {MAX_COMMAND_ARGS} arguments"),
        );
        errors.check(
            command
                .iter()
                .all(|a| a.len() <= MAX_COMMAND_ARG && !a.contains('\0')),
            "command",
            format!("each argument at most {MAX_COMMAND_ARG} bytes, without NUL"),
        );
    }
    if req.env.len() > MAX_ENV_VARS {
        errors.add("env", format!("at most {MAX_ENV_VARS} variables"));
    }
    let mut names = std::collections::BTreeSet::new();
    let mut total = 0usize;
    for var in &req.env {
        let name = &var.name;
        let valid = !name.is_empty()
            && name.len() <= MAX_ENV_NAME
            && name
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !valid {
            errors.add(
                "env.name",
                format!(
                    "names match [A-Za-z_][A-Za-z0-9_]* and have at most {MAX_ENV_NAME} characters"
                ),
            );
        } else if !names.insert(name.as_str()) {
            errors.add("env.name", format!("{name} is given twice"));
        }
        if var.value.len() > MAX_ENV_VALUE || var.value.contains('\0') {
            errors.add(
                "env.value",
                format!("{name}: at most {MAX_ENV_VALUE} bytes, without NUL"),
            );
        }
        total += name.len() + var.value.len();
    }
    if total > MAX_ENV_TOTAL {
        errors.add("env", format!("at most {MAX_ENV_TOTAL} bytes in all"));
    }
    if req.ports.len() > MAX_PORTS {
        errors.add("ports", format!("at most {MAX_PORTS} ports"));
    }
    if req.ports.contains(&0) {
        errors.add("ports", "ports from 1 to 65535");
    }
    let distinct: std::collections::BTreeSet<u16> = req.ports.iter().copied().collect();
    if distinct.len() != req.ports.len() {
        errors.add("ports", "no port twice");
    }
    errors
}

/// The order's env as stored on the instance: `{name: value}`.
fn env_json(req: &CreateOrderRequest) -> serde_json::Value {
    let map: serde_json::Map<String, serde_json::Value> = req
        .env
        .iter()
        .map(|v| (v.name.clone(), serde_json::Value::String(v.value.clone())))
        .collect();
    serde_json::Value::Object(map)
}

/// Same key and same request → same order; same key, other request → conflict.
fn fingerprint(req: &CreateOrderRequest) -> String {
    let canonical = serde_json::json!({
        "offer_id": req.offer_id,
        "constraints": req.constraints,
        "gpu_count": req.gpu_count,
        "max_price_per_gpu_hour": req.max_price_per_gpu_hour.map(|p| p.normalize().to_string()),
        "rental_type": req.rental_type,
        "bid_per_gpu_hour": req.bid_per_gpu_hour.map(|p| p.normalize().to_string()),
        "ssh_public_key": req.ssh_public_key,
        "image": req.image,
        "team_id": req.team_id,
    });
    // Only when given, so orders from before the field keep their prints.
    let mut canonical = canonical;
    if let Some(disk) = req.disk_gib {
        canonical["disk_gib"] = disk.into();
    }
    if let Some(command) = &req.command {
        canonical["command"] = serde_json::json!(command);
    }
    if !req.env.is_empty() {
        // Names in clear, values only as digests: the fingerprint is stored.
        let env: Vec<(String, String)> = req
            .env
            .iter()
            .map(|v| {
                (
                    v.name.clone(),
                    hex::encode(Sha256::digest(v.value.as_bytes())),
                )
            })
            .collect();
        canonical["env"] = serde_json::json!(env);
    }
    if !req.ports.is_empty() {
        canonical["ports"] = serde_json::json!(req.ports);
    }
    if let Some(profile) = &req.mig_profile {
        canonical["mig_profile"] = serde_json::json!(profile);
    }
    if let Some(reservation) = req.reservation_id {
        canonical["reservation_id"] = serde_json::json!(reservation);
    }
    if let Some(when) = req.when_block_ends {
        canonical["when_block_ends"] = serde_json::json!(when.as_str());
    }
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
    let placed = match previous {
        Some(order) => {
            if order.request_fingerprint != print {
                return Err(Error::Conflict(
                    "idempotencyKey: already used for a different order".into(),
                ));
            }
            if let Some(instance) = instance_of(db, order.id).await? {
                return Ok(instance);
            }
            if order.failed_on_a_dependency() {
                // It must hold nothing before the fresh attempt: give back
                // whatever the failed attempt's compensation could not (the
                // dependency may have been the one to release to). Still
                // down: the retry answers UNAVAILABLE again, holding nothing new.
                release_holdings(deps, order.id).await?;
                supersede(db, order.id, req.idempotency_key.clone()).await?;
                tracing::info!(order.id = %order.id, "order failed on a dependency; retried as a fresh attempt");
                place_fresh(db, deps, &req, &print).await?
            } else if order.state == InstanceState::Failed {
                return Err(Error::recorded(
                    order.failure_code.as_deref(),
                    order.failure_reason,
                ));
            } else {
                // Resumed: the quote it was recorded at; the candidates are
                // searched again when placement comes (they may have moved).
                Placed {
                    order_id: order.id,
                    quote: order.quote()?,
                    candidates: None,
                }
            }
        }
        None => place_fresh(db, deps, &req, &print).await?,
    };
    let order_id = placed.order_id;

    // Resume-safe from here on: every call is idempotent by order id.
    match run_steps(db, deps, placed, &req).await {
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

/// An order recorded (or found) and what the saga carries from there: the
/// quote, computed once, and for an order by constraints the candidates its
/// quote came from, so placement does not ask the catalog again before it
/// has lost a race.
struct Placed {
    order_id: OrderId,
    quote: Quote,
    candidates: Option<Vec<Offer>>,
}

/// Records a new order for `req` at the current quote (the cheapest matching
/// offer, for an order by constraints).
async fn place_fresh(
    db: &Db,
    deps: &Deps,
    req: &CreateOrderRequest,
    print: &str,
) -> Result<Placed, Error> {
    // An order on a reservation: the block's GPUs, already paid.
    if let Some(reservation_id) = req.reservation_id {
        let reserved = crate::reservations::launch::quote(db, req, reservation_id).await?;
        let quote = Quote::reserved(reserved.currency, reserved.gpu_model, reserved.machine_id);
        let (order_id, quote) = insert_order(db, req, quote, print).await?;
        return Ok(Placed {
            order_id: OrderId(order_id),
            quote,
            candidates: None,
        });
    }
    // The quote the funds check (and, without a maximum, the price
    // check at commit) is made against.
    let (quote, candidates) = match req.offer_id {
        Some(offer_id) => {
            let offer = deps
                .catalog
                .call(endpoints::catalog::OFFER, offer_id, &())
                .await?;
            match &req.mig_profile {
                Some(profile) => {
                    check_disk(req, &offer)?;
                    (slice_quote(req, &offer, profile)?, None)
                }
                None => {
                    check_offer(req, &offer)?;
                    (quote_of(req, &offer), None)
                }
            }
        }
        None => {
            let candidates = candidates(deps, req).await?;
            let Some(cheapest) = candidates.first() else {
                return Err(no_match(req));
            };
            let quote = match &req.mig_profile {
                Some(profile) => slice_quote(req, cheapest, profile)?,
                None => quote_of(req, cheapest),
            };
            (quote, Some(candidates))
        }
    };
    let (order_id, quote) = insert_order(db, req, quote, print).await?;
    Ok(Placed {
        order_id: OrderId(order_id),
        quote,
        candidates,
    })
}

/// Takes a failed order's idempotency key off it (kept in the renamed key,
/// `<key>#superseded:<order id>`), so the key names the fresh attempt. Only a
/// failed order is renamed; a concurrent retry that renamed it first makes
/// this a no-op, and both then share the fresh order (`insert_order`).
async fn supersede(db: &Db, order_id: OrderId, key: String) -> Result<(), Error> {
    db.run(move |conn| {
        diesel::update(orders::table.find(order_id))
            .filter(orders::state.eq(InstanceState::Failed))
            .filter(orders::idempotency_key.eq(&key))
            .set((
                orders::idempotency_key.eq(format!("{key}#superseded:{order_id}")),
                orders::updated_at.eq(diesel::dsl::now),
            ))
            .execute(conn)
            .map(|_| ())
            .map_err(Error::from)
    })
    .await
}

/// The rate the order expects to pay: the offer's price, or the bid.
fn quote_of(req: &CreateOrderRequest, offer: &Offer) -> Quote {
    let price = match req.rental_type {
        RentalType::OnDemand => offer.price_per_gpu_hour,
        // `validate` refuses an interruptible order without a positive bid;
        // should one get here anyway it is priced at the offer, never at 0.
        RentalType::Interruptible => req.bid_per_gpu_hour.unwrap_or(offer.price_per_gpu_hour),
    };
    Quote {
        price,
        currency: offer.currency.clone(),
        gpu_model: offer.gpu_model.clone(),
        gpu_eighths: None,
        instance_id: None,
        machine_id: None,
    }
}

/// The quote of a MIG slice of `profile` on `offer`: its price per hour,
/// and its share of a GPU for the quota. Refused when the offer sells no
/// such slice, or has none free.
fn slice_quote(req: &CreateOrderRequest, offer: &Offer, profile: &str) -> Result<Quote, Error> {
    let Some(slice) = offer.mig_slices.iter().find(|s| s.profile == profile) else {
        return Err(Error::Validation(format!(
            "migProfile: offer {} sells no {profile} slices{}",
            offer.id,
            if offer.mig_slices.is_empty() {
                String::new()
            } else {
                format!(
                    "; it sells {}",
                    offer
                        .mig_slices
                        .iter()
                        .map(|s| s.profile.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        )));
    };
    if slice.free < 1 {
        return Err(remote(
            ErrorCode::InsufficientCapacity,
            format!("offer {} has no free {profile} slice now", offer.id),
        ));
    }
    if let Some(max) = req.max_price_per_gpu_hour
        && slice.price_per_hour > max
    {
        return Err(remote(
            ErrorCode::PriceAboveMax,
            format!(
                "a {profile} slice costs {} {} per hour, above the order's maximum of {}",
                slice.price_per_hour,
                offer.currency,
                max.normalize()
            ),
        ));
    }
    Ok(Quote {
        price: slice.price_per_hour,
        currency: offer.currency.clone(),
        gpu_model: offer.gpu_model.clone(),
        gpu_eighths: Some(i32::from(slice.memory_slices)),
        instance_id: Some(InstanceId(Uuid::now_v7())),
        machine_id: None,
    })
}

/// What an order expects when it is recorded: the GPU rate, and the model
/// its quota is held for.
#[derive(Debug, Clone, PartialEq)]
struct Quote {
    price: Decimal,
    currency: String,
    gpu_model: String,
    /// A MIG slice's share of a GPU, in eighths (its memory slices).
    gpu_eighths: Option<i32>,
    /// A slice order's instance id, chosen with the order.
    instance_id: Option<InstanceId>,
    /// An order on a reservation: the reservation's machine.
    machine_id: Option<MachineId>,
}

impl Quote {
    /// The quote of an order on a reservation: the block is paid, so the
    /// GPUs cost nothing per hour here (storage and bandwidth are metered
    /// at the booking's rates).
    fn reserved(currency: String, gpu_model: String, machine_id: MachineId) -> Self {
        Self {
            price: Decimal::ZERO,
            currency,
            gpu_model,
            gpu_eighths: None,
            instance_id: None,
            machine_id: Some(machine_id),
        }
    }
}

fn no_match(req: &CreateOrderRequest) -> Error {
    remote(
        ErrorCode::InsufficientCapacity,
        match &req.mig_profile {
            Some(profile) => {
                format!("no offer matching the constraints has a free {profile} slice now")
            }
            None => format!(
                "no offer matching the constraints has {} GPUs free now",
                req.gpu_count
            ),
        },
    )
}

fn check_offer(req: &CreateOrderRequest, offer: &Offer) -> Result<(), Error> {
    if req.rental_type == RentalType::OnDemand
        && let Some(max) = req.max_price_per_gpu_hour
        && offer.price_per_gpu_hour > max
    {
        return Err(remote(
            ErrorCode::PriceAboveMax,
            format!(
                "the offer costs {} {} per GPU-hour, above your maximum of {}",
                offer.price_per_gpu_hour.normalize(),
                offer.currency,
                max.normalize()
            ),
        ));
    }
    if req.rental_type == RentalType::Interruptible {
        match offer.min_bid_per_gpu_hour {
            None => {
                return Err(Error::Validation(
                    "rentalType: this offer takes no interruptible rentals".into(),
                ));
            }
            Some(min) if req.bid_per_gpu_hour.is_some_and(|bid| bid < min) => {
                return Err(Error::Validation(format!(
                    "bidPerGpuHour: below the offer's minimum bid of {} {} per GPU-hour",
                    min.normalize(),
                    offer.currency
                )));
            }
            Some(_) => {}
        }
    }
    if req.gpu_count > offer.gpu_count {
        return Err(Error::Validation(format!(
            "gpuCount: the machine has {} GPUs",
            offer.gpu_count
        )));
    }
    check_disk(req, offer)
}

/// The ordered disk fits the machine's (whole GPUs and slices alike).
fn check_disk(req: &CreateOrderRequest, offer: &Offer) -> Result<(), Error> {
    if disk_gib(req) > offer.disk_gib {
        return Err(Error::Validation(format!(
            "diskGib: the machine has {} GiB of disk",
            offer.disk_gib
        )));
    }
    Ok(())
}

async fn run_steps(
    db: &Db,
    deps: &Deps,
    placed: Placed,
    req: &CreateOrderRequest,
) -> Result<Instance, Error> {
    let Placed {
        order_id,
        quote,
        candidates,
    } = placed;
    let hourly = quote.price * Decimal::from(req.gpu_count);

    // Quota reserve and billing's funds check are independent (quota holds
    // against its own tables, billing only reads the balance), so both go
    // out at once. Their answers are read in the saga's order, so an order
    // both would refuse gets the quota's answer, as when they ran one after
    // the other; a quota taken for an order the funds check refuses is given
    // back by the compensation, as before.
    //
    // The balance must cover a minimum runway at the snapshot price: first
    // for this order alone (billing's check), then, under the tenant's
    // runway lock, for everything the tenant already runs plus this order
    // (see `funds::admit`), which also admits the order (`allocating`).
    let reserve = ReserveQuotaRequest {
        gpu_eighths: quote.gpu_eighths,
        order_id,
        tenant_id: req.tenant_id,
        gpu_count: req.gpu_count,
        gpu_model: quote.gpu_model.clone(),
        hourly_rate: hourly,
        team_id: req.team_id,
        renews: None,
        moves: None,
    };
    let funds = FundsCheckRequest {
        tenant_id: req.tenant_id,
        required: contracts::money::rate(deps.settings.min_runway_seconds, hourly),
    };
    // An order on a reservation holds no quota of its own: the
    // reservation's hold counts its GPUs.
    let quota = async {
        if req.reservation_id.is_some() {
            return Ok(None);
        }
        deps.quota
            .call(contracts::endpoints::quota::RESERVE, (), &reserve)
            .await
            .map(Some)
    };
    let (reservation, balance) = tokio::join!(
        quota,
        deps.billing
            .call(endpoints::billing::FUNDS_CHECK, (), &funds),
    );
    // Released already: the order expired while its request was away (see
    // `expiry`); resuming it would run on quota nobody holds.
    if reservation?.is_some_and(|r| r.released) {
        return Err(expired());
    }
    let balance = balance?;
    let runway = crate::funds::Runway {
        balance: balance.amount,
        currency: balance.currency,
        runway_seconds: deps.settings.min_runway_seconds,
    };
    if !crate::funds::admit(db, req.tenant_id, order_id, hourly, runway).await? {
        return Err(expired());
    }
    let allocation = place(deps, order_id, req, &quote, candidates).await?;
    create_instance(db, deps, order_id, req, &allocation, quote.instance_id).await
}

/// Takes the GPUs: on the ordered offer, or on the cheapest matching offer,
/// moving on to the next after a lost race, at most [`PLACEMENT_ATTEMPTS`]
/// times. Allocation is idempotent by order id: a resumed order gets back the
/// allocation it already has, whichever machine that is on.
///
/// `searched` are the offers the quote came from, when the order was
/// recorded in this request: the first try uses them; every try after a lost
/// race searches again, so it moves to the cheapest offer that still has the
/// GPUs.
async fn place(
    deps: &Deps,
    order_id: OrderId,
    req: &CreateOrderRequest,
    quote: &Quote,
    mut searched: Option<Vec<Offer>>,
) -> Result<Allocation, Error> {
    if let (Some(reservation_id), Some(machine_id)) = (req.reservation_id, quote.machine_id) {
        let mut request = allocate_request(order_id, req, machine_id, Decimal::ZERO);
        request.reservation_id = Some(reservation_id);
        // The order's maximum is the ceiling after the block; inside it the
        // GPUs cost nothing.
        request.max_price_per_gpu_hour = None;
        request.continue_up_to_per_gpu_hour = crate::reservations::launch::continue_up_to(req);
        return Ok(deps
            .catalog
            .call(endpoints::catalog::ALLOCATE, (), &request)
            .await?);
    }
    if let Some(offer_id) = req.offer_id {
        let mut request = allocate_request(order_id, req, offer_id, quote.price);
        request.instance_id = quote.instance_id;
        let allocation = deps
            .catalog
            .call(endpoints::catalog::ALLOCATE, (), &request)
            .await?;
        return Ok(allocation);
    }
    let mut tried: Vec<Uuid> = Vec::new();
    let mut last: Option<Error> = None;
    for _ in 0..PLACEMENT_ATTEMPTS {
        let offers = match searched.take() {
            Some(offers) => offers,
            None => candidates(deps, req).await?,
        };
        // The quota is held for the quoted model.
        let Some(offer) = offers
            .iter()
            .find(|o| o.gpu_model == quote.gpu_model && !tried.contains(&o.machine_id.0))
        else {
            break;
        };
        let quoted = match &req.mig_profile {
            Some(profile) => match offer.mig_slices.iter().find(|s| &s.profile == profile) {
                Some(slice) => slice.price_per_hour,
                None => {
                    tried.push(offer.machine_id.into());
                    continue;
                }
            },
            None => quote_of(req, offer).price,
        };
        let mut request = allocate_request(order_id, req, offer.machine_id, quoted);
        request.instance_id = quote.instance_id;
        let result = deps
            .catalog
            .call(endpoints::catalog::ALLOCATE, (), &request)
            .await;
        match result {
            Ok(allocation) => return Ok(allocation),
            Err(e) if lost_race(&e) => {
                tracing::debug!(order.id = %order_id, machine.id = %offer.machine_id, code = e.code.as_str(), "placement lost a race; trying the next offer");
                tried.push(offer.machine_id.into());
                last = Some(Error::Remote(e));
            }
            Err(e) => return Err(Error::Remote(e)),
        }
    }
    Err(match last {
        Some(Error::Remote(e)) if e.code == ErrorCode::InsufficientCapacity || tried.len() > 1 => {
            remote(
                ErrorCode::InsufficientCapacity,
                format!(
                    "no offer matching the constraints could take the order after {} tries: {}",
                    tried.len(),
                    e.message
                ),
            )
        }
        Some(other) => other,
        None => no_match(req),
    })
}

async fn create_instance(
    db: &Db,
    deps: &Deps,
    order_id: OrderId,
    req: &CreateOrderRequest,
    allocation: &Allocation,
    planned: Option<InstanceId>,
) -> Result<Instance, Error> {
    let commands = deps.config.commands_exchange.clone();
    let events = deps.config.events_exchange.clone();
    let req = req.clone();
    let allocation = allocation.clone();
    let created = db
        .tx(move |conn| {
            // Locked as the preemption consumer locks it: either it sees this
            // instance and preempts it, or this sees its record and stops.
            let state: InstanceState = orders::table
                .find(order_id)
                .select(orders::state)
                .for_update()
                .first(conn)?;
            if let Some(existing) = instances::table
                .filter(instances::order_id.eq(order_id))
                .select(InstanceRow::as_select())
                .first(conn)
                .optional()?
            {
                return Ok(existing.into());
            }
            // Expired while its request was away: the expiry task gives (or
            // gave) its holdings back, so no instance may use them.
            if state == InstanceState::Failed {
                return Err(expired());
            }
            if allocation.released || crate::holdings::preempted(conn, order_id.into())? {
                return Err(remote(
                    ErrorCode::InsufficientCapacity,
                    "the GPUs were taken by a higher-priority order before the instance started"
                        .into(),
                ));
            }
            let id = planned.map_or_else(Uuid::now_v7, InstanceId::into_uuid);
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
                    instances::host_tenant_id.eq(allocation.host_tenant_id),
                    instances::machine_id.eq(allocation.machine_id),
                    instances::gpu_model.eq(&allocation.gpu_model),
                    instances::gpu_count.eq(req.gpu_count),
                    instances::rental_type.eq(allocation.rental_type.as_str()),
                    instances::price_per_gpu_hour.eq(allocation.price_per_gpu_hour),
                    instances::storage_price_per_gb_month.eq(allocation.storage_price_per_gb_month),
                    instances::bandwidth_up_price_per_tb.eq(allocation.bandwidth_up_price_per_tb),
                    instances::bandwidth_down_price_per_tb
                        .eq(allocation.bandwidth_down_price_per_tb),
                    instances::currency.eq(&allocation.currency),
                    instances::image.eq(&image),
                    instances::ssh_public_key.eq(&req.ssh_public_key),
                    instances::disk_gib.eq(disk_gib(&req)),
                    instances::command.eq(req.command.as_ref().map(|c| serde_json::json!(c))),
                    instances::env.eq(env_json(&req)),
                    instances::ports.eq(req
                        .ports
                        .iter()
                        .map(|&p| i32::from(p))
                        .collect::<Vec<_>>()),
                    instances::state.eq(InstanceState::Provisioning),
                    instances::reservation_id.eq(req.reservation_id),
                    instances::continue_up_to_per_gpu_hour
                        .eq(crate::reservations::launch::continue_up_to(&req)),
                    instances::created_at.eq(at),
                    instances::updated_at.eq(at),
                ))
                .execute(conn)?;
            crate::publishing::record_allocation(conn, InstanceId(id), &allocation)?;
            crate::events::created(conn, id, InstanceState::Provisioning, at)?;
            diesel::update(orders::table.find(order_id))
                .set((
                    orders::state.eq(InstanceState::Provisioning),
                    orders::machine_id.eq(allocation.machine_id),
                    // The committed rate replaces the quote.
                    orders::price_per_gpu_hour.eq(allocation.price_per_gpu_hour),
                    orders::currency.eq(&allocation.currency),
                    orders::updated_at.eq(at),
                ))
                .execute(conn)?;
            publish(
                conn,
                &commands,
                contracts::events::kinds::PROVISION_INSTANCE,
                at,
                req.tenant_id,
                &contracts::events::ProvisionRun::from(ProvisionInstance {
                    gpu_indices: allocation.gpu_indices.clone(),
                    mig: allocation.mig.clone(),
                    instance_id: InstanceId(id),
                    order_id,
                    tenant_id: req.tenant_id,
                    machine_id: allocation.machine_id,
                    gpu_count: req.gpu_count,
                    machine_gpu_count: allocation.machine_gpu_count,
                    image,
                    ssh_public_key: req.ssh_public_key.clone(),
                    command: req.command.clone(),
                    env: req
                        .env
                        .iter()
                        .map(|v| (v.name.clone(), v.value.clone()))
                        .collect(),
                    ports: req.ports.clone(),
                    disk_gib: Some(disk_gib(&req)),
                }),
            )?;
            tracing::info!(order.id = %order_id, instance.id = %id, "instance provisioning");
            let row =
                crate::instances::load(conn, id)?.ok_or_else(|| Error::NotFound(id.to_string()))?;
            crate::instances::publish_storage_started(conn, &events, &row)?;
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

async fn find_order(db: &Db, tenant_id: TenantId, key: String) -> Result<Option<OrderRow>, Error> {
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

async fn instance_of(db: &Db, order_id: OrderId) -> Result<Option<Instance>, Error> {
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
    quote: Quote,
    print: &str,
) -> Result<(Uuid, Quote), Error> {
    let req = req.clone();
    let print = print.to_owned();
    let constraints = req
        .constraints
        .as_ref()
        .map(serde_json::to_value)
        .transpose()
        .map_err(platform::PlatformError::from)?;
    db.tx(move |conn| {
        let id = Uuid::now_v7();
        let inserted = diesel::insert_into(orders::table)
            .values((
                orders::id.eq(id),
                orders::tenant_id.eq(req.tenant_id),
                orders::user_id.eq(req.user_id),
                orders::idempotency_key.eq(&req.idempotency_key),
                orders::request_fingerprint.eq(&print),
                orders::offer_id.eq(req.offer_id.or(quote.machine_id)),
                orders::reservation_id.eq(req.reservation_id),
                orders::gpu_count.eq(req.gpu_count),
                orders::max_price_per_gpu_hour.eq(req.max_price_per_gpu_hour),
                orders::price_per_gpu_hour.eq(quote.price),
                orders::currency.eq(&quote.currency),
                orders::gpu_model.eq(&quote.gpu_model),
                orders::rental_type.eq(req.rental_type.as_str()),
                orders::bid_per_gpu_hour.eq(req.bid_per_gpu_hour),
                orders::constraints.eq(constraints),
                orders::disk_gib.eq(req.disk_gib),
                orders::mig_profile.eq(&req.mig_profile),
                orders::gpu_eighths.eq(quote.gpu_eighths),
                orders::planned_instance_id.eq(quote.instance_id),
                orders::state.eq(InstanceState::Pending),
            ))
            .on_conflict((orders::tenant_id, orders::idempotency_key))
            .do_nothing()
            .execute(conn)?;
        if inserted == 1 {
            return Ok((id, quote));
        }
        // A concurrent request with the same key won the insert: the saga
        // goes on with that order's quote.
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
        Ok((other.id.into(), other.quote()?))
    })
    .await
}

/// What a request resuming an expired order gets.
pub(crate) fn expired() -> Error {
    Error::Conflict(
        "the order expired: its request ended before the order was placed, and what it held \
         was given back; place it again with a new idempotency key"
            .into(),
    )
}

async fn fail_order(db: &Db, order_id: OrderId, error: &Error) -> Result<(), Error> {
    let code = error.code().as_str().to_owned();
    let reason = error.to_string();
    db.run(move |conn| {
        diesel::update(orders::table.find(order_id))
            .filter(orders::state.ne(InstanceState::Provisioning))
            // An expired order keeps the reason it expired for.
            .filter(orders::expired_at.is_null())
            .set((
                orders::state.eq(InstanceState::Failed),
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

#[cfg(test)]
mod tests {
    use super::*;
    use contracts::ids::{MachineId, TenantId};

    /// A resumed order without a recorded price is refused, never priced
    /// at zero (issue 19: `unwrap_or_default` used to make it free).
    #[test]
    fn an_order_without_a_recorded_quote_is_refused_not_free() {
        let row = |price: Option<Decimal>| OrderRow {
            offer_id: Default::default(),
            id: OrderId(Uuid::now_v7()),
            request_fingerprint: String::new(),
            state: InstanceState::Pending,
            failure_code: None,
            failure_reason: None,
            expired_at: None,
            price_per_gpu_hour: price,
            gpu_eighths: None,
            planned_instance_id: None,

            currency: Some("USD".into()),
            gpu_model: Some("H100".into()),
        };
        let err = row(None).quote().expect_err("refused");
        assert_eq!(err.code(), ErrorCode::Conflict, "{err}");
        let quote = row(Some("2.5".parse().unwrap())).quote().expect("quote");
        assert_eq!(quote.price, "2.5".parse::<Decimal>().unwrap());
    }

    fn request() -> CreateOrderRequest {
        CreateOrderRequest {
            reservation_id: Default::default(),
            when_block_ends: None,
            mig_profile: None,
            tenant_id: TenantId(Uuid::nil()),
            user_id: Uuid::nil(),
            idempotency_key: "k".into(),
            offer_id: Some(MachineId(Uuid::nil())),
            constraints: None,
            gpu_count: 1,
            max_price_per_gpu_hour: None,
            rental_type: RentalType::OnDemand,
            bid_per_gpu_hour: None,
            ssh_public_key: None,
            image: None,
            team_id: None,
            disk_gib: None,
            command: None,
            env: Vec::new(),
            ports: Vec::new(),
        }
    }

    #[test]
    fn rental_fields_are_bounded_and_reported_together() {
        let ok = CreateOrderRequest {
            ssh_public_key: Some("ssh-ed25519 AAAA a\n\nssh-rsa BBBB b\n".into()),
            command: Some(vec!["sh".into(), "-c".into(), "true".into()]),
            env: vec![contracts::api::EnvVar {
                name: "_TOKEN1".into(),
                value: "x".repeat(MAX_ENV_VALUE),
            }],
            ports: vec![22, 8888],
            ..request()
        };
        assert!(rental_fields(&ok).is_empty());
        let bad = CreateOrderRequest {
            ssh_public_key: Some("ssh-ed25519\n".into()),
            command: Some(Vec::new()),
            env: vec![
                contracts::api::EnvVar {
                    name: "A-B".into(),
                    value: "secret-1".into(),
                },
                contracts::api::EnvVar {
                    name: "A".into(),
                    value: "x".repeat(MAX_ENV_VALUE + 1),
                },
                contracts::api::EnvVar {
                    name: "A".into(),
                    value: "secret-2".into(),
                },
            ],
            ports: vec![0, 1, 1],
            ..request()
        };
        let errors = rental_fields(&bad);
        let fields: Vec<&str> = errors.fields().iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "sshPublicKey",
                "command",
                "env.name",
                "env.value",
                "env.name",
                "ports",
                "ports"
            ]
        );
        // No message quotes a value.
        let text = errors.to_string();
        assert!(
            !text.contains("secret-") && !text.contains("xxxx"),
            "{text}"
        );
    }

    #[test]
    fn fingerprint_covers_env_values_as_digests_only() {
        let with = |value: &str| CreateOrderRequest {
            env: vec![contracts::api::EnvVar {
                name: "TOKEN".into(),
                value: value.into(),
            }],
            ..request()
        };
        assert_ne!(fingerprint(&with("one")), fingerprint(&with("two")));
        assert_eq!(fingerprint(&with("one")), fingerprint(&with("one")));
        // Orders without the new fields keep their prints.
        assert_eq!(fingerprint(&request()), fingerprint(&request()));
        assert!(!format!("{:?}", with("hunter2")).contains("hunter2"));
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
    fn an_order_names_an_offer_or_constraints_and_bids_only_when_interruptible() {
        let refused = |req: CreateOrderRequest| matches!(validate(&req), Err(Error::Validation(_)));
        let by_constraints = CreateOrderRequest {
            offer_id: None,
            constraints: Some(contracts::api::PlacementConstraints::default()),
            ..request()
        };
        assert!(validate(&by_constraints).is_ok());
        assert!(refused(CreateOrderRequest {
            offer_id: None,
            ..request()
        }));
        assert!(refused(CreateOrderRequest {
            constraints: Some(Default::default()),
            ..request()
        }));
        let bid = |b: &str| Some(b.parse::<Decimal>().unwrap());
        let interruptible = CreateOrderRequest {
            rental_type: RentalType::Interruptible,
            bid_per_gpu_hour: bid("0.3"),
            ..request()
        };
        assert!(validate(&interruptible).is_ok());
        assert!(refused(CreateOrderRequest {
            bid_per_gpu_hour: None,
            ..interruptible.clone()
        }));
        assert!(refused(CreateOrderRequest {
            bid_per_gpu_hour: bid("0"),
            ..interruptible.clone()
        }));
        assert!(refused(CreateOrderRequest {
            max_price_per_gpu_hour: bid("0.2"),
            ..interruptible.clone()
        }));
        assert!(refused(CreateOrderRequest {
            bid_per_gpu_hour: bid("0.3"),
            ..request()
        }));
        // The bid and the rental type are part of what a key stands for.
        assert_ne!(fingerprint(&interruptible), fingerprint(&request()));
        assert_ne!(
            fingerprint(&interruptible),
            fingerprint(&CreateOrderRequest {
                bid_per_gpu_hour: bid("0.4"),
                ..interruptible.clone()
            })
        );
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
