//! MIG slices on the catalog's side (docs/mig.md): the profiles of each GPU
//! model, each machine's per-GPU modes and prices, which memory slices of
//! which GPU are held (`gpu_holds`, one row per slice, so the primary key
//! rejects an overlap), where a new slice or whole GPU goes, and the free
//! slices per profile that offer search reads (`mig_free`).
//!
//! Everything here that changes holds, modes or prices runs in the caller's
//! transaction, under the machine's row lock, and ends with [`refresh_free`].

use std::collections::BTreeMap;

use contracts::api::{MachineGpu, MigPrice, SetGpuModeRequest, SetMigPricesRequest};
use contracts::ids::{InstanceId, MachineId, OrderId, TenantId};
use contracts::mig::{
    self as rules, GpuMode, GpuSlots, HeldSlice, LayoutSlot, MAX_PROFILE_NAME, Mask, MigProfile,
    MigSlice,
};
use diesel::prelude::*;
use platform::Db;
use rust_decimal::Decimal;
use schema::catalog::{
    agent_reports, allocations, gpu_holds, machines, mig_free, mig_gpus, mig_prices, mig_profiles,
};
use uuid::Uuid;

use crate::Error;

/// The most a slice-hour may cost: the GPU-hour bound.
const MAX_PRICE_PER_HOUR: i64 = contracts::bounds::GPU_HOUR_PRICE.max_units;

/// The MIG profiles of `gpu_model`, smallest first.
pub fn profiles(conn: &mut PgConnection, gpu_model: &str) -> Result<Vec<MigProfile>, Error> {
    type Row = (String, i16, i16, i32, Vec<i16>, i32);
    let rows: Vec<Row> = mig_profiles::table
        .filter(mig_profiles::gpu_model.eq(gpu_model))
        .order((
            mig_profiles::memory_slices.asc(),
            mig_profiles::compute_slices.asc(),
        ))
        .select((
            mig_profiles::name,
            mig_profiles::compute_slices,
            mig_profiles::memory_slices,
            mig_profiles::memory_gib,
            mig_profiles::placements,
            mig_profiles::nvml_profile,
        ))
        .load(conn)?;
    Ok(rows.into_iter().map(profile_from).collect())
}

fn profile_from(
    (name, compute, memory, gib, placements, nvml): (String, i16, i16, i32, Vec<i16>, i32),
) -> MigProfile {
    MigProfile {
        name,
        compute_slices: u8::try_from(compute).unwrap_or(0),
        memory_slices: u8::try_from(memory).unwrap_or(0),
        memory_gib: gib,
        placements: placements
            .into_iter()
            .filter_map(|s| u8::try_from(s).ok())
            .collect(),
        nvml_profile: u32::try_from(nvml).unwrap_or(0),
    }
}

/// Every model's profiles, for the GPU model catalog.
pub fn all_profiles(conn: &mut PgConnection) -> Result<BTreeMap<String, Vec<MigProfile>>, Error> {
    type Row = (String, (String, i16, i16, i32, Vec<i16>, i32));
    let rows: Vec<Row> = mig_profiles::table
        .order((
            mig_profiles::gpu_model.asc(),
            mig_profiles::memory_slices.asc(),
            mig_profiles::compute_slices.asc(),
        ))
        .select((
            mig_profiles::gpu_model,
            (
                mig_profiles::name,
                mig_profiles::compute_slices,
                mig_profiles::memory_slices,
                mig_profiles::memory_gib,
                mig_profiles::placements,
                mig_profiles::nvml_profile,
            ),
        ))
        .load(conn)?;
    let mut out: BTreeMap<String, Vec<MigProfile>> = BTreeMap::new();
    for (model, row) in rows {
        out.entry(model).or_default().push(profile_from(row));
    }
    Ok(out)
}

/// One GPU's configuration row.
struct ModeRow {
    index: u32,
    mode: GpuMode,
    layout: Vec<LayoutSlot>,
}

fn modes(conn: &mut PgConnection, machine_id: MachineId) -> Result<Vec<ModeRow>, Error> {
    let rows: Vec<(i16, String, serde_json::Value)> = mig_gpus::table
        .filter(mig_gpus::machine_id.eq(machine_id))
        .order(mig_gpus::gpu_index.asc())
        .select((mig_gpus::gpu_index, mig_gpus::mode, mig_gpus::layout))
        .load(conn)?;
    Ok(rows
        .into_iter()
        .map(|(index, mode, layout)| ModeRow {
            index: u32::try_from(index).unwrap_or(0),
            mode: GpuMode::parse(&mode).unwrap_or(GpuMode::MigAuto),
            layout: serde_json::from_value(layout).unwrap_or_default(),
        })
        .collect())
}

/// Held memory slices per GPU index.
fn held_masks(
    conn: &mut PgConnection,
    machine_id: MachineId,
) -> Result<BTreeMap<u32, Mask>, Error> {
    let rows: Vec<(i16, i16)> = gpu_holds::table
        .filter(gpu_holds::machine_id.eq(machine_id))
        .select((gpu_holds::gpu_index, gpu_holds::memory_slice))
        .load(conn)?;
    let mut out: BTreeMap<u32, Mask> = BTreeMap::new();
    for (index, slice) in rows {
        if let (Ok(i), Ok(s)) = (u32::try_from(index), u8::try_from(slice)) {
            *out.entry(i).or_default() |= 1 << s;
        }
    }
    Ok(out)
}

/// The machine's MIG GPUs as placement sees them.
fn slots(conn: &mut PgConnection, machine_id: MachineId) -> Result<Vec<GpuSlots>, Error> {
    let held = held_masks(conn, machine_id)?;
    Ok(modes(conn, machine_id)?
        .into_iter()
        .map(|m| GpuSlots {
            index: m.index,
            held: held.get(&m.index).copied().unwrap_or(0),
            layout: (m.mode == GpuMode::MigFixed).then_some(m.layout),
        })
        .collect())
}

/// Holds `mask` of GPU `index` for `holder`. The primary key refuses a slice
/// someone else holds: callers chose free slices under the machine's lock, so
/// a refusal here is a bug caught, reported as a conflict.
fn hold(
    conn: &mut PgConnection,
    machine_id: MachineId,
    holder: OrderId,
    index: u32,
    mask: Mask,
) -> Result<(), Error> {
    let index =
        i16::try_from(index).map_err(|_| Error::Validation("gpu index out of range".into()))?;
    let rows: Vec<_> = (0..rules::MEMORY_SLICES)
        .filter(|s| mask & (1 << s) != 0)
        .map(|s| {
            (
                gpu_holds::machine_id.eq(machine_id),
                gpu_holds::gpu_index.eq(index),
                gpu_holds::memory_slice.eq(i16::from(s)),
                gpu_holds::holder.eq(holder),
            )
        })
        .collect();
    diesel::insert_into(gpu_holds::table)
        .values(rows)
        .execute(conn)
        .map_err(|e| match e {
            diesel::result::Error::DatabaseError(
                diesel::result::DatabaseErrorKind::UniqueViolation,
                _,
            ) => Error::Conflict("GPU slices taken concurrently; retry".into()),
            other => Error::Database(other),
        })?;
    Ok(())
}

/// Gives back everything `holder` holds.
pub fn release_holds(conn: &mut PgConnection, holder: OrderId) -> Result<(), Error> {
    diesel::delete(gpu_holds::table.filter(gpu_holds::holder.eq(holder))).execute(conn)?;
    Ok(())
}

/// Holds whole GPUs `indices` for `holder`, all eight slices of each. The
/// caller chose them (whole-mode, free: [`crate::gpu_choice`]) under the
/// machine's lock; a GPU held meanwhile is refused by the primary key.
pub fn hold_whole(
    conn: &mut PgConnection,
    machine_id: MachineId,
    holder: OrderId,
    indices: &[u32],
) -> Result<(), Error> {
    for &index in indices {
        hold(conn, machine_id, holder, index, rules::WHOLE)?;
    }
    Ok(())
}

/// A slice's price per hour on a machine: the host's price for the profile,
/// or the GPU price by memory share (`memory_slices / 8`).
fn slice_price(
    prices: &BTreeMap<String, Decimal>,
    gpu_price: Decimal,
    profile: &MigProfile,
) -> Decimal {
    prices.get(&profile.name).copied().unwrap_or_else(|| {
        (gpu_price * Decimal::from(profile.memory_slices) / Decimal::from(rules::MEMORY_SLICES))
            .round_dp(9)
    })
}

fn prices(
    conn: &mut PgConnection,
    machine_id: MachineId,
) -> Result<BTreeMap<String, Decimal>, Error> {
    Ok(mig_prices::table
        .filter(mig_prices::machine_id.eq(machine_id))
        .select((mig_prices::profile, mig_prices::price_per_hour))
        .load::<(String, Decimal)>(conn)?
        .into_iter()
        .collect())
}

/// A slice of `profile_name` for `holder`, placed best-fit on the machine's
/// MIG GPUs, and its price per hour.
pub fn take_slice(
    conn: &mut PgConnection,
    machine_id: MachineId,
    gpu_model: &str,
    gpu_price: Decimal,
    holder: OrderId,
    profile_name: &str,
) -> Result<(MigSlice, Decimal), Error> {
    let all = profiles(conn, gpu_model)?;
    let Some(profile) = all.iter().find(|p| p.name == profile_name) else {
        return Err(if all.is_empty() {
            Error::Validation(format!("migProfile: the machine's {gpu_model} has no MIG"))
        } else {
            Error::Validation(format!(
                "migProfile: {profile_name:?} is not a MIG profile of {gpu_model}; it has {}",
                all.iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        });
    };
    agent_makes_slices(conn, machine_id)?;
    let gpus = slots(conn, machine_id)?;
    let Some((index, start)) = rules::best_fit(&gpus, profile) else {
        return Err(Error::InsufficientCapacity(format!(
            "no free placement of {profile_name} on the machine's {} MIG GPUs",
            gpus.len()
        )));
    };
    let slice = MigSlice {
        profile: profile.name.clone(),
        gpu_index: index,
        start,
        size: profile.memory_slices,
        nvml_profile: profile.nvml_profile,
    };
    hold(conn, machine_id, holder, index, slice.mask())?;
    let price = slice_price(&prices(conn, machine_id)?, gpu_price, profile);
    Ok((slice, price))
}

/// Rewrites the machine's free slices per profile (and their prices) from
/// its holds, modes and prices. Called under the machine's row lock.
pub fn refresh_free(conn: &mut PgConnection, machine_id: MachineId) -> Result<(), Error> {
    diesel::delete(mig_free::table.filter(mig_free::machine_id.eq(machine_id))).execute(conn)?;
    let gpus = slots(conn, machine_id)?;
    if gpus.is_empty() {
        return Ok(());
    }
    let (model, gpu_price): (String, Option<Decimal>) = machines::table
        .find(machine_id)
        .select((machines::gpu_model, machines::price_per_gpu_hour))
        .first(conn)?;
    let prices = prices(conn, machine_id)?;
    let rows: Vec<_> = profiles(conn, &model)?
        .iter()
        .map(|p| {
            (
                mig_free::machine_id.eq(machine_id),
                mig_free::profile.eq(p.name.clone()),
                mig_free::memory_gib.eq(p.memory_gib),
                mig_free::compute_slices.eq(i16::from(p.compute_slices)),
                mig_free::memory_slices.eq(i16::from(p.memory_slices)),
                mig_free::free.eq(rules::free_count(&gpus, p)),
                mig_free::price_per_hour.eq(slice_price(&prices, gpu_price.unwrap_or_default(), p)),
            )
        })
        .collect();
    diesel::insert_into(mig_free::table)
        .values(rows)
        .execute(conn)?;
    Ok(())
}

/// The slices offers show: per machine, per profile with at least
/// `min_memory_gib`, free count and price.
pub fn offer_slices(
    conn: &mut PgConnection,
    machine_ids: &[Uuid],
    min_memory_gib: Option<i32>,
) -> Result<BTreeMap<Uuid, Vec<contracts::api::MigOffer>>, Error> {
    if machine_ids.is_empty() {
        return Ok(BTreeMap::new());
    }
    type Row = (Uuid, String, i32, i16, i16, i32, Decimal);
    let rows: Vec<Row> = mig_free::table
        .filter(mig_free::machine_id.eq_any(machine_ids))
        .filter(mig_free::memory_gib.ge(min_memory_gib.unwrap_or(0)))
        .order((
            mig_free::machine_id,
            mig_free::memory_slices,
            mig_free::compute_slices,
        ))
        .select((
            mig_free::machine_id,
            mig_free::profile,
            mig_free::memory_gib,
            mig_free::compute_slices,
            mig_free::memory_slices,
            mig_free::free,
            mig_free::price_per_hour,
        ))
        .load(conn)?;
    let mut out: BTreeMap<Uuid, Vec<contracts::api::MigOffer>> = BTreeMap::new();
    for (machine, profile, gib, compute, memory, free, price) in rows {
        out.entry(machine)
            .or_default()
            .push(contracts::api::MigOffer {
                profile,
                memory_gib: gib,
                compute_slices: u8::try_from(compute).unwrap_or(0),
                memory_slices: u8::try_from(memory).unwrap_or(0),
                free,
                price_per_hour: price.normalize(),
            });
    }
    Ok(out)
}

/// The machine of `host`, locked for a change (`lock`) or only read; another
/// host's machine is as good as missing. Answers its model and GPU count.
fn own(
    conn: &mut PgConnection,
    machine_id: MachineId,
    host: TenantId,
    lock: bool,
) -> Result<(String, i32), Error> {
    let query = machines::table
        .find(machine_id)
        .filter(machines::host_tenant_id.eq(host))
        .filter(machines::deleted_at.is_null())
        .select((machines::gpu_model, machines::gpu_count));
    let found = if lock {
        query.for_update().first(conn).optional()?
    } else {
        query.first(conn).optional()?
    };
    found.ok_or_else(|| Error::NotFound(format!("machine {machine_id} not found")))
}

/// Each GPU of the machine: mode, layout, and what is rented on it.
fn gpus_view(
    conn: &mut PgConnection,
    machine_id: MachineId,
    gpu_count: i32,
) -> Result<Vec<MachineGpu>, Error> {
    let modes: BTreeMap<u32, ModeRow> = modes(conn, machine_id)?
        .into_iter()
        .map(|m| (m.index, m))
        .collect();
    type Held = (
        i16,
        Uuid,
        Option<String>,
        Option<i16>,
        Option<i16>,
        Option<Uuid>,
    );
    let held: Vec<Held> = gpu_holds::table
        .inner_join(allocations::table)
        .filter(gpu_holds::machine_id.eq(machine_id))
        .select((
            gpu_holds::gpu_index,
            gpu_holds::holder,
            allocations::mig_profile,
            allocations::mig_start,
            allocations::mig_size,
            allocations::instance_id,
        ))
        .distinct()
        .load(conn)?;
    let mut out = Vec::new();
    for index in 0..u32::try_from(gpu_count).unwrap_or(0) {
        let mode = modes.get(&index);
        let mut slices: Vec<HeldSlice> = Vec::new();
        let mut rented_whole = false;
        for (i, holder, profile, start, size, instance) in &held {
            if u32::try_from(*i).ok() != Some(index) {
                continue;
            }
            match (profile, start, size) {
                (Some(profile), Some(start), Some(size)) => slices.push(HeldSlice {
                    profile: profile.clone(),
                    start: u8::try_from(*start).unwrap_or(0),
                    size: u8::try_from(*size).unwrap_or(0),
                    // A start attempt's key is no instance; the order's
                    // instance is filled in by ordering when it has one.
                    instance_id: instance.map(InstanceId),
                }),
                _ => {
                    let _ = holder;
                    rented_whole = true;
                }
            }
        }
        slices.sort_by_key(|s| s.start);
        out.push(MachineGpu {
            index,
            mode: mode.map_or(GpuMode::Whole, |m| m.mode),
            layout: mode.map(|m| m.layout.clone()).unwrap_or_default(),
            rented_whole,
            slices,
        });
    }
    Ok(out)
}

pub async fn machine_gpus(
    db: &Db,
    machine_id: MachineId,
    host: TenantId,
) -> Result<Vec<MachineGpu>, Error> {
    // A read: ownership without the row lock, so a portal polling its
    // machines never holds up their allocations.
    db.run(move |conn| {
        let (_, gpu_count) = own(conn, machine_id, host, false)?;
        gpus_view(conn, machine_id, gpu_count)
    })
    .await
}

/// A host sets one GPU whole or MIG. The GPU must be free: a mode never
/// changes under a rental.
pub async fn set_gpu_mode(
    db: &Db,
    machine_id: MachineId,
    req: SetGpuModeRequest,
) -> Result<Vec<MachineGpu>, Error> {
    if req.layout.len() > 8 {
        return Err(Error::Validation(
            "layout: at most 8 slots (one per memory slice)".into(),
        ));
    }
    match (req.mode, req.layout.is_empty()) {
        (GpuMode::MigFixed, true) => {
            return Err(Error::Validation(
                "layout: a fixed MIG layout needs at least one slot".into(),
            ));
        }
        (GpuMode::Whole | GpuMode::MigAuto, false) => {
            return Err(Error::Validation("layout: only for mode mig_fixed".into()));
        }
        _ => {}
    }
    if req
        .layout
        .iter()
        .any(|s| s.profile.len() > MAX_PROFILE_NAME)
    {
        return Err(Error::Validation(format!(
            "layout: profile names are at most {MAX_PROFILE_NAME} characters"
        )));
    }
    db.tx(move |conn| {
        let (model, gpu_count) = own(conn, machine_id, req.host_tenant_id, true)?;
        if i64::from(req.gpu_index) >= i64::from(gpu_count) {
            return Err(Error::Validation(format!(
                "gpuIndex: the machine has GPUs 0 to {}",
                gpu_count - 1
            )));
        }
        let index = i16::try_from(req.gpu_index)
            .map_err(|_| Error::Validation("gpuIndex: out of range".into()))?;
        if req.mode.is_mig() {
            let all = profiles(conn, &model)?;
            if all.is_empty() {
                return Err(Error::Validation(format!("mode: {model} has no MIG")));
            }
            rules::check_layout(&all, &req.layout)
                .map_err(|e| Error::Validation(format!("layout: {e}")))?;
            agent_makes_slices(conn, machine_id)?;
        }
        let busy: i64 = gpu_holds::table
            .filter(gpu_holds::machine_id.eq(machine_id))
            .filter(gpu_holds::gpu_index.eq(index))
            .count()
            .get_result(conn)?;
        let current = modes(conn, machine_id)?
            .into_iter()
            .find(|m| m.index == req.gpu_index);
        let unchanged = current.as_ref().map_or(GpuMode::Whole, |m| m.mode) == req.mode
            && current
                .as_ref()
                .map(|m| m.layout.clone())
                .unwrap_or_default()
                == req.layout;
        if busy > 0 && !unchanged {
            return Err(Error::Conflict(format!(
                "GPU {} is rented; change its mode when it is free",
                req.gpu_index
            )));
        }
        // Reserved blocks book whole GPUs: one booked from now on stays whole.
        if req.mode.is_mig()
            && let Some(until) = booked_until(conn, machine_id, index)?
        {
            return Err(Error::Conflict(format!(
                "GPU {} is booked for reserved blocks until {}; it stays whole until then",
                req.gpu_index,
                contracts::time::format(until)
            )));
        }
        if req.mode.is_mig() {
            diesel::insert_into(mig_gpus::table)
                .values((
                    mig_gpus::machine_id.eq(machine_id),
                    mig_gpus::gpu_index.eq(index),
                    mig_gpus::mode.eq(req.mode.as_str()),
                    mig_gpus::layout
                        .eq(serde_json::to_value(&req.layout)
                            .map_err(platform::PlatformError::from)?),
                ))
                .on_conflict((mig_gpus::machine_id, mig_gpus::gpu_index))
                .do_update()
                .set((
                    mig_gpus::mode.eq(req.mode.as_str()),
                    mig_gpus::layout
                        .eq(serde_json::to_value(&req.layout)
                            .map_err(platform::PlatformError::from)?),
                    mig_gpus::updated_at.eq(diesel::dsl::now),
                ))
                .execute(conn)?;
        } else {
            diesel::delete(mig_gpus::table.find((machine_id, index))).execute(conn)?;
        }
        let count: i64 = mig_gpus::table
            .filter(mig_gpus::machine_id.eq(machine_id))
            .count()
            .get_result(conn)?;
        // The whole-GPU counter's bound moves with it; the CHECK
        // (gpus_allocated + mig_gpus <= gpu_count) refuses a GPU that whole
        // rentals still count on.
        diesel::update(machines::table.find(machine_id))
            .set((
                machines::mig_gpus.eq(i32::try_from(count).unwrap_or(i32::MAX)),
                machines::updated_at.eq(diesel::dsl::now),
            ))
            .execute(conn)
            .map_err(|e| match e {
                diesel::result::Error::DatabaseError(
                    diesel::result::DatabaseErrorKind::CheckViolation,
                    _,
                ) => Error::Conflict("every other GPU is rented whole; free one first".into()),
                other => Error::Database(other),
            })?;
        refresh_free(conn, machine_id)?;
        gpus_view(conn, machine_id, gpu_count)
    })
    .await
}

/// The end of the last booked period of GPU `index` that has not ended.
fn booked_until(
    conn: &mut PgConnection,
    machine_id: MachineId,
    index: i16,
) -> Result<Option<chrono::DateTime<chrono::Utc>>, Error> {
    #[derive(QueryableByName)]
    struct Until {
        #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Timestamptz>)]
        until: Option<chrono::DateTime<chrono::Utc>>,
    }
    let found: Vec<Until> = diesel::sql_query(
        "SELECT max(upper(period)) AS until FROM catalog.booked_gpus
         WHERE machine_id = $1 AND gpu_index = $2 AND upper(period) > now()",
    )
    .bind::<diesel::sql_types::Uuid, _>(machine_id)
    .bind::<diesel::sql_types::Int2, _>(index)
    .load(conn)?;
    Ok(found.into_iter().next().and_then(|u| u.until))
}

/// Replaces a machine's per-profile prices.
pub async fn set_mig_prices(
    db: &Db,
    machine_id: MachineId,
    req: SetMigPricesRequest,
) -> Result<Vec<MigPrice>, Error> {
    if req.prices.len() > 32 {
        return Err(Error::Validation("prices: at most 32".into()));
    }
    for p in &req.prices {
        if p.price_per_hour < Decimal::ZERO
            || p.price_per_hour > Decimal::from(MAX_PRICE_PER_HOUR)
            || p.price_per_hour.scale() > 9
        {
            return Err(Error::Validation(format!(
                "prices: {}: between 0 and {} with at most 9 decimal places",
                p.profile, MAX_PRICE_PER_HOUR
            )));
        }
    }
    db.tx(move |conn| {
        let (model, _) = own(conn, machine_id, req.host_tenant_id, true)?;
        let all = profiles(conn, &model)?;
        let mut seen = Vec::new();
        for p in &req.prices {
            if !all.iter().any(|x| x.name == p.profile) {
                return Err(Error::Validation(format!(
                    "prices: {:?} is not a MIG profile of {model}",
                    p.profile.chars().take(MAX_PROFILE_NAME).collect::<String>()
                )));
            }
            if seen.contains(&&p.profile) {
                return Err(Error::Validation(format!(
                    "prices: {} given twice",
                    p.profile
                )));
            }
            seen.push(&p.profile);
        }
        diesel::delete(mig_prices::table.filter(mig_prices::machine_id.eq(machine_id)))
            .execute(conn)?;
        let rows: Vec<_> = req
            .prices
            .iter()
            .map(|p| {
                (
                    mig_prices::machine_id.eq(machine_id),
                    mig_prices::profile.eq(p.profile.clone()),
                    mig_prices::price_per_hour.eq(p.price_per_hour),
                )
            })
            .collect();
        diesel::insert_into(mig_prices::table)
            .values(rows)
            .execute(conn)?;
        refresh_free(conn, machine_id)?;
        Ok(req
            .prices
            .iter()
            .map(|p| MigPrice {
                profile: p.profile.clone(),
                price_per_hour: p.price_per_hour.normalize(),
            })
            .collect())
    })
    .await
}

/// Refuses slices on a machine whose agent has reported that it cannot make
/// them (an agent from before MIG, or a real host built without NVML): it
/// would bind a whole GPU for each slice. A machine with no agent report is
/// driven by the simulated provisioner, which makes slices.
fn agent_makes_slices(conn: &mut PgConnection, machine_id: MachineId) -> Result<(), Error> {
    let inventory: Option<Option<serde_json::Value>> = agent_reports::table
        .find(machine_id)
        .select(agent_reports::inventory)
        .first(conn)
        .optional()?;
    let Some(Some(inventory)) = inventory else {
        return Ok(());
    };
    let can = inventory["capabilities"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c == contracts::agent::CAPABILITY_MIG));
    if can {
        return Ok(());
    }
    Err(Error::Validation(format!(
        "mode: the machine's agent ({}) cannot make MIG slices; upgrade it (and build it with NVML) first",
        inventory["agent_version"]
            .as_str()
            .unwrap_or("unknown version")
    )))
}

/// Checks a client's profile name before it reaches SQL or a message.
pub fn check_profile_name(name: &str) -> Result<(), Error> {
    rules::check_profile_name(name).map_err(Error::Validation)
}
