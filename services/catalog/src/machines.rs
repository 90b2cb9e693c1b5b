//! Machines as their hosts see them: registration, pricing, listing.

use chrono::{DateTime, Utc};
use contracts::api::{Machine, MachineRegistered, RegisterMachineRequest};
use diesel::prelude::*;
use platform::Db;
use rand::RngCore;
use rust_decimal::Decimal;
use schema::catalog::machines;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::Error;

/// Most a GPU-hour may be listed at; a guard against a typo of a few zeros.
const MAX_PRICE_PER_GPU_HOUR: i64 = 1000;

#[derive(Queryable, Selectable)]
#[diesel(table_name = machines)]
pub struct MachineRow {
    pub id: Uuid,
    pub host_tenant_id: Uuid,
    pub name: String,
    pub gpu_model: String,
    pub gpu_count: i32,
    pub gpus_allocated: i32,
    pub vram_gib: i32,
    pub cpu_cores: i32,
    pub ram_gib: i32,
    pub disk_gib: i32,
    pub country: String,
    pub price_per_gpu_hour: Option<Decimal>,
    pub currency: String,
    pub listed: bool,
    pub created_at: DateTime<Utc>,
}

impl From<MachineRow> for Machine {
    fn from(m: MachineRow) -> Self {
        Machine {
            id: m.id,
            host_tenant_id: m.host_tenant_id,
            name: m.name,
            gpu_model: m.gpu_model,
            gpu_count: m.gpu_count,
            gpus_allocated: m.gpus_allocated,
            vram_gib: m.vram_gib,
            cpu_cores: m.cpu_cores,
            ram_gib: m.ram_gib,
            disk_gib: m.disk_gib,
            country: m.country,
            price_per_gpu_hour: m.price_per_gpu_hour.map(|p| p.normalize()),
            currency: m.currency,
            listed: m.listed,
            created_at: m.created_at,
        }
    }
}

#[derive(Insertable)]
#[diesel(table_name = machines)]
struct NewMachine<'a> {
    id: Uuid,
    host_tenant_id: Uuid,
    name: &'a str,
    gpu_model: &'a str,
    gpu_count: i32,
    vram_gib: i32,
    cpu_cores: i32,
    ram_gib: i32,
    disk_gib: i32,
    country: &'a str,
    currency: &'a str,
    agent_token_sha256: &'a str,
    idempotency_key: &'a str,
}

fn validate(req: &RegisterMachineRequest) -> Result<(), Error> {
    let name = req.name.trim();
    if name.is_empty() || name.chars().count() > 200 {
        return Err(Error::Validation("name: 1 to 200 characters".into()));
    }
    let model = req.gpu_model.trim();
    if model.is_empty() || model.chars().count() > 100 {
        return Err(Error::Validation("gpuModel: 1 to 100 characters".into()));
    }
    for (field, value, max) in [
        ("gpuCount", req.gpu_count, 64),
        ("vramGib", req.vram_gib, 1024),
        ("cpuCores", req.cpu_cores, 1024),
        ("ramGib", req.ram_gib, 65_536),
        ("diskGib", req.disk_gib, 1_048_576),
    ] {
        if value < 1 || value > max {
            return Err(Error::Validation(format!(
                "{field}: must be between 1 and {max}"
            )));
        }
    }
    if req.country.len() != 2 || !req.country.chars().all(|c| c.is_ascii_uppercase()) {
        return Err(Error::Validation(
            "country: an ISO 3166-1 alpha-2 code such as US".into(),
        ));
    }
    if req.idempotency_key.is_empty() || req.idempotency_key.len() > 200 {
        return Err(Error::Validation(
            "idempotencyKey: 1 to 200 characters".into(),
        ));
    }
    Ok(())
}

/// Registers a machine (unlisted, unpriced) and returns its agent token once.
pub async fn register_machine(
    db: &Db,
    req: RegisterMachineRequest,
    currency: String,
) -> Result<MachineRegistered, Error> {
    validate(&req)?;
    db.tx(move |conn| {
        let existing: Option<MachineRow> = machines::table
            .filter(machines::host_tenant_id.eq(req.host_tenant_id))
            .filter(machines::idempotency_key.eq(&req.idempotency_key))
            .select(MachineRow::as_select())
            .first(conn)
            .optional()?;
        if let Some(machine) = existing {
            return Ok(MachineRegistered {
                machine: machine.into(),
                agent_token: None,
            });
        }
        let mut secret = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut secret);
        let token = format!("gpa_{}", hex::encode(secret));
        let id = Uuid::now_v7();
        diesel::insert_into(machines::table)
            .values(NewMachine {
                id,
                host_tenant_id: req.host_tenant_id,
                name: req.name.trim(),
                gpu_model: req.gpu_model.trim(),
                gpu_count: req.gpu_count,
                vram_gib: req.vram_gib,
                cpu_cores: req.cpu_cores,
                ram_gib: req.ram_gib,
                disk_gib: req.disk_gib,
                country: &req.country,
                currency: &currency,
                agent_token_sha256: &hex::encode(Sha256::digest(token.as_bytes())),
                idempotency_key: &req.idempotency_key,
            })
            .execute(conn)?;
        let machine = machines::table
            .find(id)
            .select(MachineRow::as_select())
            .first(conn)?;
        Ok(MachineRegistered {
            machine: machine.into(),
            agent_token: Some(token),
        })
    })
    .await
}

pub async fn host_machines(db: &Db, host_tenant_id: Uuid) -> Result<Vec<Machine>, Error> {
    db.run(move |conn| {
        let rows: Vec<MachineRow> = machines::table
            .filter(machines::host_tenant_id.eq(host_tenant_id))
            .order(machines::created_at.asc())
            .select(MachineRow::as_select())
            .load(conn)?;
        Ok(rows.into_iter().map(Machine::from).collect())
    })
    .await
}

/// Applies `change` to a machine of `host_tenant_id`; another host's machine
/// is as good as missing.
async fn update_own<F>(
    db: &Db,
    machine_id: Uuid,
    host_tenant_id: Uuid,
    change: F,
) -> Result<Machine, Error>
where
    F: FnOnce(&mut PgConnection, &MachineRow) -> Result<(), Error> + Send + 'static,
{
    db.tx(move |conn| {
        let row: MachineRow = machines::table
            .find(machine_id)
            .filter(machines::host_tenant_id.eq(host_tenant_id))
            .select(MachineRow::as_select())
            .for_update()
            .first(conn)
            .optional()?
            .ok_or_else(|| Error::NotFound(format!("machine {machine_id} not found")))?;
        change(conn, &row)?;
        let row = machines::table
            .find(machine_id)
            .select(MachineRow::as_select())
            .first(conn)?;
        Ok(row.into())
    })
    .await
}

pub async fn set_pricing(
    db: &Db,
    machine_id: Uuid,
    host_tenant_id: Uuid,
    price: Decimal,
) -> Result<Machine, Error> {
    if price < Decimal::ZERO || price > Decimal::from(MAX_PRICE_PER_GPU_HOUR) {
        return Err(Error::Validation(format!(
            "pricePerGpuHour: must be between 0 and {MAX_PRICE_PER_GPU_HOUR}"
        )));
    }
    if price.scale() > 9 {
        return Err(Error::Validation(
            "pricePerGpuHour: at most 9 decimal places".into(),
        ));
    }
    update_own(db, machine_id, host_tenant_id, move |conn, _| {
        diesel::update(machines::table.find(machine_id))
            .set((
                machines::price_per_gpu_hour.eq(price),
                machines::updated_at.eq(diesel::dsl::now),
            ))
            .execute(conn)?;
        Ok(())
    })
    .await
}

pub async fn list_machine(
    db: &Db,
    machine_id: Uuid,
    host_tenant_id: Uuid,
    listed: bool,
) -> Result<Machine, Error> {
    update_own(db, machine_id, host_tenant_id, move |conn, row| {
        if listed && row.price_per_gpu_hour.is_none() {
            return Err(Error::Validation(
                "pricePerGpuHour: set the machine's pricing before listing it".into(),
            ));
        }
        diesel::update(machines::table.find(machine_id))
            .set((
                machines::listed.eq(listed),
                machines::updated_at.eq(diesel::dsl::now),
            ))
            .execute(conn)?;
        Ok(())
    })
    .await
}
