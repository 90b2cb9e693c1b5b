//! The market as renters search it: offers, why none matched, GPU models.

use async_graphql::{Context, Enum, ID, InputObject, Object, SimpleObject};
use chrono::{DateTime, Utc};
use contracts::api;
use contracts::endpoints;
use rust_decimal::Decimal;

use crate::clients;
use crate::error::{GatewayError, GqlResult};
use crate::validate;

const DEFAULT_PAGE: i32 = 20;
const MAX_PAGE: i32 = 100;

pub use contracts::states::RentalType;

#[derive(Enum, Clone, Copy, PartialEq, Eq)]
pub enum OfferSort {
    /// Cheapest GPU-hour first.
    Price,
    /// Cheapest per dense FP16 TFLOP first.
    PricePerTflop,
    /// Most reliable first.
    Reliability,
    /// Fastest download first.
    Bandwidth,
}

impl From<OfferSort> for api::OfferSort {
    fn from(s: OfferSort) -> Self {
        match s {
            OfferSort::Price => api::OfferSort::Price,
            OfferSort::PricePerTflop => api::OfferSort::PricePerTflop,
            OfferSort::Reliability => api::OfferSort::Reliability,
            OfferSort::Bandwidth => api::OfferSort::Bandwidth,
        }
    }
}

#[derive(Enum, Clone, Copy, PartialEq, Eq)]
pub enum DiskType {
    Nvme,
    Ssd,
    Hdd,
}

impl From<api::DiskType> for DiskType {
    fn from(d: api::DiskType) -> Self {
        match d {
            api::DiskType::Nvme => DiskType::Nvme,
            api::DiskType::Ssd => DiskType::Ssd,
            api::DiskType::Hdd => DiskType::Hdd,
        }
    }
}

impl From<DiskType> for api::DiskType {
    fn from(d: DiskType) -> Self {
        match d {
            DiskType::Nvme => api::DiskType::Nvme,
            DiskType::Ssd => api::DiskType::Ssd,
            DiskType::Hdd => api::DiskType::Hdd,
        }
    }
}

/// Constraints on offers; every one given must hold.
#[derive(InputObject, Default)]
pub struct OfferFilter {
    /// One GPU model (exact catalog name, any case).
    gpu_model: Option<String>,
    /// Any of these GPU models. With `gpuModel` too, both hold: the offer's
    /// model is `gpuModel` and is in this list.
    gpu_models: Option<Vec<String>>,
    /// GPUs wanted: the offer must have this many free and allow renting them together.
    gpu_count: Option<i32>,
    #[graphql(deprecation = "use gpuCount")]
    min_gpus: Option<i32>,
    min_vram_gib: Option<i32>,
    /// On-demand price, or the minimum bid when `rentalType` is INTERRUPTIBLE.
    max_price_per_gpu_hour: Option<Decimal>,
    rental_type: Option<RentalType>,
    /// ISO 3166-1 alpha-2 codes.
    countries: Option<Vec<String>>,
    regions: Option<Vec<String>>,
    datacenter_only: Option<bool>,
    verified_only: Option<bool>,
    /// 0 to 1.
    min_reliability: Option<Decimal>,
    /// e.g. "12.4".
    min_cuda_version: Option<String>,
    min_disk_gib: Option<i32>,
    min_upload_mbps: Option<i32>,
    min_download_mbps: Option<i32>,
    /// Storage you will ask for: only machines with at least this much disk
    /// (like `minDiskGib`; with both, the larger holds), and priced into
    /// `pricePerHourAllIn`.
    disk_gib: Option<i32>,
    /// Offers with a free MIG slice of this profile (a name from the
    /// model's `migProfiles`, e.g. `3g.40gb`); rent it with
    /// `createOrder(input: { migProfile })`.
    mig_profile: Option<String>,
}

impl OfferFilter {
    fn into_search(self) -> api::OfferSearch {
        // Two constraints, not one merged list: every filter given must hold,
        // so `gpuModel` with `gpuModels` is their intersection.
        api::OfferSearch {
            gpu_model: self.gpu_model.filter(|m| !m.trim().is_empty()),
            gpu_models: self.gpu_models.unwrap_or_default(),
            mig_profile: self
                .mig_profile
                .map(|p| p.trim().to_owned())
                .filter(|p| !p.is_empty()),
            gpu_count: self.gpu_count.or(self.min_gpus),
            min_vram_gib: self.min_vram_gib,
            max_price_per_gpu_hour: self.max_price_per_gpu_hour,
            rental_type: self.rental_type,
            countries: self.countries.unwrap_or_default(),
            regions: self.regions.unwrap_or_default(),
            datacenter_only: self.datacenter_only,
            verified_only: self.verified_only,
            min_reliability: self.min_reliability,
            min_cuda_version: self.min_cuda_version,
            min_disk_gib: self.min_disk_gib,
            min_upload_mbps: self.min_upload_mbps,
            min_download_mbps: self.min_download_mbps,
            disk_gib: self.disk_gib,
            sort: None,
            first: None,
            after: None,
        }
    }
}

/// GPUs of one machine available to rent.
#[derive(SimpleObject)]
pub struct Offer {
    id: ID,
    machine_id: ID,
    gpu_model: String,
    gpu_count: i32,
    gpus_free: i32,
    /// GPU counts a rental may take; empty means any up to `gpusFree`.
    allowed_gpu_counts: Vec<i32>,
    vram_gib: i32,
    fp16_tflops: Decimal,
    cpu_model: String,
    cpu_cores: i32,
    ram_gib: i32,
    disk_gib: i32,
    disk_type: DiskType,
    upload_mbps: i32,
    download_mbps: i32,
    country: String,
    region: String,
    datacenter: bool,
    cuda_version: Option<String>,
    /// Rolling uptime ratio, 0 to 1; null before any evidence.
    reliability: Option<Decimal>,
    verified: bool,
    /// On-demand price of one GPU for one hour.
    price_per_gpu_hour: Decimal,
    /// Lowest bid for interruptible use; null when not offered.
    min_bid_per_gpu_hour: Option<Decimal>,
    /// The per-GPU price the search ranked on (on-demand, or the minimum bid).
    rental_price_per_gpu_hour: Decimal,
    /// `rentalPricePerGpuHour` ÷ `fp16Tflops`.
    price_per_tflop_hour: Decimal,
    /// `pricePerGpuHour` × `gpuCount`, all the machine's GPUs.
    price_per_hour_all_gpus: Decimal,
    /// GPUs only, for the searched GPU count (1 when none was given).
    price_per_hour_gpu_only: Decimal,
    /// GPUs plus the searched storage (`diskGib`) at the storage price.
    price_per_hour_all_in: Decimal,
    storage_price_per_gb_month: Decimal,
    bandwidth_up_price_per_tb: Decimal,
    bandwidth_down_price_per_tb: Decimal,
    #[graphql(deprecation = "a String: use `listUntilUtc`, a DateTime")]
    list_until: Option<String>,
    list_until_utc: Option<DateTime<Utc>>,
    currency: String,
    /// MIG slices for sale on the machine, per profile (empty when no GPU
    /// of the machine runs MIG).
    mig_slices: Vec<MigOffer>,
    /// The host's terms for reserved blocks (`reserve`); null when the
    /// machine takes none.
    reserved: Option<super::reservations::ReservedTerms>,
    /// When GPUs of the machine are next free for an on-demand rental: now
    /// when some are free, else the end of the reserved block holding them;
    /// null when not foreseeable (rented on demand).
    available_from: Option<DateTime<Utc>>,
    /// An on-demand rental placed now must end by then: the start of the
    /// next reserved block on the GPUs it would get (its instance is
    /// preempted at that instant); null when none is booked.
    available_until: Option<DateTime<Utc>>,
}

/// Slices of one MIG profile on an offer: how many could be rented now and
/// at what price.
#[derive(SimpleObject)]
pub struct MigOffer {
    /// e.g. `3g.40gb`; pass it as `createOrder(input: { migProfile })`.
    profile: String,
    memory_gib: i32,
    /// Of the GPU's 7 compute slices.
    compute_slices: i32,
    /// Of the GPU's 8 memory slices: the slice's share of the GPU.
    memory_slices: i32,
    /// Slices of this profile that could be placed now, one after another.
    free: i32,
    /// The price of one slice for one hour (the host's, or the GPU price
    /// by memory share).
    price_per_hour: Decimal,
}

impl From<api::MigOffer> for MigOffer {
    fn from(m: api::MigOffer) -> Self {
        Self {
            profile: m.profile,
            memory_gib: m.memory_gib,
            compute_slices: i32::from(m.compute_slices),
            memory_slices: i32::from(m.memory_slices),
            free: m.free,
            price_per_hour: m.price_per_hour,
        }
    }
}

impl From<api::Offer> for Offer {
    fn from(o: api::Offer) -> Self {
        Self {
            id: o.id.into(),
            machine_id: o.machine_id.into(),
            price_per_hour_all_gpus: (o.price_per_gpu_hour * Decimal::from(o.gpu_count))
                .normalize(),
            gpu_model: o.gpu_model,
            gpu_count: o.gpu_count,
            gpus_free: o.gpus_free,
            allowed_gpu_counts: o.allowed_gpu_counts,
            vram_gib: o.vram_gib,
            fp16_tflops: o.fp16_tflops,
            cpu_model: o.cpu_model,
            cpu_cores: o.cpu_cores,
            ram_gib: o.ram_gib,
            disk_gib: o.disk_gib,
            disk_type: o.disk_type.into(),
            upload_mbps: o.upload_mbps,
            download_mbps: o.download_mbps,
            country: o.country,
            region: o.region,
            datacenter: o.datacenter,
            cuda_version: o.cuda_version,
            reliability: o.reliability,
            verified: o.verified,
            price_per_gpu_hour: o.price_per_gpu_hour,
            min_bid_per_gpu_hour: o.min_bid_per_gpu_hour,
            rental_price_per_gpu_hour: o.rental_price_per_gpu_hour,
            price_per_tflop_hour: o.price_per_tflop_hour,
            price_per_hour_gpu_only: o.price_per_hour_gpu_only,
            price_per_hour_all_in: o.price_per_hour_all_in,
            storage_price_per_gb_month: o.storage_price_per_gb_month,
            bandwidth_up_price_per_tb: o.bandwidth_up_price_per_tb,
            bandwidth_down_price_per_tb: o.bandwidth_down_price_per_tb,
            list_until: o.list_until.map(super::instant),
            list_until_utc: o.list_until,
            currency: o.currency,
            mig_slices: o.mig_slices.into_iter().map(Into::into).collect(),
            reserved: o.reserved.map(Into::into),
            available_from: o.available_from,
            available_until: o.available_until,
        }
    }
}

#[derive(SimpleObject)]
pub struct PageInfo {
    /// Pass as `after` to get the next page.
    end_cursor: Option<String>,
    has_next_page: bool,
}

/// One constraint's share in an empty result.
#[derive(SimpleObject)]
pub struct ConstraintReport {
    /// The search field, e.g. `max_price_per_gpu_hour`.
    constraint: String,
    /// The constraint as asked.
    asked: String,
    /// Live offers this constraint alone rules out.
    eliminated: i64,
    /// Offers that would match if only this constraint were dropped.
    matching_without: i64,
}

/// A nearby search that would find offers, with a value from the data.
#[derive(SimpleObject)]
pub struct Relaxation {
    constraint: String,
    value: String,
    matching: i64,
    description: String,
}

/// Why a search found nothing, computed over the live offers.
#[derive(SimpleObject)]
pub struct NoOffers {
    live_offers: i64,
    constraints: Vec<ConstraintReport>,
    relaxations: Vec<Relaxation>,
    summary: String,
}

impl From<api::NoOffers> for NoOffers {
    fn from(n: api::NoOffers) -> Self {
        Self {
            live_offers: n.live_offers,
            constraints: n
                .constraints
                .into_iter()
                .map(|c| ConstraintReport {
                    constraint: c.constraint,
                    asked: c.asked,
                    eliminated: c.eliminated,
                    matching_without: c.matching_without,
                })
                .collect(),
            relaxations: n
                .relaxations
                .into_iter()
                .map(|r| Relaxation {
                    constraint: r.constraint,
                    value: r.value,
                    matching: r.matching,
                    description: r.description,
                })
                .collect(),
            summary: n.summary,
        }
    }
}

#[derive(SimpleObject)]
pub struct OfferConnection {
    nodes: Vec<Offer>,
    page_info: PageInfo,
    /// Present when the first page is empty: what ruled the offers out.
    no_offers: Option<NoOffers>,
}

#[derive(SimpleObject)]
pub struct GpuModel {
    name: String,
    vram_gib: i32,
    architecture: String,
    compute_capability: String,
    /// Dense tensor TFLOPS, FP32 accumulate.
    fp16_tflops: Decimal,
    bf16_tflops: Decimal,
    /// The NVIDIA MIG profiles a GPU of this model can be split into;
    /// empty when the model has no MIG.
    mig_profiles: Vec<MigProfile>,
}

/// A MIG GPU instance profile of a model (NVIDIA's MIG user guide, "GPU
/// instance profiles"): a slice of `memorySlices` consecutive memory slices
/// out of the GPU's 8, starting at one of `placements`.
#[derive(SimpleObject)]
pub struct MigProfile {
    /// e.g. `3g.40gb`.
    name: String,
    /// Of the GPU's 7 compute slices.
    compute_slices: i32,
    /// Of the GPU's 8 memory slices.
    memory_slices: i32,
    memory_gib: i32,
    /// The memory slices a slice of this profile may start at, ascending.
    placements: Vec<i32>,
}

impl From<contracts::mig::MigProfile> for MigProfile {
    fn from(p: contracts::mig::MigProfile) -> Self {
        // The NVML profile constant is the agent's business, not a renter's.
        Self {
            name: p.name,
            compute_slices: i32::from(p.compute_slices),
            memory_slices: i32::from(p.memory_slices),
            memory_gib: p.memory_gib,
            placements: p.placements.into_iter().map(i32::from).collect(),
        }
    }
}

#[derive(Default)]
pub struct MarketQuery;

#[Object]
impl MarketQuery {
    /// Machines listed for rent. Needs no login. Constrain with `filter`, or
    /// with `query` in the compact language (`gpu_name=RTX_4090 num_gpus>=2
    /// dph<=0.6 country in [US,CA]`, see docs/cli.md), not both.
    #[graphql(complexity = "super::extensions::limits::EXPENSIVE_FIELD + child_complexity")]
    async fn offers(
        &self,
        ctx: &Context<'_>,
        filter: Option<OfferFilter>,
        query: Option<String>,
        sort: Option<OfferSort>,
        #[graphql(default = 20)] first: Option<i32>,
        after: Option<String>,
    ) -> GqlResult<OfferConnection> {
        // An explicit null means "no preference", like leaving it out.
        let first = first.unwrap_or(DEFAULT_PAGE);
        if !(1..=MAX_PAGE).contains(&first) {
            return Err(GatewayError::validation(
                "first",
                format!("must be between 1 and {MAX_PAGE}"),
            )
            .into());
        }
        let mut search = match (filter, query.filter(|q| !q.trim().is_empty())) {
            (Some(_), Some(_)) => {
                return Err(GatewayError::validation(
                    "query",
                    "give either filter or query, not both",
                )
                .into());
            }
            (None, Some(text)) => contracts::offer_query::parse(&text).map_err(|e| {
                GatewayError::validation(
                    "query",
                    format!("{} at position {} ({:?})", e.message, e.position, e.token),
                )
            })?,
            (filter, None) => filter.unwrap_or_default().into_search(),
        };
        if let Some(profile) = &search.mig_profile {
            validate::mig_profile("migProfile", profile)?;
        }
        if let Some(price) = search.max_price_per_gpu_hour {
            validate::money(
                "maxPricePerGpuHour",
                price,
                contracts::bounds::GPU_HOUR_PRICE,
            )?;
        }
        if let Some(sort) = sort {
            search.sort = Some(sort.into());
        }
        search.first = Some(i64::from(first));
        search.after = after.filter(|a| !a.is_empty());
        let page = clients::from_context(ctx)?
            .catalog
            .call(endpoints::catalog::SEARCH_OFFERS, (), &search)
            .await?;
        Ok(OfferConnection {
            nodes: page.offers.into_iter().map(Into::into).collect(),
            page_info: PageInfo {
                end_cursor: page.end_cursor,
                has_next_page: page.has_next_page,
            },
            no_offers: page.no_offers.map(Into::into),
        })
    }

    /// The GPU models the market knows, fastest first. Needs no login.
    async fn gpu_models(&self, ctx: &Context<'_>) -> GqlResult<Vec<GpuModel>> {
        let models = clients::from_context(ctx)?
            .catalog
            .call(endpoints::catalog::GPU_MODELS, (), &())
            .await?;
        Ok(models
            .into_iter()
            .map(|m| GpuModel {
                name: m.name,
                vram_gib: m.vram_gib,
                architecture: m.architecture,
                compute_capability: m.compute_capability,
                fp16_tflops: m.fp16_tflops,
                bf16_tflops: m.bf16_tflops,
                mig_profiles: m.mig_profiles.into_iter().map(Into::into).collect(),
            })
            .collect())
    }
}
