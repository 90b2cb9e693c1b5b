//! Quota's internal endpoints.

use super::Endpoint;
use crate::api::{
    ApiKeyCaller, ApiKeyCreated, ApiKeyInfo, AuthenticateKeyRequest, CreateApiKeyRequest,
    CreateTeamRequest, ListApiKeysRequest, LoginRequest, Principal, QuotaReservation,
    ReservationReleased, ReserveQuotaRequest, RotateApiKeyRequest, SetTeamQuotaRequest,
    SetTenantQuotaRequest, SignUpRequest, Team, TenantQuota,
};
use crate::ids::{ApiKeyId, OrderId, TeamId, TenantId};
use crate::operator::{QuotaPressure, QuotaPressureQuery, TenantName, TenantNamesRequest};

/// Creates a user and its tenant and answers the new principal (201).
pub const SIGN_UP: Endpoint<(), SignUpRequest, Principal> = Endpoint::post("/internal/signup");

/// Checks an email and password and answers who logged in.
pub const LOGIN: Endpoint<(), LoginRequest, Principal> = Endpoint::post("/internal/login");

/// Creates an API key; its secret is in the reply once (201).
pub const API_KEY_CREATE: Endpoint<(), CreateApiKeyRequest, ApiKeyCreated> =
    Endpoint::post("/internal/api-keys");

/// Checks an API key's secret and answers the principal it acts as.
pub const API_KEY_AUTHENTICATE: Endpoint<(), AuthenticateKeyRequest, Principal> =
    Endpoint::post("/internal/api-keys/authenticate");

/// The API keys the caller may manage, newest first.
pub const API_KEY_LIST: Endpoint<(), ListApiKeysRequest, Vec<ApiKeyInfo>> =
    Endpoint::post("/internal/api-keys/list");

/// Revokes an API key (idempotent) and answers it.
pub const API_KEY_REVOKE: Endpoint<ApiKeyId, ApiKeyCaller, ApiKeyInfo> =
    Endpoint::post("/internal/api-keys/{id}/revoke");

/// Replaces an API key by a new one with the same name and scopes (201).
pub const API_KEY_ROTATE: Endpoint<ApiKeyId, RotateApiKeyRequest, ApiKeyCreated> =
    Endpoint::post("/internal/api-keys/{id}/rotate");

/// Holds quota for one provisioning attempt, or refuses it.
pub const RESERVE: Endpoint<(), ReserveQuotaRequest, QuotaReservation> =
    Endpoint::post("/internal/reservations");

/// The tenants at or above a share of a quota limit, for operators.
pub const QUOTA_PRESSURE: Endpoint<(), QuotaPressureQuery, QuotaPressure> =
    Endpoint::get("/internal/quota-pressure");

/// The names of the tenants given (unknown ids left out).
pub const TENANT_NAMES: Endpoint<(), TenantNamesRequest, Vec<TenantName>> =
    Endpoint::post("/internal/tenant-names");

/// Gives back a holding key's quota reservation (idempotent).
pub const RESERVATION_RELEASE: Endpoint<OrderId, (), ReservationReleased> =
    Endpoint::post("/internal/reservations/{order_id}/release");

/// A tenant's quota: limits, usage and teams.
pub const TENANT_QUOTA: Endpoint<TenantId, (), TenantQuota> =
    Endpoint::get("/internal/tenants/{tenant_id}/quota");

/// Replaces a tenant's limits, or only its GPU limit (operators).
pub const SET_TENANT_QUOTA: Endpoint<TenantId, SetTenantQuotaRequest, TenantQuota> =
    Endpoint::put("/internal/tenants/{tenant_id}/quota");

/// A tenant's teams with their quotas and usage.
pub const TEAM_LIST: Endpoint<TenantId, (), Vec<Team>> =
    Endpoint::get("/internal/tenants/{tenant_id}/teams");

/// Creates a team inside a tenant (201).
pub const TEAM_CREATE: Endpoint<TenantId, CreateTeamRequest, Team> =
    Endpoint::post("/internal/tenants/{tenant_id}/teams");

/// Replaces a team's quota and borrowing limit.
pub const SET_TEAM_QUOTA: Endpoint<(TenantId, TeamId), SetTeamQuotaRequest, Team> =
    Endpoint::put("/internal/tenants/{tenant_id}/teams/{team_id}/quota");
