//! Bodies of the services' internal HTTP APIs. The gateway and the services
//! share these types so a field cannot be renamed on one side only. Every
//! internal route lives under `/internal` and needs the service token.

use crate::ids::{
    ApiKeyId, InstanceId, InvoiceId, MachineId, OrderId, StatementId, TeamId, TenantId,
};
use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::states::{InstanceAction, InstanceState, InvoiceStatus, PayoutStatus, StatementStatus};

// ---------------------------------------------------------------- quota

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TenantRole {
    Renter,
    Host,
    Platform,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Read,
    Rent,
    Host,
    Billing,
    Admin,
}

impl Scope {
    pub const ALL: [Scope; 5] = [
        Scope::Read,
        Scope::Rent,
        Scope::Host,
        Scope::Billing,
        Scope::Admin,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Rent => "rent",
            Scope::Host => "host",
            Scope::Billing => "billing",
            Scope::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|scope| scope.as_str() == s)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SignUpRequest {
    pub email: String,
    pub password: String,
    pub tenant_name: String,
    pub roles: Vec<TenantRole>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoginRequest {
    pub email: String,
    pub password: String,
}

/// Who is calling: the result of a login, a sign-up or an API key check.
/// `scopes` is everything for a password login and the key's scopes for a key.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Principal {
    pub user_id: Uuid,
    pub tenant_id: TenantId,
    pub email: String,
    pub tenant_roles: Vec<TenantRole>,
    pub operator: bool,
    pub scopes: Vec<Scope>,
    /// The API key the caller authenticated with; None for a login.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_id: Option<ApiKeyId>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateApiKeyRequest {
    pub tenant_id: TenantId,
    pub user_id: Uuid,
    pub name: String,
    pub scopes: Vec<Scope>,
    pub idempotency_key: String,
    /// The key the request was made with, if any: revoking it revokes this
    /// one too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by_key: Option<Uuid>,
}

/// A new key. `secret` is shown once and stored only as a hash; a repeated
/// request with the same idempotency key answers without it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApiKeyCreated {
    pub id: ApiKeyId,
    pub name: String,
    pub prefix: String,
    pub scopes: Vec<Scope>,
    pub secret: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// Whose keys a listing, revocation or rotation acts as: the caller's
/// tenant and user, and the scopes the caller holds (a key-authenticated
/// caller may not touch a key that can do more than itself).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApiKeyCaller {
    pub tenant_id: TenantId,
    pub user_id: Uuid,
    pub scopes: Vec<Scope>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ListApiKeysRequest {
    pub caller: ApiKeyCaller,
    pub include_revoked: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RotateApiKeyRequest {
    pub caller: ApiKeyCaller,
    pub idempotency_key: String,
}

/// One API key as a listing shows it; never its secret.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApiKeyInfo {
    pub id: ApiKeyId,
    pub user_id: Uuid,
    /// The email of the user the key acts as.
    pub owner_email: String,
    pub name: String,
    pub prefix: String,
    pub scopes: Vec<Scope>,
    pub created_at: DateTime<Utc>,
    /// To the minute: authentication records it at most once a minute.
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    /// The key this one replaced by a rotation.
    pub rotated_from: Option<Uuid>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AuthenticateKeyRequest {
    pub secret: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TenantSummary {
    pub id: TenantId,
    pub name: String,
    pub roles: Vec<TenantRole>,
}

/// A hold on quota for one provisioning attempt (`order_id` is the holding
/// key: the order id, or a start attempt's key). It counts against the
/// tenant's quota and, when `team_id` is set, the team's.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReserveQuotaRequest {
    pub order_id: OrderId,
    pub tenant_id: TenantId,
    pub gpu_count: i32,
    pub gpu_model: String,
    /// The all-in hourly rate the order will be billed at (GPUs and any
    /// storage), in the settlement currency; the monthly budget projects it.
    pub hourly_rate: Decimal,
    #[serde(default)]
    pub team_id: Option<TeamId>,
    /// A start after a stop renews the holding of this earlier key (the
    /// order id): the new hold counts against the same team.
    #[serde(default)]
    pub renews: Option<Uuid>,
    /// Moves the live hold of this earlier key to the new one, in one
    /// transaction: the earlier hold is released and the new one admitted in
    /// its place (counting against the same team), so a re-placed order
    /// never lets go of its quota. Refused: the earlier hold stays.
    #[serde(default)]
    pub moves: Option<Uuid>,
    /// GPU-equivalents held, in eighths of a GPU: a MIG slice counts as its
    /// share of the GPU's eight memory slices (docs/mig.md). Absent: whole
    /// GPUs, `gpu_count × 8`.
    #[serde(default)]
    pub gpu_eighths: Option<i32>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QuotaReservation {
    pub order_id: OrderId,
    pub tenant_id: TenantId,
    pub gpu_count: i32,
    pub released: bool,
    #[serde(default)]
    pub gpu_model: String,
    #[serde(default)]
    pub hourly_rate: Decimal,
    #[serde(default)]
    pub team_id: Option<TeamId>,
}

/// `POST /internal/reservations/{order_id}/release` reply: always
/// `released: true` (releasing twice, or a hold never made, is fine).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReservationReleased {
    pub released: bool,
}

/// Limits of a tenant or a team. An absent dimension is not limited at that
/// level (a team is then bounded by its tenant only); in a team's
/// `borrowing_limit` an absent dimension means no borrowing on it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QuotaLimits {
    #[serde(default)]
    pub max_gpus: Option<i32>,
    /// GPU model name (as the catalog spells it) → concurrent GPUs.
    #[serde(default)]
    pub max_gpus_per_model: std::collections::BTreeMap<String, i32>,
    #[serde(default)]
    pub max_running_instances: Option<i32>,
    /// Hard budget per calendar month (UTC), settlement currency.
    #[serde(default)]
    pub monthly_budget: Option<Decimal>,
}

/// What a tenant or team holds now, and its spend this calendar month as
/// the quota service measures it (see docs/quotas.md).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QuotaUsage {
    /// GPUs held: `gpu_equivalents` rounded up (MIG slices).
    pub gpus: i32,
    /// GPU-equivalents held: whole GPUs plus each slice's share of its
    /// GPU's memory slices (`3g.40gb` = 0.5).
    #[serde(default)]
    pub gpu_equivalents: Decimal,
    pub gpus_by_model: std::collections::BTreeMap<String, i32>,
    /// Live holdings: instances from allocation until they stop or end.
    pub running_instances: i32,
    pub month_to_date_spend: Decimal,
    /// Month-to-date spend plus every live holding at its rate until the
    /// end of the month.
    pub projected_month_spend: Decimal,
    pub currency: String,
}

/// Either `limits` (every dimension, replacing the current ones) or the
/// older `max_gpus` alone (changes only that dimension).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SetTenantQuotaRequest {
    #[serde(default)]
    pub max_gpus: Option<i32>,
    #[serde(default)]
    pub limits: Option<QuotaLimits>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TenantQuota {
    pub tenant_id: TenantId,
    pub max_gpus: i32,
    pub gpus_in_use: i32,
    #[serde(default)]
    pub limits: QuotaLimits,
    #[serde(default)]
    pub usage: QuotaUsage,
    #[serde(default)]
    pub teams: Vec<Team>,
}

/// A team (project) inside a tenant, with its own quota.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Team {
    pub id: TeamId,
    pub tenant_id: TenantId,
    pub name: String,
    /// Nominal quota; no dimension above the tenant's.
    pub limits: QuotaLimits,
    /// How far beyond `limits` the team may use the tenant's unused quota.
    pub borrowing_limit: QuotaLimits,
    pub usage: QuotaUsage,
    pub created_at: DateTime<Utc>,
}

/// `user_id` is the caller: only the tenant's owners and admins manage teams.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateTeamRequest {
    pub user_id: Uuid,
    pub name: String,
    pub idempotency_key: String,
    #[serde(default)]
    pub limits: QuotaLimits,
    #[serde(default)]
    pub borrowing_limit: QuotaLimits,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SetTeamQuotaRequest {
    pub user_id: Uuid,
    pub limits: QuotaLimits,
    #[serde(default)]
    pub borrowing_limit: QuotaLimits,
}

// ---------------------------------------------------------------- catalog

/// A GPU model of the catalog: what a GPU can do, so offers compare on
/// price per TFLOP. TFLOPS are dense tensor throughput with FP32 accumulate.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GpuModel {
    pub name: String,
    pub vram_gib: i32,
    pub architecture: String,
    pub compute_capability: String,
    pub fp16_tflops: Decimal,
    pub bf16_tflops: Decimal,
    /// The MIG profiles of the model; empty when it has no MIG.
    #[serde(default)]
    pub mig_profiles: Vec<crate::mig::MigProfile>,
}

/// One GPU of a machine as its host configured it, and the slices in use on
/// it (`GET /internal/machines/{id}/gpus`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MachineGpu {
    pub index: u32,
    pub mode: crate::mig::GpuMode,
    /// The fixed layout (`mig_fixed` only).
    #[serde(default)]
    pub layout: Vec<crate::mig::LayoutSlot>,
    /// Rented whole now.
    pub rented_whole: bool,
    #[serde(default)]
    pub slices: Vec<crate::mig::HeldSlice>,
}

/// `PUT /internal/machines/{id}/gpus/{index}`: a host sets a GPU whole or
/// MIG. Refused while the GPU holds a rental.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SetGpuModeRequest {
    pub host_tenant_id: TenantId,
    pub gpu_index: u32,
    pub mode: crate::mig::GpuMode,
    #[serde(default)]
    pub layout: Vec<crate::mig::LayoutSlot>,
}

/// A host's price of one MIG profile on a machine, per slice-hour. Profiles
/// without one are priced from the GPU price by memory share.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MigPrice {
    pub profile: String,
    pub price_per_hour: Decimal,
}

/// `PUT /internal/machines/{id}/mig-prices`: replaces the machine's
/// per-profile prices.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SetMigPricesRequest {
    pub host_tenant_id: TenantId,
    pub prices: Vec<MigPrice>,
}

/// Free slices of one profile on an offer, and their price.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MigOffer {
    pub profile: String,
    pub memory_gib: i32,
    pub compute_slices: u8,
    pub memory_slices: u8,
    /// Slices of this profile that could be placed now, one after another.
    pub free: i32,
    pub price_per_hour: Decimal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verification {
    Unverified,
    Verified,
    Suspended,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostProfile {
    pub tenant_id: TenantId,
    pub legal_name: Option<String>,
    pub country: Option<String>,
    pub payout_currency: Option<String>,
    pub verification: Verification,
    pub verification_reason: Option<String>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UpdateHostProfileRequest {
    pub legal_name: String,
    pub country: String,
    pub payout_currency: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SetVerificationRequest {
    pub verification: Verification,
    pub reason: String,
    /// The operator who decided (recorded as `verified_by`); None when no
    /// operator is known.
    #[serde(default)]
    pub operator_id: Option<Uuid>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiskType {
    Nvme,
    Ssd,
    Hdd,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RegisterMachineRequest {
    pub host_tenant_id: TenantId,
    pub name: String,
    pub gpu_model: String,
    pub gpu_count: i32,
    /// VRAM per GPU; the catalog's figure for the model when absent.
    pub vram_gib: Option<i32>,
    pub cpu_model: Option<String>,
    pub cpu_cores: i32,
    pub ram_gib: i32,
    pub disk_gib: i32,
    pub disk_type: Option<DiskType>,
    pub upload_mbps: Option<i32>,
    pub download_mbps: Option<i32>,
    pub country: String,
    pub region: Option<String>,
    pub datacenter: Option<bool>,
    pub driver_version: Option<String>,
    /// e.g. "12.4".
    pub cuda_version: Option<String>,
    pub idempotency_key: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Machine {
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
    pub disk_type: DiskType,
    pub upload_mbps: i32,
    pub download_mbps: i32,
    pub country: String,
    pub region: String,
    pub datacenter: bool,
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
    pub price_per_gpu_hour: Option<Decimal>,
    pub min_bid_per_gpu_hour: Option<Decimal>,
    pub storage_price_per_gb_month: Decimal,
    pub bandwidth_up_price_per_tb: Decimal,
    pub bandwidth_down_price_per_tb: Decimal,
    pub allowed_gpu_counts: Vec<i32>,
    pub list_until: Option<DateTime<Utc>>,
    pub currency: String,
    pub listed: bool,
    pub online: bool,
    pub last_heartbeat_at: Option<DateTime<Utc>>,
    /// Rolling uptime ratio over listed time, 0..1; None before any evidence.
    pub reliability: Option<Decimal>,
    pub verified: bool,
    pub created_at: DateTime<Utc>,
}

/// A registered machine and its agent token, shown once.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MachineRegistered {
    pub machine: Machine,
    pub agent_token: Option<String>,
}

/// A new agent token, shown once.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentTokenIssued {
    pub machine_id: MachineId,
    pub agent_token: String,
}

/// A stretch of time a listed machine's agent was silent past the grace
/// period: the evidence behind its reliability.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HeartbeatGap {
    pub started_at: DateTime<Utc>,
    /// None while the machine is still silent.
    pub ended_at: Option<DateTime<Utc>>,
    pub seconds: i64,
}

/// `GET /internal/machines/{id}/heartbeat-gaps` query: the host, who must
/// own the machine.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HeartbeatGapsQuery {
    pub host_tenant_id: TenantId,
}

/// `GET /internal/machines/{id}/gpu-activity` query (see [`GpuActivity`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GpuActivityQuery {
    /// Utilisation (percent, 0 to 100) at or above which a GPU counts as busy.
    pub threshold: i32,
    /// Only heartbeats at or after this instant count.
    pub since: DateTime<Utc>,
}

/// A machine's agent token revoked (`revoked` is always true).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentTokenRevoked {
    pub machine_id: MachineId,
    pub revoked: bool,
}

/// A machine deleted, or already deleted (`deleted` is always true).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MachineDeleted {
    pub machine_id: MachineId,
    pub deleted: bool,
}

/// Listing terms. Absent optional fields keep their current value.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SetPricingRequest {
    pub host_tenant_id: TenantId,
    pub price_per_gpu_hour: Decimal,
    pub min_bid_per_gpu_hour: Option<Decimal>,
    pub storage_price_per_gb_month: Option<Decimal>,
    pub bandwidth_up_price_per_tb: Option<Decimal>,
    pub bandwidth_down_price_per_tb: Option<Decimal>,
    pub allowed_gpu_counts: Option<Vec<i32>>,
    pub list_until: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostMachineRequest {
    pub host_tenant_id: TenantId,
}

/// `GET /internal/machines/{id}/live-instances?host_tenant_id=` (ordering):
/// how many renters' instances of the host's machine are neither destroyed
/// nor failed. Each may hold a disk on the machine, so while any is left the
/// machine cannot be deleted.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MachineLiveInstances {
    pub machine_id: MachineId,
    pub live_instances: i64,
}

pub use crate::states::RentalType;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OfferSort {
    /// Cheapest GPU-hour first.
    #[default]
    Price,
    /// Cheapest per dense FP16 TFLOP first.
    PricePerTflop,
    /// Most reliable first.
    Reliability,
    /// Fastest download first.
    Bandwidth,
}

/// What a renter searches for. Every field is a constraint that must hold;
/// absent fields do not constrain.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OfferSearch {
    /// This one model (exact catalog name, case-insensitive). With
    /// `gpu_models` too, both must hold (the intersection), like every
    /// other pair of constraints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_model: Option<String>,
    /// Any of these models (exact catalog names, case-insensitive).
    #[serde(default)]
    pub gpu_models: Vec<String>,
    /// GPUs the renter wants: the offer must allow a rental of this size and
    /// have that many free.
    pub gpu_count: Option<i32>,
    pub min_vram_gib: Option<i32>,
    /// On-demand price, or the minimum bid for interruptible searches.
    pub max_price_per_gpu_hour: Option<Decimal>,
    pub rental_type: Option<RentalType>,
    /// ISO 3166-1 alpha-2 codes, any of.
    #[serde(default)]
    pub countries: Vec<String>,
    #[serde(default)]
    pub regions: Vec<String>,
    pub datacenter_only: Option<bool>,
    pub verified_only: Option<bool>,
    pub min_reliability: Option<Decimal>,
    /// e.g. "12.4".
    pub min_cuda_version: Option<String>,
    pub min_disk_gib: Option<i32>,
    pub min_upload_mbps: Option<i32>,
    pub min_download_mbps: Option<i32>,
    /// Storage the renter will ask for: a filter on the machine's disk like
    /// `min_disk_gib` (the larger of the two holds), and priced into
    /// `price_per_hour_all_in`.
    pub disk_gib: Option<i32>,
    /// Offers with a free MIG slice of this profile (e.g. `3g.40gb`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_profile: Option<String>,
    pub sort: Option<OfferSort>,
    pub first: Option<i64>,
    pub after: Option<String>,
}

/// A listed, online machine as renters see it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Offer {
    pub id: MachineId,
    pub machine_id: MachineId,
    pub host_tenant_id: TenantId,
    pub gpu_model: String,
    pub gpu_count: i32,
    pub gpus_free: i32,
    pub allowed_gpu_counts: Vec<i32>,
    pub vram_gib: i32,
    pub fp16_tflops: Decimal,
    pub cpu_model: String,
    pub cpu_cores: i32,
    pub ram_gib: i32,
    pub disk_gib: i32,
    pub disk_type: DiskType,
    pub upload_mbps: i32,
    pub download_mbps: i32,
    pub country: String,
    pub region: String,
    pub datacenter: bool,
    pub cuda_version: Option<String>,
    pub reliability: Option<Decimal>,
    pub verified: bool,
    pub price_per_gpu_hour: Decimal,
    pub min_bid_per_gpu_hour: Option<Decimal>,
    /// The price the search ranked on: on-demand price, or the minimum bid
    /// for interruptible searches.
    pub rental_price_per_gpu_hour: Decimal,
    pub price_per_tflop_hour: Decimal,
    /// GPUs only, for the searched GPU count (1 when none was given).
    pub price_per_hour_gpu_only: Decimal,
    /// GPUs plus the searched storage (`disk_gib`) at the storage price.
    pub price_per_hour_all_in: Decimal,
    pub storage_price_per_gb_month: Decimal,
    pub bandwidth_up_price_per_tb: Decimal,
    pub bandwidth_down_price_per_tb: Decimal,
    pub list_until: Option<DateTime<Utc>>,
    pub currency: String,
    /// MIG slices for sale on the machine, per profile.
    #[serde(default)]
    pub mig_slices: Vec<MigOffer>,
    /// The host's terms for reserved blocks (issue 20); `None`: not offered.
    #[serde(default)]
    pub reserved: Option<ReservedTerms>,
    /// When GPUs of the machine are next free for an on-demand rental: now
    /// when some are free, else the end of the reserved block that holds them
    /// (`None`: not foreseeable, rented on demand).
    #[serde(default)]
    pub available_from: Option<DateTime<Utc>>,
    /// An on-demand rental placed now must end by then: the start of the
    /// next reserved block on the GPUs it would get (`None`: none booked).
    #[serde(default)]
    pub available_until: Option<DateTime<Utc>>,
}

/// A host's terms for reserved blocks on one machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReservedTerms {
    /// What a renter pays per GPU-hour of a reserved block, charged up front.
    pub price_per_gpu_hour: Decimal,
    /// How far ahead the machine can be booked: a block must end within
    /// this many days of now.
    pub max_lead_days: i32,
    /// The shortest block, in hours.
    pub min_block_hours: i32,
    pub currency: String,
}

/// Where an order by constraints could go: `search` with its `gpu_count`
/// set, counting GPUs held by interruptible rentals the order outranks (all
/// of them for on-demand; bids below `bid_per_gpu_hour` for interruptible).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PlacementSearch {
    pub search: OfferSearch,
    pub bid_per_gpu_hour: Option<Decimal>,
}

/// Why a search found nothing, computed over the live offers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NoOffers {
    /// Live offers before any constraint.
    pub live_offers: i64,
    pub constraints: Vec<ConstraintReport>,
    pub relaxations: Vec<Relaxation>,
    pub summary: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConstraintReport {
    /// The search field, e.g. `max_price_per_gpu_hour`.
    pub constraint: String,
    /// The constraint as asked, e.g. `price <= 2.00 USD/GPU-hour`.
    pub asked: String,
    /// Live offers this constraint alone rules out.
    pub eliminated: i64,
    /// Offers that would match if only this constraint were dropped.
    pub matching_without: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Relaxation {
    pub constraint: String,
    /// The nearest value that matches, taken from the data, e.g. `2.40`.
    pub value: String,
    /// Offers that match with this value and every other constraint.
    pub matching: i64,
    pub description: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OfferPage {
    pub offers: Vec<Offer>,
    pub end_cursor: Option<String>,
    pub has_next_page: bool,
    /// Present when the first page is empty.
    pub no_offers: Option<NoOffers>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AllocateRequest {
    /// The holding key: the order id, or a start attempt's key.
    pub order_id: OrderId,
    pub tenant_id: TenantId,
    pub machine_id: MachineId,
    pub gpu_count: i32,
    #[serde(default)]
    pub rental_type: RentalType,
    /// Interruptible only: what the renter pays per GPU-hour, at least the
    /// machine's minimum bid; higher bids preempt lower ones.
    #[serde(default)]
    pub bid_per_gpu_hour: Option<Decimal>,
    /// On-demand only: refused with `PRICE_ABOVE_MAX` when the machine's
    /// price at commit is above it.
    #[serde(default)]
    pub max_price_per_gpu_hour: Option<Decimal>,
    /// The instance these GPUs are for, when it exists already (a start).
    #[serde(default)]
    pub instance_id: Option<InstanceId>,
    /// A MIG slice of this profile instead of whole GPUs (`gpu_count` 1,
    /// on-demand only).
    #[serde(default)]
    pub mig_profile: Option<String>,
    /// GPUs of this reservation's running block (issue 20): only its booked
    /// GPUs, not yet in use by its other instances; no GPU price.
    #[serde(default)]
    pub reservation_id: Option<crate::ids::ReservationId>,
    /// With `reservation_id`: at the block's end the allocation goes on as an
    /// on-demand rental of the same GPUs when they are free, the machine is
    /// listed and its price is at most this (else it is preempted).
    #[serde(default)]
    pub continue_up_to_per_gpu_hour: Option<Decimal>,
}

/// GPUs held for an order, with the rates committed with them: the billed
/// GPU price (the bid for interruptible rentals) and the machine's storage
/// and bandwidth prices at that instant.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Allocation {
    pub order_id: OrderId,
    pub machine_id: MachineId,
    pub host_tenant_id: TenantId,
    pub gpu_count: i32,
    pub released: bool,
    #[serde(default)]
    pub preempted: bool,
    #[serde(default)]
    pub gpu_model: String,
    #[serde(default)]
    pub machine_gpu_count: i32,
    #[serde(default)]
    pub rental_type: RentalType,
    #[serde(default)]
    pub price_per_gpu_hour: Decimal,
    #[serde(default)]
    pub storage_price_per_gb_month: Decimal,
    #[serde(default)]
    pub bandwidth_up_price_per_tb: Decimal,
    #[serde(default)]
    pub bandwidth_down_price_per_tb: Decimal,
    #[serde(default)]
    pub currency: String,
    /// The GPUs held, by index on the machine (whole rentals).
    #[serde(default)]
    pub gpu_indices: Vec<u32>,
    /// The slice held (MIG rentals): its `price_per_gpu_hour` is the
    /// slice's price per hour.
    #[serde(default)]
    pub mig: Option<crate::mig::MigSlice>,
    /// GPUs of a reserved block (issue 20): `price_per_gpu_hour` is 0.
    #[serde(default)]
    pub reservation_id: Option<crate::ids::ReservationId>,
    /// The next reserved block on these GPUs starts then: an on-demand
    /// allocation is preempted at that instant (`None`: none booked).
    #[serde(default)]
    pub ends_by: Option<DateTime<Utc>>,
}

/// A holding key's GPUs given back, or none were held (`released` is
/// always true).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AllocationReleased {
    pub released: bool,
}

// ---------------------------------------------------------------- billing

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FundsCheckRequest {
    pub tenant_id: TenantId,
    pub required: Decimal,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GrantCreditRequest {
    pub tenant_id: TenantId,
    pub amount: Decimal,
    pub idempotency_key: String,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Balance {
    pub tenant_id: TenantId,
    pub amount: Decimal,
    pub currency: String,
}

/// What a tenant's rentals cost per hour right now (the sum of the rates of
/// its open GPU and storage intervals, from metering); `running_intervals`
/// counts the GPU ones (rentals running).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BurnRate {
    pub tenant_id: TenantId,
    pub per_hour: Decimal,
    pub running_intervals: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostEarnings {
    pub host_tenant_id: TenantId,
    pub total: Decimal,
    pub currency: String,
    pub postings: Vec<EarningPosting>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EarningPosting {
    pub transaction_id: String,
    pub instance_id: Option<InstanceId>,
    pub gross: Decimal,
    pub fee: Decimal,
    pub net: Decimal,
    pub fee_rate: Decimal,
    pub posted_at: DateTime<Utc>,
}

// ---------------------------------------------------------------- metering

/// `GET /internal/usage` query: a tenant's usage intervals, or one
/// instance's.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UsageQuery {
    pub tenant_id: TenantId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<InstanceId>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UsageInterval {
    pub id: Uuid,
    pub instance_id: InstanceId,
    pub meter: String,
    pub started_at: Option<DateTime<Utc>>,
    pub ended_at: Option<DateTime<Utc>>,
    pub seconds: Option<i64>,
    pub price_per_hour: Decimal,
    pub currency: String,
    /// The instance's run the interval belongs to (1 for the first run, +1
    /// per start after a stop); storage and bandwidth meter whole lives.
    #[serde(default)]
    pub run_seq: i32,
}

/// The instances whose charges a caller wants (at most
/// [`MAX_CHARGED_INSTANCES`]), all of `tenant_id`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstanceChargesRequest {
    pub tenant_id: TenantId,
    pub instance_ids: Vec<InstanceId>,
}

pub const MAX_CHARGED_INSTANCES: usize = 500;

/// What the ledger has charged a renter for one instance so far (every
/// usage posting, per meter). An instance with nothing posted gets zeros.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct InstanceCharges {
    pub instance_id: InstanceId,
    pub currency: String,
    /// Everything charged, all meters.
    pub total: Decimal,
    /// GPU time billed, whole seconds.
    pub gpu_seconds: i64,
    pub gpu_amount: Decimal,
    /// Disk time billed, whole seconds (whatever the disk's size).
    pub storage_seconds: i64,
    pub storage_gib_seconds: i64,
    pub storage_amount: Decimal,
    pub bandwidth_up_bytes: i64,
    pub bandwidth_up_amount: Decimal,
    pub bandwidth_down_bytes: i64,
    pub bandwidth_down_amount: Decimal,
}

// ---------------------------------------------------------------- ordering

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateOrderRequest {
    pub tenant_id: TenantId,
    pub user_id: Uuid,
    pub idempotency_key: String,
    /// An offer, or `constraints` for auto-placement: exactly one of them.
    pub offer_id: Option<MachineId>,
    #[serde(default)]
    pub constraints: Option<PlacementConstraints>,
    pub gpu_count: i32,
    pub max_price_per_gpu_hour: Option<Decimal>,
    #[serde(default)]
    pub rental_type: RentalType,
    /// Required for interruptible orders; refused for on-demand ones.
    #[serde(default)]
    pub bid_per_gpu_hour: Option<Decimal>,
    pub ssh_public_key: Option<String>,
    pub image: Option<String>,
    /// The team (of the tenant) the order counts against, besides the tenant.
    #[serde(default)]
    pub team_id: Option<TeamId>,
    /// The instance's disk in GiB (billed from creation to destroy); the
    /// default when absent is ordering's `DEFAULT_DISK_GIB`.
    #[serde(default)]
    pub disk_gib: Option<i32>,
    /// Replaces the image's command (`[program, args...]`).
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// The container's environment. Values are secrets: never logged (see
    /// [`EnvVar`]'s `Debug`), never returned.
    #[serde(default)]
    pub env: Vec<EnvVar>,
    /// Container ports to publish on host ports.
    #[serde(default)]
    pub ports: Vec<u16>,
    /// A MIG slice of this profile instead of whole GPUs (`gpu_count` 1).
    #[serde(default)]
    pub mig_profile: Option<String>,
    /// Launch on GPUs of this running reservation (issue 20) instead of an
    /// offer: no GPU charge (the block is paid), storage and bandwidth as usual.
    #[serde(default)]
    pub reservation_id: Option<crate::ids::ReservationId>,
    /// With `reservation_id`: what happens to the instance when the block
    /// ends (stop, the default, or go on at the on-demand price up to
    /// `max_price_per_gpu_hour`, which is then required).
    #[serde(default)]
    pub when_block_ends: Option<crate::block_end::WhenBlockEnds>,
}

/// One environment variable of an order. Its `Debug` leaves the value out:
/// values are the renter's secrets.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvVar {
    pub name: String,
    pub value: String,
}

impl std::fmt::Debug for EnvVar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvVar")
            .field("name", &self.name)
            .field("value", &"<redacted>")
            .finish()
    }
}

/// Where a renter reaches a running instance (from the host agent's
/// readiness check).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Connection {
    /// The machine's public address (the agent's `--public-host`).
    pub ssh_host: String,
    /// The agent's SSH gateway port.
    pub ssh_port: u16,
    /// The SSH user: the instance id.
    pub ssh_user: String,
    /// The order's ports and the host ports they are published on.
    pub ports: Vec<PortMapping>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortMapping {
    pub container_port: u16,
    pub host_port: u16,
}

/// What a connection may hold, so one from an agent cannot bloat a row.
pub const MAX_CONNECTION_PORTS: usize = 16;
pub const MAX_SSH_HOST_LEN: usize = 253;

impl Connection {
    /// `ssh -p <port> <user>@<host>`.
    pub fn ssh_command(&self) -> String {
        format!(
            "ssh -p {} {}@{}",
            self.ssh_port, self.ssh_user, self.ssh_host
        )
    }

    /// Checks what an agent handed back: a hostname or IP address of at
    /// most 253 characters, a non-zero port, at most 16 port mappings, and
    /// the SSH user `instance_id`.
    pub fn validate(&self, instance_id: Uuid) -> Result<(), String> {
        let host = &self.ssh_host;
        let hostname = !host.is_empty()
            && host.len() <= MAX_SSH_HOST_LEN
            && host.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && !label.starts_with('-')
                    && !label.ends_with('-')
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            });
        let ip = host.len() <= MAX_SSH_HOST_LEN && host.parse::<std::net::IpAddr>().is_ok();
        if !hostname && !ip {
            return Err("ssh_host: not a hostname or IP address".into());
        }
        if self.ssh_port == 0 {
            return Err("ssh_port: 0".into());
        }
        if self.ssh_user != instance_id.to_string() {
            return Err("ssh_user: not the instance id".into());
        }
        if self.ports.len() > MAX_CONNECTION_PORTS {
            return Err(format!("ports: more than {MAX_CONNECTION_PORTS}"));
        }
        if self
            .ports
            .iter()
            .any(|p| p.container_port == 0 || p.host_port == 0)
        {
            return Err("ports: port 0".into());
        }
        Ok(())
    }
}

/// What an order by constraints asks of a machine; it gets the cheapest
/// live offer that matches and has the GPUs free when it is placed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PlacementConstraints {
    /// Any of these models (exact catalog names, case-insensitive).
    #[serde(default)]
    pub gpu_models: Vec<String>,
    #[serde(default)]
    pub regions: Vec<String>,
    #[serde(default)]
    pub countries: Vec<String>,
    pub min_reliability: Option<Decimal>,
    pub min_vram_gib: Option<i32>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Instance {
    pub id: InstanceId,
    pub order_id: OrderId,
    pub tenant_id: TenantId,
    pub machine_id: MachineId,
    pub gpu_model: String,
    pub gpu_count: i32,
    /// The MIG slice rented (`price_per_gpu_hour` is then its price per
    /// hour); `None` for whole GPUs.
    #[serde(default)]
    pub mig_profile: Option<String>,
    pub rental_type: RentalType,
    /// The billed GPU rate: the on-demand price committed at allocation, or
    /// the bid for interruptible rentals.
    pub price_per_gpu_hour: Decimal,
    pub price_per_hour_total: Decimal,
    /// Storage and bandwidth rates in the machine's listing units, as
    /// committed at allocation.
    #[serde(default)]
    pub storage_price_per_gb_month: Decimal,
    #[serde(default)]
    pub bandwidth_up_price_per_tb: Decimal,
    #[serde(default)]
    pub bandwidth_down_price_per_tb: Decimal,
    pub currency: String,
    /// When the catalog took the GPUs back for a higher-priority order.
    #[serde(default)]
    pub preempted_at: Option<DateTime<Utc>>,
    pub status: InstanceState,
    pub status_reason: Option<String>,
    pub allowed_actions: Vec<InstanceAction>,
    pub image: String,
    pub run_seq: i32,
    pub running_at: Option<DateTime<Utc>>,
    pub stopped_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// How to log in: set only while the instance is `running` and its
    /// machine's agent reported one (simulated machines report none).
    #[serde(default)]
    pub connection: Option<Connection>,
    /// Bytes in the instance's `/workspace` as its machine's agent last
    /// measured them (real-container machines only), and when.
    #[serde(default)]
    pub disk_used_bytes: Option<i64>,
    #[serde(default)]
    pub disk_measured_at: Option<DateTime<Utc>>,
    /// The reservation whose block the instance runs in (issue 20): its GPU
    /// time is paid; it is stopped when the block ends.
    #[serde(default)]
    pub reservation_id: Option<crate::ids::ReservationId>,
    /// On a reservation that it asked to outlive: the most it pays per
    /// GPU-hour on demand after the block (None: it stops with the block).
    #[serde(default)]
    pub continue_up_to_per_gpu_hour: Option<Decimal>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TenantRequest {
    pub tenant_id: TenantId,
}

/// The tenant a GET is asked for (`?tenant_id=`): an instance, its events or
/// its rules are found only in their own tenant.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct TenantQuery {
    pub tenant_id: TenantId,
}

/// The host a GET about machines is asked for (`?host_tenant_id=`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct HostQuery {
    pub host_tenant_id: TenantId,
}

/// Provisioner's report that an instance is user-ready or has failed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProvisioningResult {
    pub ready: bool,
    pub reason: Option<String>,
    /// How the renter logs in, when the machine's agent said (the `agent`
    /// driver's readiness check); absent from simulated machines.
    #[serde(default)]
    pub connection: Option<Connection>,
    /// Which provisioning attempt the report is about (absent: the current
    /// one). A late report about an earlier attempt changes nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<i32>,
}

/// Provisioner's report on a deprovisioning job: `clean` only when the
/// machine validated that nothing of the instance remains.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeprovisioningResult {
    pub clean: bool,
    pub reason: Option<String>,
}

/// Lifecycle rules of one instance, enforced by ordering. Durations are in
/// seconds; an absent field is no rule. Idle-stop needs both its fields.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct InstanceRules {
    /// Stop once a run has lasted this long (counted from its `running_at`).
    pub max_duration_seconds: Option<i64>,
    /// Stop once every GPU of the machine stayed below
    /// `idle_threshold_percent` utilisation for this long.
    pub idle_stop_after_seconds: Option<i64>,
    pub idle_threshold_percent: Option<i32>,
    /// Destroy once stopped for this long.
    pub auto_destroy_after_stopped_seconds: Option<i64>,
}

/// `POST /internal/orders` body: the order and, optionally, its rules (kept
/// apart from [`CreateOrderRequest`] so the order's fingerprint is the order's).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateOrderWithRules {
    #[serde(flatten)]
    pub order: CreateOrderRequest,
    #[serde(default)]
    pub rules: Option<InstanceRules>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SetInstanceRulesRequest {
    pub tenant_id: TenantId,
    pub rules: InstanceRules,
}

/// When catalog last heard a machine's GPUs, and when any of them was last at
/// or above a utilisation threshold (`GET /internal/machines/{id}/gpu-activity`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct GpuActivity {
    pub machine_id: MachineId,
    pub last_sample_at: Option<DateTime<Utc>>,
    pub last_busy_at: Option<DateTime<Utc>>,
}

// ---------------------------------------------------------------- reconciler

/// Most ids one liveness or interval lookup may name (the reconciler pages
/// through its instances in pages of this size).
pub const RECONCILE_LOOKUP_MAX: usize = 500;

/// `POST /internal/machines/heartbeats` body: the machines whose liveness
/// ordering's reconciler needs.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct MachineHeartbeatsRequest {
    pub machine_ids: Vec<MachineId>,
}

/// One machine as the catalog's liveness rule sees it: `online` iff its last
/// heartbeat is younger than the grace period. Machines the catalog does not
/// know are left out of the answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct MachineHeartbeat {
    pub machine_id: MachineId,
    pub last_heartbeat_at: Option<DateTime<Utc>>,
    pub online: bool,
}

/// `POST /internal/intervals/lookup` body: the instances whose GPU intervals
/// ordering's reconciler compares with its own view.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct IntervalLookupRequest {
    pub instance_ids: Vec<InstanceId>,
}

/// One GPU interval (one run of an instance) as metering holds it: a start
/// or an end is null until its event arrived.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct GpuInterval {
    pub instance_id: InstanceId,
    pub run_seq: i32,
    pub started_at: Option<DateTime<Utc>>,
    pub ended_at: Option<DateTime<Utc>>,
}

// ---------------------------------------------------------------- billing: top-ups

/// `POST /internal/top-ups` body: a renter tenant asks to add `amount` (in
/// the settlement currency) to its balance by card through Stripe.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateTopUpRequest {
    pub tenant_id: TenantId,
    pub amount: Decimal,
    /// Same key + same amount → the same top-up (and PaymentIntent); none →
    /// a new top-up every time.
    pub idempotency_key: Option<String>,
}

/// A top-up: one Stripe PaymentIntent. The balance rises when Stripe reports
/// the PaymentIntent succeeded, not when the top-up is created.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TopUp {
    pub id: Uuid,
    pub tenant_id: TenantId,
    pub amount: Decimal,
    pub currency: String,
    /// `creating` until Stripe answered, then the PaymentIntent's status
    /// (`requires_payment_method`, ..., `succeeded`, `canceled`), or
    /// `failed` when the PaymentIntent could not be created.
    pub status: String,
    pub payment_intent_id: Option<String>,
    /// What the browser confirms the payment with (Stripe.js); only in the
    /// answer to the create call, never in listings.
    pub client_secret: Option<String>,
    pub created_at: DateTime<Utc>,
    pub succeeded_at: Option<DateTime<Utc>>,
    /// Why a `failed` top-up's PaymentIntent could not be created.
    #[serde(default)]
    pub failure_reason: Option<String>,
}

/// The public money terms billing applies (`GET /internal/platform-terms`):
/// what the front ends show before anyone has money in the system.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PlatformTerms {
    /// The settlement currency (ISO 4217).
    pub currency: String,
    /// The platform's share of each charge, in [0, 1).
    pub fee_rate: Decimal,
}

// ---------------------------------------------------------------- billing: invoices

/// One line of a renter's invoice: the usage postings of one instance, meter
/// and hourly price, summed exactly and rounded once to the currency's minor
/// unit (half-even).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct InvoiceLine {
    pub instance_id: InstanceId,
    /// A [`crate::states::Meter`], or `unknown` for usage posted before
    /// postings carried their meter.
    pub meter: String,
    /// Whole seconds, corrections included.
    pub quantity: i64,
    /// Always `second`.
    pub unit: String,
    /// The rental's price per hour (all its GPUs).
    pub unit_price_per_hour: Decimal,
    /// Usage from before the invoice's period that reached the ledger after
    /// the invoice of its own period was finalized (billed as a delta).
    pub earlier_period: bool,
    pub charge_period_start: DateTime<Utc>,
    pub charge_period_end: DateTime<Utc>,
    /// How many ledger postings the line sums.
    pub postings: i32,
    /// The exact sum of the postings (9 decimals).
    pub exact_amount: Decimal,
    /// `exact_amount` rounded half-even to the minor unit: what is billed.
    pub amount: Decimal,
}

/// A renter's invoice. A preview (`status` `draft`) has no id or number and
/// is not stored; a finalized invoice never changes except its status.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Invoice {
    pub id: Option<InvoiceId>,
    pub tenant_id: TenantId,
    /// Per tenant, from 1, without gaps.
    pub number: Option<i64>,
    /// `draft` (a preview), `finalized`, `paid` or `void`.
    pub status: InvoiceStatus,
    pub period_start: DateTime<Utc>,
    pub period_end: DateTime<Utc>,
    pub currency: String,
    pub subtotal: Decimal,
    pub total: Decimal,
    /// The exact sum of the postings, and `total − exact_total` (posted to
    /// the rounding account when the invoice was finalized).
    pub exact_total: Decimal,
    pub rounding: Decimal,
    pub finalized_at: Option<DateTime<Utc>>,
    pub paid_at: Option<DateTime<Utc>>,
    pub voided_at: Option<DateTime<Utc>>,
    pub void_reason: Option<String>,
    pub lines: Vec<InvoiceLine>,
    /// Refunds and credits issued against the invoice, oldest first.
    pub credit_notes: Vec<CreditNote>,
}

/// A refund or SLA credit against an invoice: numbered per tenant without
/// gaps, posted to the renter's balance, never an edit of the invoice.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CreditNote {
    pub id: Uuid,
    pub tenant_id: TenantId,
    pub invoice_id: InvoiceId,
    pub number: i64,
    pub amount: Decimal,
    pub currency: String,
    pub reason: String,
    pub created_at: DateTime<Utc>,
}

/// `POST /internal/invoices/credit-notes` body (operators). The same key
/// returns the same credit note.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreditNoteRequest {
    pub invoice_id: InvoiceId,
    pub amount: Decimal,
    pub reason: String,
    pub idempotency_key: String,
}

/// `POST /internal/invoices/void/{id}` body (operators).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VoidInvoiceRequest {
    pub reason: String,
}

/// `POST /internal/invoices/run` body: finalize the invoices of every tenant
/// with uninvoiced usage (or only `tenant_id`) for the period ending at
/// `period_end` (default: the start of the current invoice period).
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct RunInvoicesRequest {
    pub period_end: Option<DateTime<Utc>>,
    pub tenant_id: Option<TenantId>,
}

/// What a run finalized (or found already finalized) for that period end.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunInvoicesResult {
    pub period_end: DateTime<Utc>,
    pub invoices: Vec<Invoice>,
}

/// An invoice's usage as CSV in FinOps FOCUS 1.0 columns, one row per line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UsageExport {
    pub invoice_id: InvoiceId,
    pub csv: String,
}

// ---------------------------------------------------------------- billing: dashboards

/// `GET /internal/dashboards/balance-history/{tenant_id}` query: a page of
/// the renter balance's entries, newest first, after the cursor `after`
/// (an entry id from an earlier page's `end_cursor`).
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct BalanceHistoryQuery {
    pub first: Option<i64>,
    pub after: Option<String>,
}

/// One entry of a renter's balance, with the posting it belongs to.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BalanceHistoryEntry {
    /// The entry's id: also its cursor.
    pub entry_id: i64,
    pub transaction_id: String,
    /// The posting's kind: `usage`, `credit`, `top_up`, `downtime_credit`, ...
    pub kind: String,
    pub description: String,
    pub instance_id: Option<InstanceId>,
    /// Signed: a charge is negative, a credit positive.
    pub amount: Decimal,
    /// The balance right after this entry (all entries up to and including it).
    pub balance_after: Decimal,
    pub posted_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BalanceHistoryPage {
    pub tenant_id: TenantId,
    pub currency: String,
    /// The balance now (the newest entry's `balance_after`).
    pub balance: Decimal,
    pub entries: Vec<BalanceHistoryEntry>,
    pub end_cursor: Option<String>,
    pub has_next_page: bool,
}

/// The width of a dashboard bucket (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SeriesBucket {
    Hour,
    Day,
}

/// What a usage series is grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SeriesGroupBy {
    Instance,
    GpuModel,
    Meter,
}

/// `GET /internal/dashboards/usage/{tenant_id}` query: usage whose segment
/// started in `[from, to)`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UsageSeriesQuery {
    pub bucket: SeriesBucket,
    pub group_by: SeriesGroupBy,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
}

/// One bucket of one key. A bucket × key with no usage has no point.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct UsagePoint {
    pub bucket_start: DateTime<Utc>,
    /// The instance id, GPU model or meter; None when the posting predates
    /// the dimension (GPU model before migration 000021).
    pub key: Option<String>,
    /// Whole seconds, corrections (negative) included.
    pub seconds: i64,
    /// The exact sum of the renter's legs of these postings, as a positive
    /// charge (9 decimals).
    pub spend: Decimal,
    pub postings: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct UsageSeries {
    pub tenant_id: TenantId,
    pub bucket: SeriesBucket,
    pub group_by: SeriesGroupBy,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub currency: String,
    /// Bucket start, then key.
    pub points: Vec<UsagePoint>,
    pub total_seconds: i64,
    pub total_spend: Decimal,
}

/// `GET /internal/dashboards/earnings/{host_tenant_id}` query: usage whose
/// segment started in `[from, to)` and downtime credits posted in it, by day.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MachineEarningsQuery {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
}

/// A host's earnings on one machine in one UTC day.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MachineDayEarnings {
    pub day: DateTime<Utc>,
    /// None for usage that predates the dimension (before migration 000021).
    pub machine_id: Option<MachineId>,
    pub gpu_model: Option<String>,
    pub seconds: i64,
    /// What renters were charged: `net + fee`.
    pub gross: Decimal,
    pub fee: Decimal,
    /// The host's legs of the usage postings.
    pub net: Decimal,
    /// Downtime credits paid from the host's earnings (positive).
    pub downtime_credits: Decimal,
    /// `net − downtime_credits`: what the day did to the earnings account.
    pub total: Decimal,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MachineEarnings {
    pub host_tenant_id: TenantId,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub currency: String,
    /// Day, then machine.
    pub days: Vec<MachineDayEarnings>,
    pub total_gross: Decimal,
    pub total_fee: Decimal,
    pub total_net: Decimal,
    pub total_downtime_credits: Decimal,
    pub total: Decimal,
}

// ---------------------------------------------------------------- billing: host statements and payouts

/// One line of a host statement: one machine's usage of one meter (and, on
/// a separate line, late usage of earlier periods), with the exact sums of
/// the postings' legs (9 decimals).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StatementLine {
    /// None for usage that predates the dimension (before migration 000021).
    pub machine_id: Option<MachineId>,
    pub gpu_model: Option<String>,
    /// A [`crate::states::Meter`], or `unknown` for usage posted before
    /// postings carried their meter.
    pub meter: String,
    pub earlier_period: bool,
    /// Whole seconds, corrections included.
    pub seconds: i64,
    /// What renters were charged: `net + fee`.
    pub gross: Decimal,
    pub fee: Decimal,
    /// The host's legs of the usage postings.
    pub net: Decimal,
    /// Downtime credits paid from the host's earnings (positive).
    pub downtime_credits: Decimal,
    /// `net − downtime_credits`.
    pub amount: Decimal,
    pub postings: i32,
}

/// A host's statement of a period. A preview (`status` `draft`) has no id or
/// number and is not stored; a finalized statement never changes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Statement {
    pub id: Option<StatementId>,
    pub host_tenant_id: TenantId,
    /// Per host, from 1, without gaps.
    pub number: Option<i64>,
    /// `draft` (a preview) or `finalized`.
    pub status: StatementStatus,
    pub period_start: DateTime<Utc>,
    pub period_end: DateTime<Utc>,
    pub currency: String,
    pub seconds: i64,
    pub gross: Decimal,
    pub fee: Decimal,
    pub net: Decimal,
    pub downtime_credits: Decimal,
    /// The sum of the lines' amounts: `net − downtime_credits`.
    pub earnings: Decimal,
    /// Other postings on the host's earnings (none are made today).
    pub adjustments: Decimal,
    /// Payouts posted in the statement (positive).
    pub payouts: Decimal,
    pub opening_balance: Decimal,
    /// `opening_balance + earnings + adjustments − payouts`.
    pub closing_balance: Decimal,
    pub finalized_at: Option<DateTime<Utc>>,
    pub lines: Vec<StatementLine>,
}

/// `POST /internal/statements/run`: finalizes the statements of every host
/// with earnings postings on no statement yet (or only `host_tenant_id`) for
/// the period ending at `period_end` (default: the start of the current
/// period).
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct RunStatementsRequest {
    pub period_end: Option<DateTime<Utc>>,
    pub host_tenant_id: Option<TenantId>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunStatementsResult {
    pub period_end: DateTime<Utc>,
    pub statements: Vec<Statement>,
}

/// `POST /internal/payout-accounts`: the host's Stripe connected account,
/// created once (a repeat returns the same account).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreatePayoutAccountRequest {
    pub host_tenant_id: TenantId,
    /// ISO 3166-1 alpha-2 country of the host's business.
    pub country: String,
    pub email: Option<String>,
}

/// Where Stripe's hosted Connect onboarding sends the host back: `return_url`
/// when it is done, `refresh_url` when the link expired or was used.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OnboardingLinkRequest {
    pub return_url: String,
    pub refresh_url: String,
}

/// A single-use link to Stripe's hosted onboarding of the host's connected
/// account.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OnboardingLink {
    pub url: String,
    pub expires_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PayoutAccount {
    pub host_tenant_id: TenantId,
    pub stripe_account_id: String,
    pub country: String,
    pub email: Option<String>,
    /// The `transfers` capability at Stripe: `active`, `inactive`, `pending`.
    pub transfers_status: String,
    pub payouts_enabled: bool,
    pub details_submitted: bool,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Payout {
    pub id: Uuid,
    pub host_tenant_id: TenantId,
    pub stripe_account_id: String,
    /// In the settlement currency, a whole number of minor units.
    pub amount: Decimal,
    pub currency: String,
    /// `pending`, `paid` or `failed`.
    pub status: PayoutStatus,
    pub stripe_transfer_id: Option<String>,
    /// The ledger posting `payout:{id}`, once paid.
    pub transaction_id: Option<String>,
    pub failure_reason: Option<String>,
    pub created_at: DateTime<Utc>,
    pub paid_at: Option<DateTime<Utc>>,
}

/// `POST /internal/payouts/run`: pays every host with a connected account
/// (or only `host_tenant_id`) whose available earnings reach the minimum.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct RunPayoutsRequest {
    pub host_tenant_id: Option<TenantId>,
}

/// What a payout run did for one host that had an account.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PayoutOutcome {
    pub host_tenant_id: TenantId,
    /// `paid`, `failed`, `pending` (Stripe unavailable; retried by the next
    /// run under the same idempotency key) or `skipped`.
    pub outcome: String,
    /// What was available, in the settlement currency (9 decimals).
    pub available: Decimal,
    pub payout: Option<Payout>,
    /// Why it was skipped, failed or left pending.
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunPayoutsResult {
    pub outcomes: Vec<PayoutOutcome>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod connection_tests {
    use super::*;

    fn connection(id: Uuid, host: &str) -> Connection {
        Connection {
            ssh_host: host.into(),
            ssh_port: 2222,
            ssh_user: id.to_string(),
            ports: vec![PortMapping {
                container_port: 8888,
                host_port: 40000,
            }],
        }
    }

    #[test]
    fn a_connection_must_be_the_instances_and_bounded() {
        let id = Uuid::now_v7();
        for host in [
            "rig-7.hosts.example",
            "203.0.113.7",
            "2001:db8::1",
            "localhost",
        ] {
            assert_eq!(connection(id, host).validate(id), Ok(()), "{host}");
        }
        for host in ["", "bad host", "-x.example", "a..b", &"a".repeat(254)] {
            assert!(connection(id, host).validate(id).is_err(), "{host}");
        }
        assert!(connection(Uuid::now_v7(), "h").validate(id).is_err());
        let mut many = connection(id, "h");
        many.ports = vec![many.ports[0]; MAX_CONNECTION_PORTS + 1];
        assert!(many.validate(id).is_err());
        assert_eq!(
            connection(id, "h").ssh_command(),
            format!("ssh -p 2222 {id}@h")
        );
    }

    #[test]
    fn env_values_stay_out_of_debug_output() {
        let var = EnvVar {
            name: "TOKEN".into(),
            value: "hunter2".into(),
        };
        let shown = format!("{var:?}");
        assert!(shown.contains("TOKEN") && !shown.contains("hunter2"));
        let job = crate::events::ProvisionInstance {
            gpu_indices: Vec::new(),
            mig: None,
            instance_id: InstanceId(Uuid::nil()),
            order_id: OrderId(Uuid::nil()),
            tenant_id: TenantId(Uuid::nil()),
            machine_id: MachineId(Uuid::nil()),
            gpu_count: 1,
            machine_gpu_count: 1,
            image: "i".into(),
            ssh_public_key: None,
            command: None,
            env: [("TOKEN".to_owned(), "hunter2".to_owned())].into(),
            ports: vec![],
            disk_gib: None,
        };
        let shown = format!("{job:?}");
        assert!(shown.contains("TOKEN") && !shown.contains("hunter2"));
        // Older commands (without the new fields) still decode.
        let old = serde_json::json!({
            "instance_id": Uuid::nil(), "order_id": Uuid::nil(), "tenant_id": Uuid::nil(),
            "machine_id": Uuid::nil(), "gpu_count": 1, "machine_gpu_count": 1,
            "image": "i", "ssh_public_key": null,
        });
        let old: crate::events::ProvisionInstance = serde_json::from_value(old).unwrap();
        assert!(old.env.is_empty() && old.ports.is_empty() && old.command.is_none());
    }
}
