//! The GPU model catalog: names, memory and throughput, kept as data.

use contracts::api::GpuModel;
use diesel::prelude::*;
use platform::Db;
use rust_decimal::Decimal;
use schema::catalog::gpu_models;

use crate::Error;

#[derive(Queryable, Selectable)]
#[diesel(table_name = gpu_models)]
struct GpuModelRow {
    name: String,
    vram_gib: i32,
    architecture: String,
    compute_capability: String,
    fp16_tflops: Decimal,
    bf16_tflops: Decimal,
}

impl From<GpuModelRow> for GpuModel {
    fn from(r: GpuModelRow) -> Self {
        GpuModel {
            name: r.name,
            vram_gib: r.vram_gib,
            architecture: r.architecture,
            compute_capability: r.compute_capability,
            fp16_tflops: r.fp16_tflops.normalize(),
            bf16_tflops: r.bf16_tflops.normalize(),
            mig_profiles: Vec::new(),
        }
    }
}

pub async fn all(db: &Db) -> Result<Vec<GpuModel>, Error> {
    db.run(|conn| {
        let rows: Vec<GpuModelRow> = gpu_models::table
            .order(gpu_models::fp16_tflops.desc())
            .select(GpuModelRow::as_select())
            .load(conn)?;
        let mut profiles = crate::mig::all_profiles(conn)?;
        Ok(rows
            .into_iter()
            .map(|row| {
                let mig = profiles.remove(&row.name).unwrap_or_default();
                GpuModel {
                    mig_profiles: mig,
                    ..GpuModel::from(row)
                }
            })
            .collect())
    })
    .await
}

/// The catalog's spelling and VRAM of `name` (matched case-insensitively).
pub fn find(conn: &mut PgConnection, name: &str) -> Result<Option<(String, i32)>, Error> {
    Ok(gpu_models::table
        .filter(
            gpu_models::name.ilike(
                name.trim()
                    .replace('\\', "\\\\")
                    .replace('%', "\\%")
                    .replace('_', "\\_"),
            ),
        )
        .select((gpu_models::name, gpu_models::vram_gib))
        .first(conn)
        .optional()?)
}

/// Known names, for error messages.
pub fn names(conn: &mut PgConnection) -> Result<Vec<String>, Error> {
    Ok(gpu_models::table
        .order(gpu_models::name.asc())
        .select(gpu_models::name)
        .load(conn)?)
}
