//! Bodies of the services' internal HTTP APIs. The gateway and the services
//! share these types so a field cannot be renamed on one side only. Every
//! internal route lives under `/internal` and needs the service token.

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

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
    pub tenant_id: Uuid,
    pub email: String,
    pub tenant_roles: Vec<TenantRole>,
    pub operator: bool,
    pub scopes: Vec<Scope>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateApiKeyRequest {
    pub tenant_id: Uuid,
    pub user_id: Uuid,
    pub name: String,
    pub scopes: Vec<Scope>,
    pub idempotency_key: String,
}

/// A new key. `secret` is shown once and stored only as a hash; a repeated
/// request with the same idempotency key answers without it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApiKeyCreated {
    pub id: Uuid,
    pub name: String,
    pub prefix: String,
    pub scopes: Vec<Scope>,
    pub secret: Option<String>,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AuthenticateKeyRequest {
    pub secret: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TenantSummary {
    pub id: Uuid,
    pub name: String,
    pub roles: Vec<TenantRole>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReserveQuotaRequest {
    pub order_id: Uuid,
    pub tenant_id: Uuid,
    pub gpu_count: i32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QuotaReservation {
    pub order_id: Uuid,
    pub tenant_id: Uuid,
    pub gpu_count: i32,
    pub released: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SetTenantQuotaRequest {
    pub max_gpus: i32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TenantQuota {
    pub tenant_id: Uuid,
    pub max_gpus: i32,
    pub gpus_in_use: i32,
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
    pub tenant_id: Uuid,
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
    pub host_tenant_id: Uuid,
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
    pub id: Uuid,
    pub host_tenant_id: Uuid,
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
    pub machine_id: Uuid,
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

/// Listing terms. Absent optional fields keep their current value.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SetPricingRequest {
    pub host_tenant_id: Uuid,
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
    pub host_tenant_id: Uuid,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum RentalType {
    #[default]
    OnDemand,
    Interruptible,
}

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
    /// Storage the renter will ask for, priced into `price_per_hour_all_in`.
    pub disk_gib: Option<i32>,
    pub sort: Option<OfferSort>,
    pub first: Option<i64>,
    pub after: Option<String>,
}

/// A listed, online machine as renters see it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Offer {
    pub id: Uuid,
    pub machine_id: Uuid,
    pub host_tenant_id: Uuid,
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
    pub order_id: Uuid,
    pub tenant_id: Uuid,
    pub machine_id: Uuid,
    pub gpu_count: i32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Allocation {
    pub order_id: Uuid,
    pub machine_id: Uuid,
    pub host_tenant_id: Uuid,
    pub gpu_count: i32,
    pub released: bool,
}

// ---------------------------------------------------------------- billing

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FundsCheckRequest {
    pub tenant_id: Uuid,
    pub required: Decimal,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GrantCreditRequest {
    pub tenant_id: Uuid,
    pub amount: Decimal,
    pub idempotency_key: String,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Balance {
    pub tenant_id: Uuid,
    pub amount: Decimal,
    pub currency: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostEarnings {
    pub host_tenant_id: Uuid,
    pub total: Decimal,
    pub currency: String,
    pub postings: Vec<EarningPosting>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EarningPosting {
    pub transaction_id: String,
    pub instance_id: Option<Uuid>,
    pub gross: Decimal,
    pub fee: Decimal,
    pub net: Decimal,
    pub fee_rate: Decimal,
    pub posted_at: DateTime<Utc>,
}

// ---------------------------------------------------------------- metering

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UsageInterval {
    pub id: Uuid,
    pub instance_id: Uuid,
    pub meter: String,
    pub started_at: Option<DateTime<Utc>>,
    pub ended_at: Option<DateTime<Utc>>,
    pub seconds: Option<i64>,
    pub price_per_hour: Decimal,
    pub currency: String,
}

// ---------------------------------------------------------------- ordering

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateOrderRequest {
    pub tenant_id: Uuid,
    pub user_id: Uuid,
    pub idempotency_key: String,
    pub offer_id: Uuid,
    pub gpu_count: i32,
    pub max_price_per_gpu_hour: Option<Decimal>,
    pub ssh_public_key: Option<String>,
    pub image: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Instance {
    pub id: Uuid,
    pub order_id: Uuid,
    pub tenant_id: Uuid,
    pub machine_id: Uuid,
    pub gpu_model: String,
    pub gpu_count: i32,
    pub rental_type: String,
    pub price_per_gpu_hour: Decimal,
    pub price_per_hour_total: Decimal,
    pub currency: String,
    pub status: String,
    pub status_reason: Option<String>,
    pub allowed_actions: Vec<String>,
    pub image: String,
    pub run_seq: i32,
    pub running_at: Option<DateTime<Utc>>,
    pub stopped_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TenantRequest {
    pub tenant_id: Uuid,
}

/// Provisioner's report that an instance is user-ready or has failed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProvisioningResult {
    pub ready: bool,
    pub reason: Option<String>,
}

/// Provisioner's report on a deprovisioning job: `clean` only when the
/// machine validated that nothing of the instance remains.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeprovisioningResult {
    pub clean: bool,
    pub reason: Option<String>,
}
