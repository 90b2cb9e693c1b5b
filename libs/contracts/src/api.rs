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

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RegisterMachineRequest {
    pub host_tenant_id: Uuid,
    pub name: String,
    pub gpu_model: String,
    pub gpu_count: i32,
    pub vram_gib: i32,
    pub cpu_cores: i32,
    pub ram_gib: i32,
    pub disk_gib: i32,
    pub country: String,
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
    pub cpu_cores: i32,
    pub ram_gib: i32,
    pub disk_gib: i32,
    pub country: String,
    pub price_per_gpu_hour: Option<Decimal>,
    pub currency: String,
    pub listed: bool,
    pub created_at: DateTime<Utc>,
}

/// A registered machine and its agent token, shown once.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MachineRegistered {
    pub machine: Machine,
    pub agent_token: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SetPricingRequest {
    pub host_tenant_id: Uuid,
    pub price_per_gpu_hour: Decimal,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostMachineRequest {
    pub host_tenant_id: Uuid,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OfferQuery {
    pub gpu_model: Option<String>,
    pub max_price_per_gpu_hour: Option<Decimal>,
    pub min_gpus: Option<i32>,
    /// Page size; the catalog caps it.
    pub first: Option<i64>,
    /// Opaque cursor from a previous page's `end_cursor`.
    pub after: Option<String>,
}

/// A listed machine as renters see it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Offer {
    pub id: Uuid,
    pub machine_id: Uuid,
    pub host_tenant_id: Uuid,
    pub gpu_model: String,
    pub gpu_count: i32,
    pub gpus_free: i32,
    pub vram_gib: i32,
    pub cpu_cores: i32,
    pub ram_gib: i32,
    pub disk_gib: i32,
    pub country: String,
    pub price_per_gpu_hour: Decimal,
    pub currency: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OfferPage {
    pub offers: Vec<Offer>,
    pub end_cursor: Option<String>,
    pub has_next_page: bool,
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
