//! Offer search: listed, online, unexpired machines with free GPUs, filtered
//! and sorted in SQL, keyset-paginated on (sort key, id) so a page boundary
//! stays put while other offers change. When a first page is empty, the same
//! constraints are evaluated one by one over the live offers to say why:
//! how many offers each constraint rules out, and the nearest values, taken
//! from the data, that would match.
//!
//! Each offer of a page also says what reserved blocks mean for it (its
//! terms, `available_from`, `available_until`: [`crate::availability`]).

use contracts::api::{
    ConstraintReport, NoOffers, Offer, OfferPage, OfferSearch, OfferSort, PlacementSearch,
    Relaxation, RentalType,
};
use contracts::ids::{MachineId, TenantId};
use diesel::pg::Pg;
use diesel::prelude::*;
use diesel::query_builder::BoxedSqlQuery;
use diesel::sql_types::{
    Array, BigInt, Bool, Int4, Nullable, Numeric, Text, Timestamptz, Uuid as SqlUuid,
};
use platform::Db;
use rust_decimal::Decimal;
use uuid::Uuid;

use crate::Error;
use crate::machines::disk_type;
use crate::market::{Market, VERIFIED_SQL, cuda_code, cuda_version};

const MAX_PAGE: i64 = 100;
const HOURS_PER_MONTH: i64 = 730;

/// A bind value of a dynamically built statement.
#[derive(Clone)]
enum Bind {
    Texts(Vec<String>),
    Int(i32),
    Num(Decimal),
    Id(Uuid),
}

/// SQL text with positional binds; a placeholder may be used many times.
#[derive(Default, Clone)]
struct Binds(Vec<Bind>);

impl Binds {
    fn push(&mut self, bind: Bind) -> String {
        self.0.push(bind);
        format!("${}", self.0.len())
    }

    fn apply<'a>(&self, sql: String) -> BoxedSqlQuery<'a, Pg, diesel::query_builder::SqlQuery> {
        let mut query = diesel::sql_query(sql).into_boxed::<Pg>();
        for bind in self.0.clone() {
            query = match bind {
                Bind::Texts(v) => query.bind::<Array<Text>, _>(v),
                Bind::Int(v) => query.bind::<Int4, _>(v),
                Bind::Num(v) => query.bind::<Numeric, _>(v),
                Bind::Id(v) => query.bind::<SqlUuid, _>(v),
            };
        }
        query
    }
}

/// One constraint of a search, as SQL over the `live` offers.
struct Constraint {
    name: &'static str,
    asked: String,
    predicate: String,
    relax: Relax,
}

/// How to find the nearest value that would match.
enum Relax {
    /// Smallest value of the expression among offers matching the rest.
    Min(&'static str),
    /// Largest value of the expression among offers matching the rest.
    Max(&'static str),
    /// The most common values of the column among offers matching the rest.
    Common(&'static str),
    /// Only dropping it helps.
    Drop,
}

fn constraints(
    q: &OfferSearch,
    currency: &str,
    known_models: &[String],
    binds: &mut Binds,
) -> Result<Vec<Constraint>, Error> {
    let mut out = Vec::new();
    // Matched against the catalog's spelling so the (model, price) index applies.
    let spelled = |wanted: &[String]| -> Vec<String> {
        let wanted: Vec<String> = wanted.iter().map(|m| m.trim().to_lowercase()).collect();
        known_models
            .iter()
            .filter(|name| wanted.contains(&name.to_lowercase()))
            .cloned()
            .collect()
    };
    // Its own constraint beside `gpu_models`, so that both hold (the SDL's
    // "every one given must hold") and each shows in `noOffers` by itself.
    if let Some(model) = q.gpu_model.as_deref().filter(|m| !m.trim().is_empty()) {
        let models = spelled(&[model.to_owned()]);
        out.push(Constraint {
            name: "gpu_model",
            asked: format!("GPU model {}", model.trim()),
            predicate: format!("gpu_model = ANY({})", binds.push(Bind::Texts(models))),
            relax: Relax::Common("gpu_model"),
        });
    }
    if !q.gpu_models.is_empty() {
        let models = spelled(&q.gpu_models);
        out.push(Constraint {
            name: "gpu_models",
            asked: format!("GPU model in [{}]", q.gpu_models.join(", ")),
            predicate: format!("gpu_model = ANY({})", binds.push(Bind::Texts(models))),
            relax: Relax::Common("gpu_model"),
        });
    }
    // A slice search asks for one slice, not for whole GPUs.
    let slice = q.mig_profile.as_deref().filter(|p| !p.trim().is_empty());
    if let Some(profile) = slice {
        crate::mig::check_profile_name(profile)?;
        let p = binds.push(Bind::Texts(vec![profile.to_owned()]));
        out.push(Constraint {
            name: "mig_profile",
            asked: format!("a free MIG slice {profile}"),
            predicate: format!(
                "EXISTS (SELECT 1 FROM catalog.mig_free f WHERE f.machine_id = id \
                 AND f.profile = ANY({p}) AND f.free > 0)"
            ),
            relax: Relax::Drop,
        });
    }
    if let Some(n) = q.gpu_count.filter(|_| slice.is_none()) {
        if !(1..=64).contains(&n) {
            return Err(Error::Validation("gpuCount: between 1 and 64".into()));
        }
        let p = binds.push(Bind::Int(n));
        out.push(Constraint {
            name: "gpu_count",
            asked: format!("{n} GPUs free and rentable together"),
            predicate: format!(
                "gpus_free >= {p} AND (cardinality(allowed_gpu_counts) = 0 OR {p} = ANY(allowed_gpu_counts))"
            ),
            relax: Relax::Max("gpus_free"),
        });
    }
    let min_int = |binds: &mut Binds,
                   out: &mut Vec<Constraint>,
                   name,
                   field: &str,
                   value: Option<i32>,
                   column,
                   unit: &str| {
        if let Some(v) = value {
            if v < 0 {
                return Err(Error::Validation(format!("{field}: must not be negative")));
            }
            out.push(Constraint {
                name,
                asked: format!("{column} >= {v} {unit}"),
                predicate: format!("{column} >= {}", binds.push(Bind::Int(v))),
                relax: Relax::Max(column),
            });
        }
        Ok(())
    };
    min_int(
        binds,
        &mut out,
        "min_vram_gib",
        "minVramGib",
        q.min_vram_gib,
        "vram_gib",
        "GiB per GPU",
    )?;
    if let Some(max) = q.max_price_per_gpu_hour {
        if max < Decimal::ZERO {
            return Err(Error::Validation(
                "maxPricePerGpuHour: must not be negative".into(),
            ));
        }
        match slice {
            // A slice's price per hour is what a slice search caps.
            Some(profile) => {
                let p = binds.push(Bind::Texts(vec![profile.to_owned()]));
                out.push(Constraint {
                    name: "max_price_per_gpu_hour",
                    asked: format!(
                        "{profile} slice price <= {} {currency}/hour",
                        max.normalize()
                    ),
                    predicate: format!(
                        "EXISTS (SELECT 1 FROM catalog.mig_free f WHERE f.machine_id = id \
                         AND f.profile = ANY({p}) AND f.price_per_hour <= {})",
                        binds.push(Bind::Num(max))
                    ),
                    relax: Relax::Drop,
                });
            }
            None => out.push(Constraint {
                name: "max_price_per_gpu_hour",
                asked: format!("price <= {} {currency}/GPU-hour", max.normalize()),
                predicate: format!("rental_price <= {}", binds.push(Bind::Num(max))),
                relax: Relax::Min("rental_price"),
            }),
        }
    }
    if q.rental_type == Some(RentalType::Interruptible) {
        out.push(Constraint {
            name: "rental_type",
            asked: "interruptible (the host set a minimum bid)".into(),
            predicate: "min_bid_per_gpu_hour IS NOT NULL".into(),
            relax: Relax::Drop,
        });
    }
    if !q.countries.is_empty() {
        let countries: Vec<String> = q
            .countries
            .iter()
            .map(|c| c.trim().to_uppercase())
            .collect();
        if countries
            .iter()
            .any(|c| c.len() != 2 || !c.chars().all(|x| x.is_ascii_uppercase()))
        {
            return Err(Error::Validation(
                "countries: ISO 3166-1 alpha-2 codes such as US".into(),
            ));
        }
        out.push(Constraint {
            name: "countries",
            asked: format!("country in [{}]", countries.join(", ")),
            predicate: format!("country = ANY({})", binds.push(Bind::Texts(countries))),
            relax: Relax::Common("country"),
        });
    }
    if !q.regions.is_empty() {
        let regions: Vec<String> = q.regions.iter().map(|r| r.trim().to_lowercase()).collect();
        out.push(Constraint {
            name: "regions",
            asked: format!("region in [{}]", q.regions.join(", ")),
            predicate: format!("lower(region) = ANY({})", binds.push(Bind::Texts(regions))),
            relax: Relax::Common("region"),
        });
    }
    if q.datacenter_only == Some(true) {
        out.push(Constraint {
            name: "datacenter_only",
            asked: "in a datacenter".into(),
            predicate: "datacenter".into(),
            relax: Relax::Drop,
        });
    }
    if q.verified_only == Some(true) {
        out.push(Constraint {
            name: "verified_only",
            asked: "verified".into(),
            predicate: "verified".into(),
            relax: Relax::Drop,
        });
    }
    if let Some(r) = q.min_reliability {
        if r < Decimal::ZERO || r > Decimal::ONE {
            return Err(Error::Validation("minReliability: between 0 and 1".into()));
        }
        out.push(Constraint {
            name: "min_reliability",
            asked: format!("reliability >= {}", r.normalize()),
            predicate: format!("coalesce(reliability, 0) >= {}", binds.push(Bind::Num(r))),
            relax: Relax::Max("coalesce(reliability, 0)"),
        });
    }
    if let Some(v) = &q.min_cuda_version {
        let code = cuda_code(v).ok_or_else(|| {
            Error::Validation(format!(
                "minCudaVersion: {v:?} is not a version such as 12.4"
            ))
        })?;
        out.push(Constraint {
            name: "min_cuda_version",
            asked: format!("CUDA >= {v}"),
            predicate: format!(
                "coalesce(cuda_version_code, 0) >= {}",
                binds.push(Bind::Int(code))
            ),
            relax: Relax::Max("cuda_version_code"),
        });
    }
    let disk = match (q.min_disk_gib, q.disk_gib) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    min_int(
        binds,
        &mut out,
        "min_disk_gib",
        "minDiskGib",
        disk,
        "disk_gib",
        "GiB of disk",
    )?;
    min_int(
        binds,
        &mut out,
        "min_upload_mbps",
        "minUploadMbps",
        q.min_upload_mbps,
        "upload_mbps",
        "Mbps up",
    )?;
    min_int(
        binds,
        &mut out,
        "min_download_mbps",
        "minDownloadMbps",
        q.min_download_mbps,
        "download_mbps",
        "Mbps down",
    )?;
    Ok(out)
}

/// The live offers with the columns constraints and sorts refer to. The
/// rental price is the on-demand price, or the minimum bid when searching
/// for interruptible rentals.
fn live_cte(q: &OfferSearch, market: &Market) -> String {
    live_cte_with(q, market, true)
}

/// `verified` costs a lookup per row; the why-no-offers statements scan every
/// live offer, so they skip it unless the search constrains it. The model's
/// TFLOPS come from the machine's own copy (kept by trigger), so no join is
/// needed and the price-per-TFLOP key is the expression its index is on.
fn live_cte_with(q: &OfferSearch, market: &Market, with_verified: bool) -> String {
    format!("live AS ({})", live_select(q, market, with_verified))
}

fn live_select(q: &OfferSearch, market: &Market, with_verified: bool) -> String {
    let verified = if with_verified { VERIFIED_SQL } else { "false" };
    let rental = if q.rental_type == Some(RentalType::Interruptible) {
        "catalog.machines.min_bid_per_gpu_hour"
    } else {
        "catalog.machines.price_per_gpu_hour"
    };
    format!(
        "SELECT catalog.machines.id, catalog.machines.host_tenant_id, catalog.machines.gpu_model,
                   catalog.machines.gpu_count, catalog.machines.gpu_count - catalog.machines.gpus_allocated - catalog.machines.mig_gpus AS gpus_free,
                   catalog.machines.allowed_gpu_counts, catalog.machines.vram_gib, catalog.machines.fp16_tflops,
                   catalog.machines.cpu_model, catalog.machines.cpu_cores, catalog.machines.ram_gib,
                   catalog.machines.disk_gib, catalog.machines.disk_type, catalog.machines.upload_mbps,
                   catalog.machines.download_mbps, catalog.machines.country, catalog.machines.region,
                   catalog.machines.datacenter, catalog.machines.cuda_version_code, catalog.machines.reliability,
                   {verified} AS verified,
                   catalog.machines.price_per_gpu_hour, catalog.machines.min_bid_per_gpu_hour,
                   {rental} AS rental_price,
                   round({rental} / catalog.machines.fp16_tflops, 9) AS price_per_tflop,
                   catalog.machines.storage_price_per_gb_month, catalog.machines.bandwidth_up_price_per_tb,
                   catalog.machines.bandwidth_down_price_per_tb, catalog.machines.list_until, catalog.machines.currency
            FROM catalog.machines
            WHERE catalog.machines.listed
              AND catalog.machines.price_per_gpu_hour IS NOT NULL
              AND catalog.machines.gpus_allocated < catalog.machines.gpu_count
              AND (catalog.machines.list_until IS NULL OR catalog.machines.list_until > now())
              AND {online}",
        online = market.online_sql(),
    )
}

/// Sort key expression and direction. Every key matches an index on listed
/// machines (price, price per TFLOP on the machine's copy of its model's
/// TFLOPS, reliability, bandwidth), so a page can be read in index order and
/// the scan stops at the page's end.
fn sort_key(sort: OfferSort) -> (&'static str, bool) {
    match sort {
        OfferSort::Price => ("rental_price", true),
        OfferSort::PricePerTflop => ("price_per_tflop", true),
        OfferSort::Reliability => ("coalesce(reliability, 0)", false),
        OfferSort::Bandwidth => ("download_mbps", false),
    }
}

fn sort_name(sort: OfferSort) -> &'static str {
    match sort {
        OfferSort::Price => "price",
        OfferSort::PricePerTflop => "price_per_tflop",
        OfferSort::Reliability => "reliability",
        OfferSort::Bandwidth => "bandwidth",
    }
}

fn encode_cursor(sort: OfferSort, key: Decimal, id: Uuid) -> String {
    hex::encode(format!("{}|{key}|{id}", sort_name(sort)))
}

fn decode_cursor(sort: OfferSort, cursor: &str) -> Result<(Decimal, Uuid), Error> {
    let bad = || Error::Validation("after: not a cursor from this search".into());
    let raw = String::from_utf8(hex::decode(cursor).map_err(|_| bad())?).map_err(|_| bad())?;
    let mut parts = raw.split('|');
    let (Some(name), Some(key), Some(id), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    if name != sort_name(sort) {
        return Err(Error::Validation(
            "after: the cursor belongs to a search with another sort".into(),
        ));
    }
    Ok((
        key.parse().map_err(|_| bad())?,
        id.parse().map_err(|_| bad())?,
    ))
}

#[derive(QueryableByName)]
struct OfferRow {
    #[diesel(sql_type = SqlUuid)]
    id: Uuid,
    #[diesel(sql_type = SqlUuid)]
    host_tenant_id: TenantId,
    #[diesel(sql_type = Text)]
    gpu_model: String,
    #[diesel(sql_type = Int4)]
    gpu_count: i32,
    #[diesel(sql_type = Int4)]
    gpus_free: i32,
    #[diesel(sql_type = Array<Int4>)]
    allowed_gpu_counts: Vec<i32>,
    #[diesel(sql_type = Int4)]
    vram_gib: i32,
    #[diesel(sql_type = Numeric)]
    fp16_tflops: Decimal,
    #[diesel(sql_type = Text)]
    cpu_model: String,
    #[diesel(sql_type = Int4)]
    cpu_cores: i32,
    #[diesel(sql_type = Int4)]
    ram_gib: i32,
    #[diesel(sql_type = Int4)]
    disk_gib: i32,
    #[diesel(sql_type = Text)]
    disk_type: String,
    #[diesel(sql_type = Int4)]
    upload_mbps: i32,
    #[diesel(sql_type = Int4)]
    download_mbps: i32,
    #[diesel(sql_type = Text)]
    country: String,
    #[diesel(sql_type = Text)]
    region: String,
    #[diesel(sql_type = Bool)]
    datacenter: bool,
    #[diesel(sql_type = Nullable<Int4>)]
    cuda_version_code: Option<i32>,
    #[diesel(sql_type = Nullable<Numeric>)]
    reliability: Option<Decimal>,
    #[diesel(sql_type = Bool)]
    verified: bool,
    #[diesel(sql_type = Numeric)]
    price_per_gpu_hour: Decimal,
    #[diesel(sql_type = Nullable<Numeric>)]
    min_bid_per_gpu_hour: Option<Decimal>,
    #[diesel(sql_type = Numeric)]
    rental_price: Decimal,
    #[diesel(sql_type = Numeric)]
    price_per_tflop: Decimal,
    #[diesel(sql_type = Numeric)]
    storage_price_per_gb_month: Decimal,
    #[diesel(sql_type = Numeric)]
    bandwidth_up_price_per_tb: Decimal,
    #[diesel(sql_type = Numeric)]
    bandwidth_down_price_per_tb: Decimal,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    list_until: Option<chrono::DateTime<chrono::Utc>>,
    #[diesel(sql_type = Text)]
    currency: String,
    #[diesel(sql_type = Numeric)]
    sort_key: Decimal,
}

fn offer(r: OfferRow, gpus: i32, disk_gib: i32) -> Offer {
    let gpu_only = r.rental_price * Decimal::from(gpus);
    let storage_per_hour =
        r.storage_price_per_gb_month * Decimal::from(disk_gib) / Decimal::from(HOURS_PER_MONTH);
    Offer {
        reserved: Default::default(),
        available_from: Default::default(),
        available_until: Default::default(),
        id: MachineId(r.id),
        machine_id: MachineId(r.id),
        host_tenant_id: r.host_tenant_id,
        gpu_model: r.gpu_model,
        gpu_count: r.gpu_count,
        gpus_free: r.gpus_free,
        allowed_gpu_counts: r.allowed_gpu_counts,
        vram_gib: r.vram_gib,
        fp16_tflops: r.fp16_tflops.normalize(),
        cpu_model: r.cpu_model,
        cpu_cores: r.cpu_cores,
        ram_gib: r.ram_gib,
        disk_gib: r.disk_gib,
        disk_type: disk_type(&r.disk_type),
        upload_mbps: r.upload_mbps,
        download_mbps: r.download_mbps,
        country: r.country,
        region: r.region,
        datacenter: r.datacenter,
        cuda_version: r.cuda_version_code.map(cuda_version),
        reliability: r.reliability.map(|x| x.normalize()),
        verified: r.verified,
        price_per_gpu_hour: r.price_per_gpu_hour.normalize(),
        min_bid_per_gpu_hour: r.min_bid_per_gpu_hour.map(|x| x.normalize()),
        rental_price_per_gpu_hour: r.rental_price.normalize(),
        price_per_tflop_hour: r.price_per_tflop.normalize(),
        price_per_hour_gpu_only: gpu_only.normalize(),
        price_per_hour_all_in: (gpu_only + storage_per_hour).round_dp(9).normalize(),
        storage_price_per_gb_month: r.storage_price_per_gb_month.normalize(),
        bandwidth_up_price_per_tb: r.bandwidth_up_price_per_tb.normalize(),
        bandwidth_down_price_per_tb: r.bandwidth_down_price_per_tb.normalize(),
        list_until: r.list_until,
        currency: r.currency,
        mig_slices: Vec::new(),
    }
}

/// The MIG slices of each offer (of at least `min_vram_gib` each: a memory
/// floor matches slices too).
fn with_slices(
    conn: &mut PgConnection,
    mut offers: Vec<Offer>,
    min_vram_gib: Option<i32>,
) -> Result<Vec<Offer>, Error> {
    let ids: Vec<Uuid> = offers.iter().map(|o| o.id.into_uuid()).collect();
    let mut slices = crate::mig::offer_slices(conn, &ids, min_vram_gib)?;
    for o in &mut offers {
        o.mig_slices = slices.remove(&o.id.into_uuid()).unwrap_or_default();
    }
    Ok(offers)
}

/// A search turned into SQL, ready to run.
struct Plan {
    sql: String,
    binds: Binds,
    constraints: Vec<Constraint>,
    first: i64,
    sort: OfferSort,
    gpus: i32,
    disk: i32,
    explain: bool,
}

fn plan(market: &Market, q: &OfferSearch, known_models: &[String]) -> Result<Plan, Error> {
    let first = q.first.unwrap_or(20);
    if !(1..=MAX_PAGE).contains(&first) {
        return Err(Error::Validation(format!(
            "first: must be between 1 and {MAX_PAGE}"
        )));
    }
    if let Some(d) = q.disk_gib
        && d < 0
    {
        return Err(Error::Validation("diskGib: must not be negative".into()));
    }
    let sort = q.sort.unwrap_or_default();
    let after = q
        .after
        .as_deref()
        .map(|c| decode_cursor(sort, c))
        .transpose()?;
    let mut binds = Binds::default();
    let constraints = constraints(q, &market.currency, known_models, &mut binds)?;
    let live = live_cte(q, market);
    let (key, ascending) = sort_key(sort);
    let mut conditions: Vec<String> = constraints
        .iter()
        .map(|c| format!("({})", c.predicate))
        .collect();
    if let Some((k, id)) = after {
        let (k, id) = (binds.push(Bind::Num(k)), binds.push(Bind::Id(id)));
        let cmp = if ascending { ">" } else { "<" };
        conditions.push(format!("({key} {cmp} {k} OR ({key} = {k} AND id > {id}))"));
    }
    let where_clause = if conditions.is_empty() {
        "TRUE".to_owned()
    } else {
        conditions.join(" AND ")
    };
    let direction = if ascending { "ASC" } else { "DESC" };
    let sql = format!(
        "WITH {live} SELECT *, ({key})::numeric AS sort_key FROM live WHERE {where_clause} \
         ORDER BY {key} {direction}, id ASC LIMIT {}",
        first + 1
    );
    Ok(Plan {
        sql,
        binds,
        constraints,
        first,
        sort,
        gpus: q.gpu_count.unwrap_or(1),
        disk: q.disk_gib.unwrap_or(0),
        explain: after.is_none(),
    })
}

pub async fn search(db: &Db, market: &Market, q: OfferSearch) -> Result<OfferPage, Error> {
    let market = market.clone();
    db.run(move |conn| {
        let known = crate::gpu_models::names(conn)?;
        let plan = plan(&market, &q, &known)?;
        let currency = market.currency.clone();
        let mut rows: Vec<OfferRow> = plan.binds.apply(plan.sql.clone()).load(conn)?;
        let has_next_page = rows.len() as i64 > plan.first;
        rows.truncate(plan.first as usize);
        let end_cursor = rows
            .last()
            .map(|r| encode_cursor(plan.sort, r.sort_key, r.id));
        let offers: Vec<Offer> = rows
            .into_iter()
            .map(|r| offer(r, plan.gpus, plan.disk))
            .collect();
        let mut offers = with_slices(conn, offers, q.min_vram_gib)?;
        crate::availability::fill(conn, &mut offers, plan.gpus)?;
        let no_offers = if offers.is_empty() && plan.explain {
            let live = live_cte_with(&q, &market, q.verified_only == Some(true));
            Some(why_none(
                conn,
                &live,
                &plan.constraints,
                &plan.binds,
                &currency,
            )?)
        } else {
            None
        };
        Ok(OfferPage {
            offers,
            end_cursor,
            has_next_page,
            no_offers,
        })
    })
    .await
}

/// Runs only the page query of `q` on `conn` and returns the rows found: the
/// search's SQL without HTTP, JSON or the pool, as a benchmark baseline.
pub fn run_page_sql(
    conn: &mut PgConnection,
    market: &Market,
    q: &OfferSearch,
) -> Result<usize, Error> {
    let known = crate::gpu_models::names(conn)?;
    let plan = plan(market, q, &known)?;
    let rows: Vec<OfferRow> = plan.binds.apply(plan.sql).load(conn)?;
    Ok(rows.len())
}

/// Every count and nearest value of the explanation, from one pass over the
/// live offers: `counts` is the number of live offers followed by, per
/// constraint, how many it rules out and how many match all the others;
/// `vals` holds per constraint the nearest value for min/max relaxations.
#[derive(QueryableByName)]
struct Tally {
    #[diesel(sql_type = Array<BigInt>)]
    counts: Vec<i64>,
    #[diesel(sql_type = Array<Nullable<Text>>)]
    vals: Vec<Option<String>>,
}

#[derive(QueryableByName)]
struct Nearest {
    #[diesel(sql_type = Int4)]
    position: i32,
    #[diesel(sql_type = Nullable<Text>)]
    value: Option<String>,
    #[diesel(sql_type = BigInt)]
    matching: i64,
}

fn all_but(constraints: &[Constraint], skip: usize) -> String {
    let parts: Vec<String> = constraints
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != skip)
        .map(|(_, c)| format!("({})", c.predicate))
        .collect();
    if parts.is_empty() {
        "TRUE".into()
    } else {
        parts.join(" AND ")
    }
}

/// Explains an empty result over the live offers, all in SQL, in at most two
/// statements. The first reads every live offer once, with an aggregate
/// FILTER per constraint (a plain parallel aggregate, no row per offer and
/// constraint). The second asks only what the first cannot know: how many
/// offers a nearest value admits and which values of a set constraint are
/// most common among the offers matching the rest. Each of its parts is
/// planned by itself over the inlined live offers, so a part whose other
/// constraints an index serves (a model filter, say) reads just those.
fn why_none(
    conn: &mut PgConnection,
    live: &str,
    constraints: &[Constraint],
    binds: &Binds,
    currency: &str,
) -> Result<NoOffers, Error> {
    if constraints.is_empty() {
        let tally: Vec<Tally> = binds
            .apply(format!(
                "WITH {live} SELECT ARRAY[count(*)] AS counts, ARRAY[]::text[] AS vals FROM live"
            ))
            .load(conn)?;
        let live_offers = tally
            .first()
            .and_then(|t| t.counts.first().copied())
            .unwrap_or(0);
        return Ok(NoOffers {
            live_offers,
            constraints: Vec::new(),
            relaxations: Vec::new(),
            summary: format!(
                "{live_offers} offers are live and none matched; the market has no free GPUs right now."
            ),
        });
    }
    let mut counts = vec!["count(*)".to_owned()];
    let mut vals = Vec::new();
    for (i, c) in constraints.iter().enumerate() {
        let others = all_but(constraints, i);
        counts.push(format!("count(*) FILTER (WHERE NOT ({}))", c.predicate));
        counts.push(format!("count(*) FILTER (WHERE {others})"));
        vals.push(match c.relax {
            Relax::Min(expr) => format!("(min(({expr})::numeric) FILTER (WHERE {others}))::text"),
            Relax::Max(expr) => format!("(max(({expr})::numeric) FILTER (WHERE {others}))::text"),
            Relax::Common(_) | Relax::Drop => "NULL::text".to_owned(),
        });
    }
    let tally: Option<Tally> = binds
        .apply(format!(
            "WITH {live} SELECT ARRAY[{}]::bigint[] AS counts, ARRAY[{}]::text[] AS vals FROM live",
            counts.join(", "),
            vals.join(", ")
        ))
        .load(conn)?
        .pop();
    // An aggregate without GROUP BY always yields its row; with no live
    // offers every count is zero.
    let (counts, vals) = tally.map_or((Vec::new(), Vec::new()), |t| (t.counts, t.vals));
    let live_offers = counts.first().copied().unwrap_or(0);
    let eliminated = |i: usize| counts.get(1 + 2 * i).copied().unwrap_or(0);
    let matching_without = |i: usize| counts.get(2 + 2 * i).copied().unwrap_or(0);

    let mut parts = Vec::new();
    for (i, c) in constraints.iter().enumerate() {
        let others = all_but(constraints, i);
        match c.relax {
            // How many offers the nearest value admits; the value comes from
            // the data (parsed, so safe to inline).
            Relax::Min(expr) | Relax::Max(expr) => {
                let Some(value) = vals
                    .get(i)
                    .cloned()
                    .flatten()
                    .and_then(|v| v.parse::<Decimal>().ok())
                else {
                    continue;
                };
                let cmp = if matches!(c.relax, Relax::Min(_)) {
                    "<="
                } else {
                    ">="
                };
                parts.push(format!(
                    "SELECT {i} AS position, '{value}'::text AS value, count(*) AS matching \
                     FROM live WHERE ({others}) AND ({expr})::numeric {cmp} '{value}'::numeric"
                ));
            }
            // The most common values among offers matching the rest.
            Relax::Common(column) if matching_without(i) > 0 => {
                parts.push(format!(
                    "SELECT {i} AS position, \
                     (SELECT string_agg(value, ', ') FROM (SELECT {column} || ' (' || count(*) || ')' AS value \
                       FROM live WHERE {others} GROUP BY {column} ORDER BY count(*) DESC, {column} LIMIT 3) t) AS value, \
                     {}::bigint AS matching",
                    matching_without(i)
                ));
            }
            Relax::Common(_) | Relax::Drop => {}
        }
    }
    let nearest: Vec<Nearest> = if parts.is_empty() {
        Vec::new()
    } else {
        // Inlined into each part rather than materialized once, so that each
        // part's filters reach the indexes.
        let inlined = live.replacen("live AS (", "live AS NOT MATERIALIZED (", 1);
        binds
            .apply(format!(
                "WITH {inlined} {}",
                parts
                    .iter()
                    .map(|p| format!("({p})"))
                    .collect::<Vec<_>>()
                    .join(" UNION ALL ")
            ))
            .load(conn)?
    };

    let reports: Vec<ConstraintReport> = constraints
        .iter()
        .enumerate()
        .map(|(i, constraint)| ConstraintReport {
            constraint: constraint.name.to_owned(),
            asked: constraint.asked.clone(),
            eliminated: eliminated(i),
            matching_without: matching_without(i),
        })
        .collect();
    let mut relaxations: Vec<Relaxation> = Vec::new();
    for n in nearest {
        let Some(constraint) = constraints.get(n.position as usize) else {
            continue;
        };
        let Some(value) = n.value.filter(|_| n.matching > 0) else {
            continue;
        };
        relaxations.push(describe(constraint, value, n.matching, currency));
    }
    for (report, constraint) in reports.iter().zip(constraints) {
        if matches!(constraint.relax, Relax::Drop) && report.matching_without > 0 {
            relaxations.push(Relaxation {
                constraint: constraint.name.to_owned(),
                value: "dropped".into(),
                matching: report.matching_without,
                description: format!(
                    "without \"{}\": {} offers",
                    constraint.asked, report.matching_without
                ),
            });
        }
    }
    relaxations.sort_by(|a, b| {
        b.matching
            .cmp(&a.matching)
            .then(a.constraint.cmp(&b.constraint))
    });

    let asked: Vec<&str> = constraints.iter().map(|c| c.asked.as_str()).collect();
    let mut summary = format!(
        "0 of {live_offers} live offers match {}.",
        asked.join(" and ")
    );
    if let Some(best) = relaxations.first() {
        summary.push_str(&format!(" Nearest: {}.", best.description));
    } else if live_offers == 0 {
        summary.push_str(" No offers are live right now.");
    }
    Ok(NoOffers {
        live_offers,
        constraints: reports,
        relaxations,
        summary,
    })
}

fn describe(c: &Constraint, value: String, matching: i64, currency: &str) -> Relaxation {
    let shown = value
        .parse::<Decimal>()
        .map(|d| d.normalize().to_string())
        .unwrap_or(value);
    let description = match c.name {
        "max_price_per_gpu_hour" => {
            format!("{matching} offers at or under {shown} {currency}/GPU-hour")
        }
        "min_cuda_version" => {
            let version = shown
                .parse::<i32>()
                .map(cuda_version)
                .unwrap_or(shown.clone());
            return Relaxation {
                constraint: c.name.into(),
                description: format!("{matching} offers with CUDA >= {version}"),
                value: version,
                matching,
            };
        }
        "min_reliability" => format!("{matching} offers with reliability >= {shown}"),
        "gpu_count" => format!("{matching} offers with {shown} GPUs free"),
        "gpu_model" | "gpu_models" => format!("other models match: {shown}"),
        "countries" => format!("other countries match: {shown}"),
        "regions" => format!("other regions match: {shown}"),
        _ => format!(
            "{matching} offers with {} at {shown}",
            c.name.trim_start_matches("min_")
        ),
    };
    Relaxation {
        constraint: c.name.into(),
        value: shown,
        matching,
        description,
    }
}

/// The offers an order by constraints can be placed on now, cheapest first
/// (at equal price, those that need no preemption first): live offers that
/// match every constraint and have the order's GPU count either free or held
/// by interruptible rentals the order outranks (any bid for an on-demand
/// order, strictly lower bids for an interruptible one). The search's own
/// constraints and liveness rules apply unchanged; only the capacity test
/// differs from [`search`], which counts free GPUs alone.
pub async fn placement_candidates(
    db: &Db,
    market: &Market,
    p: PlacementSearch,
) -> Result<Vec<Offer>, Error> {
    let n = p
        .search
        .gpu_count
        .filter(|n| (1..=64).contains(n))
        .ok_or_else(|| Error::Validation("gpuCount: between 1 and 64".into()))?;
    let first = p.search.first.unwrap_or(10).clamp(1, MAX_PAGE);
    let q = OfferSearch {
        gpu_count: None,
        first: None,
        after: None,
        sort: None,
        ..p.search.clone()
    };
    let market = market.clone();
    db.run(move |conn| {
        let known = crate::gpu_models::names(conn)?;
        let mut binds = Binds::default();
        let constraints = constraints(&q, &market.currency, &known, &mut binds)?;
        let live = live_cte(&q, &market).replace(
            "AND catalog.machines.gpus_allocated < catalog.machines.gpu_count",
            "",
        );
        let mut conditions: Vec<String> = constraints
            .iter()
            .map(|c| format!("({})", c.predicate))
            .collect();
        let order = match q.mig_profile.as_deref().filter(|p| !p.trim().is_empty()) {
            // A slice: the `mig_profile` constraint already asks for a free
            // one; the cheapest slice first (whole GPUs play no part).
            Some(profile) => {
                let pp = binds.push(Bind::Texts(vec![profile.to_owned()]));
                format!(
                    "(SELECT f.price_per_hour FROM catalog.mig_free f \
                      WHERE f.machine_id = live.id AND f.profile = ANY({pp})) ASC, id ASC"
                )
            }
            None => {
                let np = binds.push(Bind::Int(n));
                let outranked = match (q.rental_type, p.bid_per_gpu_hour) {
                    (Some(RentalType::Interruptible), Some(bid)) => {
                        format!("AND a.bid_per_gpu_hour < {}", binds.push(Bind::Num(bid)))
                    }
                    (Some(RentalType::Interruptible), None) => "AND false".to_owned(),
                    _ => String::new(),
                };
                conditions.push(format!(
                    "gpu_count >= {np} AND (cardinality(allowed_gpu_counts) = 0 OR {np} = ANY(allowed_gpu_counts))"
                ));
                conditions.push(format!(
                    "gpus_free + coalesce((SELECT sum(a.gpu_count) FROM catalog.allocations a
                         WHERE a.machine_id = live.id AND a.released_at IS NULL
                           AND a.rental_type = 'interruptible' {outranked}), 0) >= {np}"
                ));
                format!("rental_price ASC, (gpus_free >= {np}) DESC, id ASC")
            }
        };
        let sql = format!(
            "WITH {live} SELECT *, rental_price AS sort_key FROM live WHERE {} \
             ORDER BY {order} LIMIT {first}",
            conditions.join(" AND ")
        );
        let rows: Vec<OfferRow> = binds.apply(sql).load(conn)?;
        let mut offers =
            with_slices(conn, rows.into_iter().map(|r| offer(r, n, 0)).collect(), None)?;
        crate::availability::fill(conn, &mut offers, n)?;
        Ok(offers)
    })
    .await
}

/// One offer by id, whether or not it has free GPUs right now (the order
/// saga decides about capacity); an unlisted, expired or offline machine is
/// not an offer.
pub async fn get(db: &Db, market: &Market, id: Uuid) -> Result<Offer, Error> {
    let live = live_cte(&OfferSearch::default(), market).replace(
        "AND catalog.machines.gpus_allocated < catalog.machines.gpu_count",
        "",
    );
    let mut binds = Binds::default();
    let p = binds.push(Bind::Id(id));
    let sql = format!("WITH {live} SELECT *, rental_price AS sort_key FROM live WHERE id = {p}");
    db.run(move |conn| {
        let row: Option<OfferRow> = binds.apply(sql).load(conn)?.pop();
        let offer = row
            .map(|r| offer(r, 1, 0))
            .ok_or_else(|| Error::NotFound(format!("offer {id} not found")))?;
        let mut offers = with_slices(conn, vec![offer], None)?;
        crate::availability::fill(conn, &mut offers, 1)?;
        Ok(offers.remove(0))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        let id = Uuid::now_v7();
        let key: Decimal = "2.49".parse().unwrap();
        let cursor = encode_cursor(OfferSort::Price, key, id);
        assert_eq!(decode_cursor(OfferSort::Price, &cursor).unwrap(), (key, id));
        assert!(decode_cursor(OfferSort::Reliability, &cursor).is_err());
        assert!(decode_cursor(OfferSort::Price, "zz").is_err());
        assert!(decode_cursor(OfferSort::Price, &hex::encode("nothing")).is_err());
    }

    #[test]
    fn bad_constraints_name_the_field() {
        let mut binds = Binds::default();
        let q = OfferSearch {
            min_reliability: Some("1.5".parse().unwrap()),
            ..Default::default()
        };
        let Err(Error::Validation(msg)) = constraints(&q, "USD", &[], &mut binds) else {
            panic!("accepted")
        };
        assert!(msg.starts_with("minReliability"));
        let q = OfferSearch {
            min_cuda_version: Some("twelve".into()),
            ..Default::default()
        };
        let Err(Error::Validation(msg)) = constraints(&q, "USD", &[], &mut binds) else {
            panic!("accepted")
        };
        assert!(msg.starts_with("minCudaVersion"));
    }
}
