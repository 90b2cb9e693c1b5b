//! Accounts, tokens, API keys and tenant quotas.

use async_graphql::{Context, Enum, ID, InputObject, Object, SimpleObject};
use chrono::{DateTime, Utc};
use contracts::api;
use contracts::endpoints;
use contracts::ids::{ApiKeyId, TenantId};

use super::instant;
use super::quotas::{Quota, QuotaLimitsInput, Team};
use crate::auth::{self, Access, JwtKeys};
use crate::clients;
use crate::error::{GatewayError, GqlResult};
use crate::validate;

#[derive(Enum, Copy, Clone, Debug, PartialEq, Eq)]
#[graphql(remote = "contracts::api::TenantRole")]
pub enum TenantRole {
    Renter,
    Host,
    /// The marketplace's own tenant; cannot be chosen at sign-up.
    Platform,
}

#[derive(Enum, Copy, Clone, Debug, PartialEq, Eq)]
#[graphql(remote = "contracts::api::Scope")]
pub enum Scope {
    Read,
    Rent,
    Host,
    Billing,
    Admin,
}

/// The caller.
#[derive(SimpleObject, Clone, Debug)]
pub struct Me {
    pub user_id: ID,
    pub tenant_id: ID,
    pub email: String,
    pub tenant_roles: Vec<TenantRole>,
    pub operator: bool,
    pub scopes: Vec<Scope>,
}

impl From<api::Principal> for Me {
    fn from(p: api::Principal) -> Self {
        Self {
            user_id: p.user_id.into(),
            tenant_id: p.tenant_id.into(),
            email: p.email,
            tenant_roles: p.tenant_roles.into_iter().map(Into::into).collect(),
            operator: p.operator,
            scopes: p.scopes.into_iter().map(Into::into).collect(),
        }
    }
}

#[derive(SimpleObject)]
pub struct AuthPayload {
    /// Send as `Authorization: Bearer <token>`.
    token: String,
    #[graphql(deprecation = "a String: use `expiresAtUtc`, a DateTime")]
    expires_at: String,
    expires_at_utc: DateTime<Utc>,
    me: Me,
}

#[derive(InputObject)]
pub struct SignUpInput {
    email: String,
    /// At least 8 characters.
    password: String,
    tenant_name: String,
    /// RENTER, HOST or both.
    roles: Vec<TenantRole>,
}

#[derive(InputObject)]
pub struct CreateApiKeyInput {
    name: String,
    /// At most the scopes of the caller.
    scopes: Vec<Scope>,
    /// Repeating the request with the same key returns the same API key
    /// (without its secret); the same key with another name, scopes or user
    /// is a CONFLICT.
    idempotency_key: String,
}

/// An API key; never its secret.
#[derive(SimpleObject)]
pub struct ApiKey {
    id: ID,
    name: String,
    /// The start of the secret (`gpm_<prefix>_…`), to recognise a key by.
    prefix: String,
    scopes: Vec<Scope>,
    /// The email of the user the key acts as.
    owner_email: String,
    #[graphql(deprecation = "a String: use `createdAtUtc`, a DateTime")]
    created_at: String,
    created_at_utc: DateTime<Utc>,
    /// The last request the key authenticated, to the minute (recorded at
    /// most once a minute); null if never used.
    #[graphql(deprecation = "a String: use `lastUsedAtUtc`, a DateTime")]
    last_used_at: Option<String>,
    /// The last request the key authenticated, to the minute (recorded at
    /// most once a minute); null if never used.
    last_used_at_utc: Option<DateTime<Utc>>,
    /// Null while the key works.
    #[graphql(deprecation = "a String: use `revokedAtUtc`, a DateTime")]
    revoked_at: Option<String>,
    /// Null while the key works.
    revoked_at_utc: Option<DateTime<Utc>>,
    /// The key this one replaced, when it was made by `rotateApiKey`.
    rotated_from: Option<ID>,
}

impl From<api::ApiKeyInfo> for ApiKey {
    fn from(key: api::ApiKeyInfo) -> Self {
        Self {
            id: key.id.into(),
            name: key.name,
            prefix: key.prefix,
            scopes: key.scopes.into_iter().map(Into::into).collect(),
            owner_email: key.owner_email,
            created_at: instant(key.created_at),
            created_at_utc: key.created_at,
            last_used_at: key.last_used_at.map(instant),
            last_used_at_utc: key.last_used_at,
            revoked_at: key.revoked_at.map(instant),
            revoked_at_utc: key.revoked_at,
            rotated_from: key.rotated_from.map(Into::into),
        }
    }
}

#[derive(SimpleObject)]
pub struct CreateApiKeyPayload {
    api_key: ApiKey,
    /// Shown only once; null when the request was a replay.
    secret: Option<String>,
}

impl CreateApiKeyPayload {
    /// A key just made for `principal`, who owns it.
    fn new(
        principal: &api::Principal,
        created: api::ApiKeyCreated,
        rotated_from: Option<uuid::Uuid>,
    ) -> Self {
        Self {
            api_key: ApiKey {
                id: created.id.into(),
                name: created.name,
                prefix: created.prefix,
                scopes: created.scopes.into_iter().map(Into::into).collect(),
                owner_email: principal.email.clone(),
                created_at: instant(created.created_at),
                created_at_utc: created.created_at,
                last_used_at: None,
                last_used_at_utc: None,
                revoked_at: None,
                revoked_at_utc: None,
                rotated_from: rotated_from.map(Into::into),
            },
            secret: created.secret,
        }
    }
}

fn key_caller(principal: &api::Principal) -> api::ApiKeyCaller {
    api::ApiKeyCaller {
        tenant_id: principal.tenant_id,
        user_id: principal.user_id,
        scopes: principal.scopes.clone(),
    }
}

/// A tenant's quota in every dimension, its usage, and its teams'.
#[derive(SimpleObject)]
pub struct TenantQuota {
    tenant_id: ID,
    /// Same as `quota.limits.maxGpus`.
    max_gpus: i32,
    /// Same as `quota.usage.gpus`.
    gpus_in_use: i32,
    quota: Quota,
    teams: Vec<Team>,
}

impl From<api::TenantQuota> for TenantQuota {
    fn from(q: api::TenantQuota) -> Self {
        Self {
            tenant_id: q.tenant_id.into(),
            max_gpus: q.max_gpus,
            gpus_in_use: q.gpus_in_use,
            quota: Quota::new(q.limits, q.usage),
            teams: q.teams.into_iter().map(Into::into).collect(),
        }
    }
}

fn auth_payload(ctx: &Context<'_>, principal: api::Principal) -> Result<AuthPayload, GatewayError> {
    let keys = ctx
        .data_opt::<JwtKeys>()
        .ok_or_else(|| GatewayError::Internal("JWT keys missing from schema data".into()))?;
    let issued = keys.issue(&principal)?;
    Ok(AuthPayload {
        token: issued.token,
        expires_at: instant(issued.expires_at),
        expires_at_utc: issued.expires_at,
        me: principal.into(),
    })
}

#[derive(Default)]
pub struct IdentityQuery;

#[Object]
impl IdentityQuery {
    async fn me(&self, ctx: &Context<'_>) -> GqlResult<Me> {
        Ok(auth::principal(ctx).await?.into())
    }

    /// The caller's tenant by default; other tenants for operators only.
    async fn tenant_quota(
        &self,
        ctx: &Context<'_>,
        tenant_id: Option<ID>,
    ) -> GqlResult<TenantQuota> {
        let principal = auth::principal(ctx).await?;
        let tenant_id = match tenant_id {
            Some(id) => validate::id("tenantId", &id)?,
            None => principal.tenant_id.into(),
        };
        if tenant_id != principal.tenant_id {
            Access::Operator.check(&principal)?;
        }
        let quota = clients::from_context(ctx)?
            .quota
            .call(endpoints::quota::TENANT_QUOTA, TenantId(tenant_id), &())
            .await?;
        Ok(quota.into())
    }

    /// The API keys the caller may manage, newest first: every key of the
    /// tenant for its owners and admins, the caller's own for other users.
    /// Revoked keys only with `includeRevoked` (at most the newest 500).
    async fn api_keys(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = false)] include_revoked: bool,
    ) -> GqlResult<Vec<ApiKey>> {
        let principal = auth::principal(ctx).await?;
        let request = api::ListApiKeysRequest {
            caller: key_caller(&principal),
            include_revoked,
        };
        let keys = clients::from_context(ctx)?
            .quota
            .call(endpoints::quota::API_KEY_LIST, (), &request)
            .await?;
        Ok(keys.into_iter().map(Into::into).collect())
    }
}

#[derive(Default)]
pub struct IdentityMutation;

#[Object]
impl IdentityMutation {
    /// Creates a user and its tenant, and logs in.
    async fn sign_up(&self, ctx: &Context<'_>, input: SignUpInput) -> GqlResult<AuthPayload> {
        // No checks here: quota checks every field and reports all that are
        // wrong at once (`extensions.fieldErrors`), for the sign-up form.
        let request = api::SignUpRequest {
            email: input.email,
            password: input.password,
            tenant_name: input.tenant_name,
            roles: input.roles.into_iter().map(Into::into).collect(),
        };
        let principal = clients::from_context(ctx)?
            .quota
            .call(endpoints::quota::SIGN_UP, (), &request)
            .await?;
        Ok(auth_payload(ctx, principal)?)
    }

    // No shape checks on the credentials: a login that cannot succeed must
    // answer like any other failed login, UNAUTHENTICATED from quota.
    async fn login(
        &self,
        ctx: &Context<'_>,
        email: String,
        password: String,
    ) -> GqlResult<AuthPayload> {
        // Failed logins are throttled per account and per client address
        // (`crate::caller`); the throttle is absent only in unit tests.
        let throttle = ctx.data_opt::<crate::caller::LoginThrottle>();
        let address = ctx
            .data_opt::<crate::caller::ClientAddress>()
            .map_or("unknown", |a| a.0.as_str())
            .to_owned();
        if let Some(throttle) = throttle {
            throttle.check(&email, &address)?;
        }
        let request = api::LoginRequest {
            email: email.clone(),
            password,
        };
        let result = clients::from_context(ctx)?
            .quota
            .call(endpoints::quota::LOGIN, (), &request)
            .await;
        let principal = match result {
            Ok(principal) => principal,
            Err(error) => {
                if error.code == contracts::ErrorCode::Unauthenticated
                    && let Some(throttle) = throttle
                {
                    throttle.failed(&email, &address);
                }
                return Err(error.into());
            }
        };
        Ok(auth_payload(ctx, principal)?)
    }

    async fn create_api_key(
        &self,
        ctx: &Context<'_>,
        input: CreateApiKeyInput,
    ) -> GqlResult<CreateApiKeyPayload> {
        let principal = auth::principal(ctx).await?;
        validate::not_blank("name", &input.name)?;
        validate::idempotency_key("idempotencyKey", &input.idempotency_key)?;
        if input.scopes.is_empty() {
            return Err(GatewayError::validation("scopes", "must name at least one scope").into());
        }
        let scopes: Vec<api::Scope> = input.scopes.into_iter().map(Into::into).collect();
        auth::check_key_scopes(&principal, &scopes)?;
        let request = api::CreateApiKeyRequest {
            tenant_id: principal.tenant_id,
            user_id: principal.user_id,
            name: input.name,
            scopes,
            idempotency_key: input.idempotency_key,
            created_by_key: principal.api_key_id.map(Into::into),
        };
        let created = clients::from_context(ctx)?
            .quota
            .call(endpoints::quota::API_KEY_CREATE, (), &request)
            .await?;
        Ok(CreateApiKeyPayload::new(&principal, created, None))
    }

    /// Revokes an API key: its next request is UNAUTHENTICATED. Any key the
    /// caller may list (`apiKeys`); a key with a scope the caller does not
    /// hold is FORBIDDEN, a key the caller cannot list NOT_FOUND. Revoking a
    /// revoked key returns it unchanged.
    async fn revoke_api_key(&self, ctx: &Context<'_>, id: ID) -> GqlResult<ApiKey> {
        let principal = auth::principal(ctx).await?;
        let id = validate::id("id", &id)?;
        let key = clients::from_context(ctx)?
            .quota
            .call(
                endpoints::quota::API_KEY_REVOKE,
                ApiKeyId(id),
                &key_caller(&principal),
            )
            .await?;
        Ok(key.into())
    }

    /// Replaces one of the caller's own keys by a new key with the same name
    /// and scopes, and revokes the old one, at once. The new secret is shown
    /// once; repeating the request with the same `idempotencyKey` returns the
    /// same new key without it.
    async fn rotate_api_key(
        &self,
        ctx: &Context<'_>,
        id: ID,
        idempotency_key: String,
    ) -> GqlResult<CreateApiKeyPayload> {
        let principal = auth::principal(ctx).await?;
        let id = validate::id("id", &id)?;
        validate::idempotency_key("idempotencyKey", &idempotency_key)?;
        let request = api::RotateApiKeyRequest {
            caller: key_caller(&principal),
            idempotency_key,
        };
        let created = clients::from_context(ctx)?
            .quota
            .call(endpoints::quota::API_KEY_ROTATE, ApiKeyId(id), &request)
            .await?;
        Ok(CreateApiKeyPayload::new(&principal, created, Some(id)))
    }

    /// Operators only. Either `limits` (every dimension, replacing the
    /// current ones; `maxGpus` required) or `maxGpus` alone (only that
    /// dimension changes). Teams' quotas are lowered to fit.
    async fn set_tenant_quota(
        &self,
        ctx: &Context<'_>,
        tenant_id: ID,
        max_gpus: Option<i32>,
        limits: Option<QuotaLimitsInput>,
    ) -> GqlResult<TenantQuota> {
        auth::authorize(ctx, Access::Operator).await?;
        let tenant_id = validate::id("tenantId", &tenant_id)?;
        let request = match (max_gpus, limits) {
            (Some(max_gpus), None) => {
                validate::at_least("maxGpus", max_gpus, 0)?;
                api::SetTenantQuotaRequest {
                    max_gpus: Some(max_gpus),
                    limits: None,
                }
            }
            (None, Some(limits)) => {
                let limits = limits.into_api("limits")?;
                if limits.max_gpus.is_none() {
                    return Err(GatewayError::validation(
                        "limits",
                        "maxGpus is required: a tenant's quota always limits its GPUs",
                    )
                    .into());
                }
                api::SetTenantQuotaRequest {
                    max_gpus: None,
                    limits: Some(limits),
                }
            }
            _ => {
                return Err(
                    GatewayError::validation("limits", "give either limits or maxGpus").into(),
                );
            }
        };
        let quota = clients::from_context(ctx)?
            .quota
            .call(
                endpoints::quota::SET_TENANT_QUOTA,
                TenantId(tenant_id),
                &request,
            )
            .await?;
        Ok(quota.into())
    }
}
