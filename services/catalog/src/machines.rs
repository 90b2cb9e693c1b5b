//! Machines as their hosts see them: registration with the full
//! specification, listing terms, listing and unlisting.

use chrono::{DateTime, Utc};
use contracts::FieldErrors;
use contracts::api::{
    DiskType, Machine, MachineRegistered, RegisterMachineRequest, SetPricingRequest,
};
use contracts::ids::{MachineId, TenantId};
use diesel::dsl::sql;
use diesel::prelude::*;
use diesel::sql_types::Bool;
use platform::Db;
use rand::RngCore;
use rust_decimal::Decimal;
use schema::catalog::{allocations, machines};
use schema::catalog_registrations::machine_registrations;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::market::{Market, VERIFIED_SQL, cuda_code, cuda_version};
use crate::{Error, gpu_models};

/// Most a GPU-hour (or a GB-month, or a TB) may be listed at; a guard against a
/// typo of a few zeros. The gateway checks the same bound first.
const MAX_PRICE_PER_GPU_HOUR: i64 = contracts::bounds::GPU_HOUR_PRICE.max_units;

#[derive(Queryable, Selectable)]
#[diesel(table_name = machines)]
pub struct MachineRow {
    pub id: MachineId,
    pub host_tenant_id: TenantId,
    pub name: String,
    pub gpu_model: String,
    pub gpu_count: i32,
    pub gpus_allocated: i32,
    pub vram_gib: i32,
    pub cpu_model: String,
    pub cpu_cores: i32,
    pub ram_gib: i32,
    pub disk_gib: i32,
    pub disk_type: String,
    pub upload_mbps: i32,
    pub download_mbps: i32,
    pub country: String,
    pub region: String,
    pub datacenter: bool,
    pub driver_version: Option<String>,
    pub cuda_version_code: Option<i32>,
    pub price_per_gpu_hour: Option<Decimal>,
    pub min_bid_per_gpu_hour: Option<Decimal>,
    pub storage_price_per_gb_month: Decimal,
    pub bandwidth_up_price_per_tb: Decimal,
    pub bandwidth_down_price_per_tb: Decimal,
    pub allowed_gpu_counts: Vec<i32>,
    pub list_until: Option<DateTime<Utc>>,
    pub currency: String,
    pub listed: bool,
    pub last_heartbeat_at: Option<DateTime<Utc>>,
    pub reliability: Option<Decimal>,
    pub created_at: DateTime<Utc>,
}

pub fn disk_type(s: &str) -> DiskType {
    match s {
        "ssd" => DiskType::Ssd,
        "hdd" => DiskType::Hdd,
        _ => DiskType::Nvme,
    }
}

fn disk_type_name(d: DiskType) -> &'static str {
    match d {
        DiskType::Nvme => "nvme",
        DiskType::Ssd => "ssd",
        DiskType::Hdd => "hdd",
    }
}

/// The host's view of a machine; `online` and `verified` come from SQL.
pub fn machine(m: MachineRow, online: bool, verified: bool) -> Machine {
    Machine {
        id: m.id,
        host_tenant_id: m.host_tenant_id,
        name: m.name,
        gpu_model: m.gpu_model,
        gpu_count: m.gpu_count,
        gpus_allocated: m.gpus_allocated,
        vram_gib: m.vram_gib,
        cpu_model: m.cpu_model,
        cpu_cores: m.cpu_cores,
        ram_gib: m.ram_gib,
        disk_gib: m.disk_gib,
        disk_type: disk_type(&m.disk_type),
        upload_mbps: m.upload_mbps,
        download_mbps: m.download_mbps,
        country: m.country,
        region: m.region,
        datacenter: m.datacenter,
        driver_version: m.driver_version,
        cuda_version: m.cuda_version_code.map(cuda_version),
        price_per_gpu_hour: m.price_per_gpu_hour.map(|p| p.normalize()),
        min_bid_per_gpu_hour: m.min_bid_per_gpu_hour.map(|p| p.normalize()),
        storage_price_per_gb_month: m.storage_price_per_gb_month.normalize(),
        bandwidth_up_price_per_tb: m.bandwidth_up_price_per_tb.normalize(),
        bandwidth_down_price_per_tb: m.bandwidth_down_price_per_tb.normalize(),
        allowed_gpu_counts: m.allowed_gpu_counts,
        list_until: m.list_until,
        currency: m.currency,
        listed: m.listed,
        online,
        last_heartbeat_at: m.last_heartbeat_at,
        reliability: m.reliability.map(|r| r.normalize()),
        verified,
        created_at: m.created_at,
    }
}

/// Loads machines matching `filter` with their computed flags.
fn load_machines(
    conn: &mut PgConnection,
    market: &Market,
    host_tenant_id: TenantId,
    machine_id: Option<Uuid>,
) -> QueryResult<Vec<Machine>> {
    let mut query = machines::table
        .filter(machines::host_tenant_id.eq(host_tenant_id))
        .filter(machines::deleted_at.is_null())
        .select((
            MachineRow::as_select(),
            sql::<Bool>(&market.online_sql()),
            sql::<Bool>(VERIFIED_SQL),
        ))
        .order(machines::created_at.asc())
        .into_boxed();
    if let Some(id) = machine_id {
        query = query.filter(machines::id.eq(id));
    }
    let rows: Vec<(MachineRow, bool, bool)> = query.load(conn)?;
    Ok(rows
        .into_iter()
        .map(|(m, online, verified)| machine(m, online, verified))
        .collect())
}

#[derive(Insertable)]
#[diesel(table_name = machines)]
struct NewMachine<'a> {
    id: Uuid,
    host_tenant_id: TenantId,
    name: &'a str,
    gpu_model: &'a str,
    gpu_count: i32,
    vram_gib: i32,
    cpu_model: &'a str,
    cpu_cores: i32,
    ram_gib: i32,
    disk_gib: i32,
    disk_type: &'a str,
    upload_mbps: i32,
    download_mbps: i32,
    country: &'a str,
    region: &'a str,
    datacenter: bool,
    driver_version: Option<&'a str>,
    cuda_version_code: Option<i32>,
    currency: &'a str,
    agent_token_sha256: &'a str,
    idempotency_key: &'a str,
}

fn text(errors: &mut FieldErrors, field: &str, value: &str, max: usize) {
    errors.check(
        !value.trim().is_empty() && value.chars().count() <= max,
        field,
        format!("1 to {max} characters"),
    );
}

/// Checks every field and reports all that are wrong, so that the portal's
/// form marks each at once; returns the CUDA version as a number.
fn validate(req: &RegisterMachineRequest) -> Result<Option<i32>, Error> {
    let mut errors = FieldErrors::new();
    text(&mut errors, "name", &req.name, 200);
    text(&mut errors, "gpuModel", &req.gpu_model, 100);
    for (field, value, max) in [
        ("gpuCount", Some(req.gpu_count), 64),
        ("vramGib", req.vram_gib, 1024),
        ("cpuCores", Some(req.cpu_cores), 1024),
        ("ramGib", Some(req.ram_gib), 65_536),
        ("diskGib", Some(req.disk_gib), 1_048_576),
        ("uploadMbps", req.upload_mbps, 1_000_000),
        ("downloadMbps", req.download_mbps, 1_000_000),
    ] {
        if let Some(value) = value {
            errors.check(
                (1..=max).contains(&value),
                field,
                format!("must be between 1 and {max}"),
            );
        }
    }
    errors.check(
        req.country.len() == 2 && req.country.chars().all(|c| c.is_ascii_uppercase()),
        "country",
        "an ISO 3166-1 alpha-2 code such as US",
    );
    if let Some(region) = &req.region {
        errors.check(
            region.chars().count() <= 100,
            "region",
            "at most 100 characters",
        );
    }
    if let Some(cpu) = &req.cpu_model {
        text(&mut errors, "cpuModel", cpu, 200);
    }
    if let Some(driver) = &req.driver_version {
        text(&mut errors, "driverVersion", driver, 50);
    }
    errors.check(
        !req.idempotency_key.is_empty() && req.idempotency_key.len() <= 200,
        "idempotencyKey",
        "1 to 200 characters",
    );
    let cuda = match req.cuda_version.as_deref() {
        Some(v) => {
            let code = cuda_code(v);
            errors.check(
                code.is_some(),
                "cudaVersion",
                format!("{v:?} is not a version such as 12.4"),
            );
            code
        }
        None => None,
    };
    errors.into_result()?;
    Ok(cuda)
}

/// The registration request without its idempotency key, hashed: what a
/// replay must repeat. The request is hashed as sent, so that a machine
/// changed since (prices, listing, agent reports) still replays.
fn request_sha256(req: &RegisterMachineRequest) -> Result<String, Error> {
    let body = RegisterMachineRequest {
        idempotency_key: String::new(),
        ..req.clone()
    };
    let json = serde_json::to_vec(&body)
        .map_err(|e| Error::Validation(format!("request: cannot be encoded: {e}")))?;
    Ok(hex::encode(Sha256::digest(&json)))
}

/// The catalog's name and VRAM of GPU model `name`, or a VALIDATION error
/// listing the known models.
fn known_model(conn: &mut PgConnection, name: &str) -> Result<(String, i32), Error> {
    if let Some(found) = gpu_models::find(conn, name)? {
        return Ok(found);
    }
    let known = gpu_models::names(conn)?.join(", ");
    Err(Error::Validation(format!(
        "gpuModel: unknown GPU model {name:?}; known models: {known}"
    )))
}

/// Registers a machine (unlisted, unpriced) and returns its agent token once.
/// `grant` gives the token broker credentials before the row commits, so a
/// registered machine's agent can always connect; `discard` takes them away
/// again when the row does not commit. The same idempotency key
/// with the same request returns the machine without a token; with another
/// request it is a CONFLICT.
pub async fn register_machine(
    db: &Db,
    market: &Market,
    req: RegisterMachineRequest,
    grant: impl AsyncFnOnce(Uuid, String) -> Result<(), Error>,
    discard: impl AsyncFnOnce(Uuid, String) -> Result<(), Error>,
) -> Result<MachineRegistered, Error> {
    let cuda = validate(&req)?;
    let request_hash = request_sha256(&req)?;
    let market_for_lookup = market.clone();
    let (host, key, hash) = (
        req.host_tenant_id,
        req.idempotency_key.clone(),
        request_hash.clone(),
    );
    let existing = db
        .run(move |conn| {
            let id: Option<Uuid> = machines::table
                .filter(machines::host_tenant_id.eq(host))
                .filter(machines::idempotency_key.eq(&key))
                .select(machines::id)
                .first(conn)
                .optional()?;
            let Some(id) = id else {
                return Ok::<_, Error>(None);
            };
            // Machines registered before requests were recorded have no
            // hash: their replays are answered as before.
            let first: Option<String> = machine_registrations::table
                .find(id)
                .select(machine_registrations::request_sha256)
                .first(conn)
                .optional()?;
            if first.is_some_and(|first| first != hash) {
                return Err(Error::Conflict(
                    "idempotencyKey: already used to register another machine".into(),
                ));
            }
            Ok(load_machines(conn, &market_for_lookup, host, Some(id))?.pop())
        })
        .await?;
    // An unknown model is refused before the broker is touched (it is
    // checked again, in the insert's transaction, against the catalog).
    let model = req.gpu_model.clone();
    db.run(move |conn| known_model(conn, &model).map(|_| ()))
        .await?;
    if let Some(machine) = existing {
        return Ok(MachineRegistered {
            machine,
            agent_token: None,
        });
    }

    let mut secret = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut secret);
    let token = format!("gpa_{}", hex::encode(secret));
    let id = Uuid::now_v7();
    grant(id, token.clone()).await?;

    let market = market.clone();
    let token_hash = hex::encode(Sha256::digest(token.as_bytes()));
    let discarded_hash = token_hash.clone();
    let inserted = db
        .tx(move |conn| {
            let (model, model_vram) = known_model(conn, &req.gpu_model)?;
            diesel::insert_into(machines::table)
                .values(NewMachine {
                    id,
                    host_tenant_id: req.host_tenant_id,
                    name: req.name.trim(),
                    gpu_model: &model,
                    gpu_count: req.gpu_count,
                    vram_gib: req.vram_gib.unwrap_or(model_vram),
                    cpu_model: req.cpu_model.as_deref().map(str::trim).unwrap_or("unknown"),
                    cpu_cores: req.cpu_cores,
                    ram_gib: req.ram_gib,
                    disk_gib: req.disk_gib,
                    disk_type: disk_type_name(req.disk_type.unwrap_or(DiskType::Nvme)),
                    upload_mbps: req.upload_mbps.unwrap_or(100),
                    download_mbps: req.download_mbps.unwrap_or(100),
                    country: &req.country,
                    region: req.region.as_deref().map(str::trim).unwrap_or(""),
                    datacenter: req.datacenter.unwrap_or(false),
                    driver_version: req.driver_version.as_deref().map(str::trim),
                    cuda_version_code: cuda,
                    currency: &market.currency,
                    agent_token_sha256: &token_hash,
                    idempotency_key: &req.idempotency_key,
                })
                .execute(conn)?;
            diesel::insert_into(machine_registrations::table)
                .values((
                    machine_registrations::machine_id.eq(id),
                    machine_registrations::request_sha256.eq(&request_hash),
                ))
                .execute(conn)?;
            load_machines(conn, &market, req.host_tenant_id, Some(id))?
                .pop()
                .ok_or_else(|| Error::NotFound(format!("machine {id} not found")))
        })
        .await;
    let machine = match inserted {
        Ok(machine) => machine,
        Err(error) => {
            // No machine row: nothing would ever remove the broker user and
            // queue `grant` made for it (a refused registration left a live
            // agent login behind, one per attempt).
            if let Err(undo) = discard(id, discarded_hash).await {
                tracing::warn!(machine.id = %id, error = %undo, "broker access of a machine that was not registered not removed");
            }
            return Err(error);
        }
    };
    Ok(MachineRegistered {
        machine,
        agent_token: Some(token),
    })
}

pub async fn host_machines(
    db: &Db,
    market: &Market,
    host_tenant_id: TenantId,
) -> Result<Vec<Machine>, Error> {
    let market = market.clone();
    db.run(move |conn| Ok(load_machines(conn, &market, host_tenant_id, None)?))
        .await
}

/// Applies `change` to a machine of `host_tenant_id`; another host's machine
/// is as good as missing.
async fn update_own<F>(
    db: &Db,
    market: &Market,
    machine_id: MachineId,
    host_tenant_id: TenantId,
    change: F,
) -> Result<Machine, Error>
where
    F: FnOnce(&mut PgConnection, &MachineRow) -> Result<(), Error> + Send + 'static,
{
    let market = market.clone();
    db.tx(move |conn| {
        let row: MachineRow = machines::table
            .find(machine_id)
            .filter(machines::host_tenant_id.eq(host_tenant_id))
            .filter(machines::deleted_at.is_null())
            .select(MachineRow::as_select())
            .for_update()
            .first(conn)
            .optional()?
            .ok_or_else(|| Error::NotFound(format!("machine {machine_id} not found")))?;
        change(conn, &row)?;
        load_machines(conn, &market, host_tenant_id, Some(machine_id.into()))?
            .pop()
            .ok_or_else(|| Error::NotFound(format!("machine {machine_id} not found")))
    })
    .await
}

fn price(field: &str, value: Decimal) -> Result<Decimal, Error> {
    if value < Decimal::ZERO || value > Decimal::from(MAX_PRICE_PER_GPU_HOUR) {
        return Err(Error::Validation(format!(
            "{field}: must be between 0 and {MAX_PRICE_PER_GPU_HOUR}"
        )));
    }
    if value.scale() > 9 {
        return Err(Error::Validation(format!(
            "{field}: at most 9 decimal places"
        )));
    }
    Ok(value)
}

/// Sets the listing terms; absent optional terms keep their value.
pub async fn set_pricing(
    db: &Db,
    market: &Market,
    machine_id: MachineId,
    req: SetPricingRequest,
) -> Result<Machine, Error> {
    let on_demand = price("pricePerGpuHour", req.price_per_gpu_hour)?;
    let min_bid = req
        .min_bid_per_gpu_hour
        .map(|p| price("minBidPerGpuHour", p))
        .transpose()?;
    if let Some(bid) = min_bid
        && bid > on_demand
    {
        return Err(Error::Validation(
            "minBidPerGpuHour: must not exceed the on-demand pricePerGpuHour".into(),
        ));
    }
    let storage = req
        .storage_price_per_gb_month
        .map(|p| price("storagePricePerGbMonth", p))
        .transpose()?;
    let up = req
        .bandwidth_up_price_per_tb
        .map(|p| price("bandwidthUpPricePerTb", p))
        .transpose()?;
    let down = req
        .bandwidth_down_price_per_tb
        .map(|p| price("bandwidthDownPricePerTb", p))
        .transpose()?;
    if let Some(until) = req.list_until
        && until <= Utc::now()
    {
        return Err(Error::Validation("listUntil: must be in the future".into()));
    }
    let counts = req.allowed_gpu_counts.clone();
    update_own(
        db,
        market,
        machine_id,
        req.host_tenant_id,
        move |conn, row| {
            // Reserved blocks are booked within the listing (`BOOK` checks
            // the end date): an earlier end would unlist the machine under them.
            if let Some(until) = req.list_until
                && let Some(booked) = crate::bookings::booked_until(conn, machine_id)?
                && booked > until
            {
                return Err(Error::Validation(format!(
                    "listUntil: the machine is booked for reserved blocks until {}",
                    contracts::time::format(booked)
                )));
            }
            if let Some(counts) = &counts {
                let mut sorted = counts.clone();
                sorted.sort_unstable();
                sorted.dedup();
                if sorted.len() != counts.len()
                    || sorted.iter().any(|n| *n < 1 || *n > row.gpu_count)
                {
                    return Err(Error::Validation(format!(
                        "allowedGpuCounts: distinct counts between 1 and the machine's {} GPUs",
                        row.gpu_count
                    )));
                }
            }
            diesel::update(machines::table.find(machine_id))
                .set((
                    machines::price_per_gpu_hour.eq(on_demand),
                    machines::min_bid_per_gpu_hour.eq(min_bid.or(row.min_bid_per_gpu_hour)),
                    machines::storage_price_per_gb_month
                        .eq(storage.unwrap_or(row.storage_price_per_gb_month)),
                    machines::bandwidth_up_price_per_tb
                        .eq(up.unwrap_or(row.bandwidth_up_price_per_tb)),
                    machines::bandwidth_down_price_per_tb
                        .eq(down.unwrap_or(row.bandwidth_down_price_per_tb)),
                    machines::allowed_gpu_counts.eq(counts
                        .clone()
                        .unwrap_or_else(|| row.allowed_gpu_counts.clone())),
                    machines::list_until.eq(req.list_until.or(row.list_until)),
                    machines::updated_at.eq(diesel::dsl::now),
                ))
                .execute(conn)?;
            // Slice prices derived from the GPU price move with it.
            crate::mig::refresh_free(conn, machine_id)?;
            Ok(())
        },
    )
    .await
}

/// Issues a new agent token, shown once. The new generation's broker user
/// is made first, then the stored hash changes (from then on the catalog
/// takes reports only from the new user), then `retire` is given the old
/// hash: it deletes the old user and closes every connection made with the
/// old token before this returns. A deleted machine is `NOT_FOUND`; when it
/// is deleted while this runs, the new generation's access is taken away
/// again (`discard`) and the answer is `NOT_FOUND` too.
pub async fn rotate_agent_token(
    db: &Db,
    machine_id: MachineId,
    host_tenant_id: TenantId,
    grant: impl AsyncFnOnce(Uuid, String) -> Result<(), Error>,
    retire: impl AsyncFnOnce(Uuid, String) -> Result<(), Error>,
    discard: impl AsyncFnOnce(Uuid, String) -> Result<(), Error>,
) -> Result<String, Error> {
    let old = crate::agents::owned_token_hash(db, machine_id, host_tenant_id).await?;
    let mut secret = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut secret);
    let token = format!("gpa_{}", hex::encode(secret));
    grant(machine_id.into(), token.clone()).await?;
    let hash = hex::encode(Sha256::digest(token.as_bytes()));
    let new_hash = hash.clone();
    let updated = db
        .run(move |conn| {
            diesel::update(machines::table.find(machine_id))
                .filter(machines::deleted_at.is_null())
                .set((
                    machines::agent_token_sha256.eq(hash),
                    machines::updated_at.eq(diesel::dsl::now),
                ))
                .execute(conn)
                .map_err(Error::from)
        })
        .await?;
    if updated == 0 {
        // Deleted since the check above: the deletion removed what it knew
        // of, not the user and queue `grant` has just made.
        discard(machine_id.into(), new_hash).await?;
        tracing::warn!(machine.id = %machine_id, "agent token rotation raced the machine's deletion");
        return Err(Error::NotFound(format!("machine {machine_id} not found")));
    }
    retire(machine_id.into(), old).await?;
    tracing::info!(machine.id = %machine_id, "agent token rotated");
    Ok(token)
}

/// Deletes a machine of `host_tenant_id`. Its reserved blocks that have not
/// ended are cancelled first (`catalog.bookings.cancelled`, the instances
/// inside a running one preempted). Refused with `CONFLICT` while
/// any of its GPUs are held (a live rental), and then nothing is cancelled;
/// otherwise, under the machine's
/// row lock (which an allocation takes too, so none can slip in), it is
/// unlisted and marked deleted: its history stays (allocations, gaps and
/// usage refer to it), but its host no longer sees it and it can be neither
/// priced nor listed again. Then `remove` is given the stored token hash and
/// takes away the broker's queues `cmd.<id>` (and legacy `host.<id>`) and
/// the agent's user, closing its connections. Repeating it finishes a removal that failed half-way.
pub async fn delete_machine(
    db: &Db,
    exchange: &str,
    machine_id: MachineId,
    host_tenant_id: TenantId,
    remove: impl AsyncFnOnce(Uuid, String) -> Result<(), Error>,
) -> Result<(), Error> {
    let exchange = exchange.to_owned();
    let hash = db
        .tx(move |conn| {
            let hash: String = machines::table
                .find(machine_id)
                .filter(machines::host_tenant_id.eq(host_tenant_id))
                .select(machines::agent_token_sha256)
                .for_update()
                .first(conn)
                .optional()?
                .ok_or_else(|| Error::NotFound(format!("machine {machine_id} not found")))?;
            crate::bookings::cancel_machine(
                conn,
                &exchange,
                machine_id,
                host_tenant_id,
                "the host deleted the machine",
            )?;
            let live: i64 = allocations::table
                .filter(allocations::machine_id.eq(machine_id))
                .filter(allocations::released_at.is_null())
                .filter(allocations::preempted_at.is_null())
                .count()
                .get_result(conn)?;
            if live > 0 {
                return Err(Error::Conflict(format!(
                    "machine {machine_id} has {live} live rental(s); delete it once they have ended"
                )));
            }
            diesel::update(machines::table.find(machine_id))
                .set((
                    machines::listed.eq(false),
                    machines::updated_at.eq(diesel::dsl::now),
                ))
                .execute(conn)?;
            diesel::update(machines::table.find(machine_id))
                .filter(machines::deleted_at.is_null())
                .set(machines::deleted_at.eq(diesel::dsl::now))
                .execute(conn)?;
            Ok(hash)
        })
        .await?;
    remove(machine_id.into(), hash).await?;
    tracing::info!(machine.id = %machine_id, "machine deleted");
    Ok(())
}

/// Lists or unlists a host's machine. Unlisting cancels its reserved blocks
/// that have not ended, in the same transaction (`catalog.bookings.cancelled`).
pub async fn list_machine(
    db: &Db,
    market: &Market,
    exchange: &str,
    machine_id: MachineId,
    host_tenant_id: TenantId,
    listed: bool,
) -> Result<Machine, Error> {
    let exchange = exchange.to_owned();
    update_own(db, market, machine_id, host_tenant_id, move |conn, row| {
        if listed && row.price_per_gpu_hour.is_none() {
            return Err(Error::Validation(
                "pricePerGpuHour: set the machine's pricing before listing it".into(),
            ));
        }
        if listed
            && let Some(until) = row.list_until
            && until <= Utc::now()
        {
            return Err(Error::Validation(
                "listUntil: the listing end date has passed; set a new one".into(),
            ));
        }
        diesel::update(machines::table.find(machine_id))
            .set((
                machines::listed.eq(listed),
                machines::updated_at.eq(diesel::dsl::now),
            ))
            .execute(conn)?;
        if !listed {
            crate::bookings::cancel_machine(
                conn,
                &exchange,
                machine_id,
                host_tenant_id,
                "the host took the machine off the market",
            )?;
        }
        Ok(())
    })
    .await
}
