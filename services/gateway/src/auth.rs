//! Who is calling and what they may do: JWTs the gateway issues and checks,
//! API keys checked by quota, and the scope and role rules of each field.

use async_graphql::Context;
use chrono::{DateTime, Utc};
use contracts::ErrorCode;
use contracts::api::{AuthenticateKeyRequest, Principal, Scope, TenantRole};
use contracts::endpoints;
use contracts::ids::TenantId;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;
use uuid::Uuid;

use platform::settings::SecretString;

use crate::clients::Clients;
use crate::error::GatewayError;

/// API key secrets carry this prefix, so a bearer token can be told apart
/// from a JWT without a round trip.
pub const API_KEY_PREFIX: &str = "gpm_";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Claims {
    pub sub: Uuid,
    pub tid: Uuid,
    pub email: String,
    pub roles: Vec<TenantRole>,
    pub op: bool,
    pub scopes: Vec<Scope>,
    pub iat: i64,
    pub exp: i64,
}

impl Claims {
    fn into_principal(self) -> Principal {
        Principal {
            user_id: self.sub,
            tenant_id: TenantId(self.tid),
            email: self.email,
            tenant_roles: self.roles,
            operator: self.op,
            scopes: self.scopes,
            api_key_id: None,
        }
    }
}

/// A token and the instant it stops being accepted.
#[derive(Debug, Clone)]
pub struct IssuedToken {
    pub token: String,
    pub expires_at: DateTime<Utc>,
}

/// The HMAC keys: the first signs, every one verifies, so a key can be
/// rotated in by putting it first and rotated out once its tokens expired.
#[derive(Clone)]
pub struct JwtKeys {
    signing_kid: String,
    signing: EncodingKey,
    verifying: Vec<(String, DecodingKey)>,
    ttl_seconds: i64,
    validation: Validation,
}

impl JwtKeys {
    pub fn new(keys: &[(String, SecretString)], ttl_seconds: i64) -> Result<Self, GatewayError> {
        // jsonwebtoken panics on first use when no crypto backend is selected;
        // find that out at start-up instead of on a request.
        if jsonwebtoken::crypto::CryptoProvider::try_get_default().is_none() {
            return Err(GatewayError::Config(
                "jsonwebtoken has no crypto provider (enable exactly one of rust_crypto, aws_lc_rs)"
                    .into(),
            ));
        }
        let Some((signing_kid, signing_secret)) = keys.first() else {
            return Err(GatewayError::Config("no JWT keys configured".into()));
        };
        if ttl_seconds <= 0 {
            return Err(GatewayError::Config("JWT TTL must be positive".into()));
        }
        let bad_key = |kid: &str| GatewayError::Config(format!("JWT key {kid:?} is empty"));
        let signing = EncodingKey::from_secret(signing_secret.expose().as_bytes())
            .map_err(|_| bad_key(signing_kid))?;
        let verifying = keys
            .iter()
            .map(|(kid, secret)| {
                DecodingKey::from_secret(secret.expose().as_bytes())
                    .map(|key| (kid.clone(), key))
                    .map_err(|_| bad_key(kid))
            })
            .collect::<Result<_, _>>()?;
        let mut validation = Validation::new(Algorithm::HS256);
        // Issuer and verifier are the same service; a leeway would only let
        // expired tokens live on.
        validation.leeway = 0;
        validation.set_required_spec_claims(&["exp", "sub", "iat"]);
        Ok(Self {
            signing_kid: signing_kid.clone(),
            signing,
            verifying,
            ttl_seconds,
            validation,
        })
    }

    pub fn issue(&self, principal: &Principal) -> Result<IssuedToken, GatewayError> {
        self.issue_at(principal, Utc::now())
    }

    fn issue_at(
        &self,
        principal: &Principal,
        now: DateTime<Utc>,
    ) -> Result<IssuedToken, GatewayError> {
        let expires_at = now + chrono::Duration::seconds(self.ttl_seconds);
        let claims = Claims {
            sub: principal.user_id,
            tid: principal.tenant_id.into(),
            email: principal.email.clone(),
            roles: principal.tenant_roles.clone(),
            op: principal.operator,
            scopes: principal.scopes.clone(),
            iat: now.timestamp(),
            exp: expires_at.timestamp(),
        };
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some(self.signing_kid.clone());
        let token = jsonwebtoken::encode(&header, &claims, &self.signing)
            .map_err(|e| GatewayError::Internal(format!("signing JWT: {e}")))?;
        Ok(IssuedToken { token, expires_at })
    }

    pub fn verify(&self, token: &str) -> Result<Principal, GatewayError> {
        let invalid = |why: &str| GatewayError::Unauthenticated(format!("invalid token: {why}"));
        let header = jsonwebtoken::decode_header(token).map_err(|_| invalid("malformed"))?;
        let kid = header.kid.ok_or_else(|| invalid("no key id"))?;
        let key = self
            .verifying
            .iter()
            .find(|(known, _)| *known == kid)
            .map(|(_, key)| key)
            .ok_or_else(|| invalid("unknown key id"))?;
        let data =
            jsonwebtoken::decode::<Claims>(token, key, &self.validation).map_err(|e| {
                match e.kind() {
                    jsonwebtoken::errors::ErrorKind::ExpiredSignature => invalid("expired"),
                    jsonwebtoken::errors::ErrorKind::InvalidSignature => invalid("bad signature"),
                    _ => invalid("rejected"),
                }
            })?;
        // A token lives at most the configured TTL, whoever signed it: one
        // with `exp` 2^62 (or no `iat`, refused by the claims' type) is not
        // one this gateway issued.
        let claims = data.claims;
        if claims.exp.saturating_sub(claims.iat) > self.ttl_seconds
            || claims.iat > Utc::now().timestamp() + 60
        {
            return Err(invalid("lifetime beyond the configured TTL"));
        }
        Ok(claims.into_principal())
    }
}

/// What the `Authorization` header held.
#[derive(Debug, Clone)]
pub enum Credential {
    None,
    Malformed,
    Jwt(String),
    ApiKey(String),
}

impl Credential {
    pub fn from_header(value: Option<&str>) -> Self {
        let Some(value) = value else {
            return Self::None;
        };
        let Some((scheme, token)) = value.trim().split_once(' ') else {
            return Self::Malformed;
        };
        let token = token.trim();
        if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
            return Self::Malformed;
        }
        if token.starts_with(API_KEY_PREFIX) {
            Self::ApiKey(token.to_owned())
        } else {
            Self::Jwt(token.to_owned())
        }
    }
}

/// The caller of one GraphQL request, resolved once: over HTTP before the
/// request runs (`crate::caller`, an invalid credential refuses the whole
/// request), on a WebSocket by the first field that needs it.
pub struct RequestAuth {
    credential: Credential,
    resolved: OnceCell<Result<Principal, GatewayError>>,
}

impl RequestAuth {
    pub fn new(credential: Credential) -> Self {
        Self {
            credential,
            resolved: OnceCell::new(),
        }
    }

    pub(crate) async fn resolve(
        &self,
        keys: &JwtKeys,
        clients: &Clients,
    ) -> Result<Principal, GatewayError> {
        self.resolved
            .get_or_init(|| async {
                match &self.credential {
                    Credential::None => Err(GatewayError::Unauthenticated(
                        "authentication required".into(),
                    )),
                    Credential::Malformed => Err(GatewayError::Unauthenticated(
                        "expected an Authorization: Bearer token".into(),
                    )),
                    Credential::Jwt(token) => keys.verify(token),
                    Credential::ApiKey(secret) => authenticate_key(clients, secret).await,
                }
            })
            .await
            .clone()
    }
}

/// The request's API key, checked again while a subscription streams, so
/// that a key revoked meanwhile receives nothing more.
pub struct KeyRecheck {
    clients: Clients,
    secret: String,
}

impl KeyRecheck {
    /// The request's API key, if it was made with one (a JWT is not
    /// revocable and is checked once).
    pub fn of(ctx: &Context<'_>) -> Option<Self> {
        let Credential::ApiKey(secret) = &ctx.data_opt::<RequestAuth>()?.credential else {
            return None;
        };
        let clients = crate::clients::from_context(ctx).ok()?.clone();
        Some(Self {
            clients,
            secret: secret.clone(),
        })
    }

    /// Whether quota still accepts the key, asked anew (no cache). Fails
    /// closed: when quota cannot answer, the subscription ends and the
    /// client subscribes again.
    pub async fn still_valid(&self) -> bool {
        authenticate_key(&self.clients, &self.secret).await.is_ok()
    }
}

async fn authenticate_key(clients: &Clients, secret: &str) -> Result<Principal, GatewayError> {
    let request = AuthenticateKeyRequest {
        secret: secret.to_owned(),
    };
    clients
        .quota
        .call(endpoints::quota::API_KEY_AUTHENTICATE, (), &request)
        .await
        .map_err(|e| match e.code {
            // Quota may say "no such key" or "revoked"; either way the
            // caller is not authenticated, and which one is not their business.
            ErrorCode::NotFound | ErrorCode::Unauthenticated | ErrorCode::Forbidden => {
                GatewayError::Unauthenticated("invalid API key".into())
            }
            _ => GatewayError::Remote(e),
        })
}

/// The calling principal, or UNAUTHENTICATED.
pub async fn principal(ctx: &Context<'_>) -> Result<Principal, GatewayError> {
    let Some(auth) = ctx.data_opt::<RequestAuth>() else {
        return Err(GatewayError::Unauthenticated(
            "authentication required".into(),
        ));
    };
    let keys = ctx
        .data_opt::<JwtKeys>()
        .ok_or_else(|| GatewayError::Internal("JWT keys missing from schema data".into()))?;
    let clients = crate::clients::from_context(ctx)?;
    auth.resolve(keys, clients).await
}

/// The calling principal if it passes `access`.
pub async fn authorize(ctx: &Context<'_>, access: Access) -> Result<Principal, GatewayError> {
    let principal = principal(ctx).await?;
    access.check(&principal)?;
    Ok(principal)
}

/// The permission rules of the API, one per kind of field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Ordering and stopping rentals.
    Rent,
    /// Managing one's machines and reading one's earnings.
    Host,
    /// Reading money: balance and usage.
    Billing,
    /// Reading one's instances.
    Instances,
    /// Reading one's reserved blocks and resale listings: a renter's
    /// records, readable with a read-only key as instances are.
    Reservations,
    /// Acting on other tenants.
    Operator,
    /// Managing where the tenant's events are sent (webhook endpoints, their
    /// secrets and the delivery log): a caller who may act on the tenant's
    /// rentals, machines or money. A read-only key may not, since an
    /// endpoint would receive events from then on.
    Webhooks,
}

impl Access {
    pub fn check(self, p: &Principal) -> Result<(), GatewayError> {
        match self {
            Access::Rent => {
                need_scope(p, &[Scope::Rent])?;
                need_role(p, TenantRole::Renter)
            }
            Access::Host => {
                need_scope(p, &[Scope::Host])?;
                need_role(p, TenantRole::Host)
            }
            Access::Billing => need_scope(p, &[Scope::Billing, Scope::Read]),
            Access::Instances => need_scope(p, &[Scope::Read, Scope::Rent]),
            Access::Reservations => {
                need_scope(p, &[Scope::Read, Scope::Rent])?;
                need_role(p, TenantRole::Renter)
            }
            Access::Webhooks => need_scope(p, &[Scope::Rent, Scope::Host, Scope::Billing]),
            Access::Operator => {
                if !p.operator {
                    return Err(GatewayError::Forbidden("operators only".into()));
                }
                need_scope(p, &[Scope::Admin])
            }
        }
    }
}

fn need_scope(p: &Principal, any_of: &[Scope]) -> Result<(), GatewayError> {
    if any_of.iter().any(|s| p.scopes.contains(s)) {
        return Ok(());
    }
    let names: Vec<&str> = any_of.iter().map(|s| s.as_str()).collect();
    Err(GatewayError::Forbidden(format!(
        "needs scope {}",
        names.join(" or ")
    )))
}

fn need_role(p: &Principal, role: TenantRole) -> Result<(), GatewayError> {
    if p.tenant_roles.contains(&role) {
        return Ok(());
    }
    let name = match role {
        TenantRole::Renter => "renter",
        TenantRole::Host => "host",
        TenantRole::Platform => "platform",
    };
    Err(GatewayError::Forbidden(format!("tenant is not a {name}")))
}

/// A new API key may not do more than the principal creating it.
pub fn check_key_scopes(p: &Principal, requested: &[Scope]) -> Result<(), GatewayError> {
    match requested.iter().find(|s| !p.scopes.contains(s)) {
        None => Ok(()),
        Some(extra) => Err(GatewayError::Forbidden(format!(
            "cannot grant scope {} you do not hold",
            extra.as_str()
        ))),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn principal(roles: &[TenantRole], scopes: &[Scope], operator: bool) -> Principal {
        Principal {
            user_id: Uuid::now_v7(),
            tenant_id: TenantId(Uuid::now_v7()),
            email: "ada@example.com".into(),
            tenant_roles: roles.to_vec(),
            operator,
            scopes: scopes.to_vec(),
            api_key_id: None,
        }
    }

    fn keys(pairs: &[(&str, &str)]) -> JwtKeys {
        let pairs: Vec<(String, SecretString)> = pairs
            .iter()
            .map(|(k, s)| (k.to_string(), (*s).into()))
            .collect();
        JwtKeys::new(&pairs, 3600).unwrap()
    }

    fn code(result: Result<impl std::fmt::Debug, GatewayError>) -> ErrorCode {
        result.unwrap_err().code()
    }

    #[test]
    fn a_token_round_trips_to_the_same_principal() {
        let keys = keys(&[("k1", "secret-one")]);
        let p = principal(&[TenantRole::Renter, TenantRole::Host], &Scope::ALL, true);
        let issued = keys.issue(&p).unwrap();
        assert_eq!(keys.verify(&issued.token).unwrap(), p);
        let header = jsonwebtoken::decode_header(&issued.token).unwrap();
        assert_eq!(header.kid.as_deref(), Some("k1"));
        assert!(issued.expires_at > Utc::now());
    }

    #[test]
    fn a_token_signed_with_an_older_key_still_verifies() {
        let old = keys(&[("k1", "secret-one")]);
        let p = principal(&[TenantRole::Renter], &[Scope::Read], false);
        let token = old.issue(&p).unwrap().token;
        let rotated = keys(&[("k2", "secret-two"), ("k1", "secret-one")]);
        assert_eq!(rotated.verify(&token).unwrap(), p);
        let fresh = rotated.issue(&p).unwrap().token;
        assert_eq!(
            jsonwebtoken::decode_header(&fresh).unwrap().kid.as_deref(),
            Some("k2")
        );
    }

    #[test]
    fn an_unknown_key_id_is_rejected() {
        let old = keys(&[("k1", "secret-one")]);
        let token = old.issue(&principal(&[], &[], false)).unwrap().token;
        let retired = keys(&[("k2", "secret-two")]);
        assert_eq!(code(retired.verify(&token)), ErrorCode::Unauthenticated);
    }

    #[test]
    fn a_known_kid_with_the_wrong_secret_is_rejected() {
        let forged = keys(&[("k1", "attacker")]);
        let token = forged
            .issue(&principal(&[], &Scope::ALL, true))
            .unwrap()
            .token;
        let real = keys(&[("k1", "secret-one")]);
        assert_eq!(code(real.verify(&token)), ErrorCode::Unauthenticated);
    }

    #[test]
    fn an_expired_token_is_rejected() {
        let keys = keys(&[("k1", "secret-one")]);
        let long_ago = Utc::now() - chrono::Duration::hours(2);
        let token = keys
            .issue_at(&principal(&[], &[], false), long_ago)
            .unwrap()
            .token;
        let err = keys.verify(&token).unwrap_err();
        assert_eq!(err.code(), ErrorCode::Unauthenticated);
        assert!(err.to_string().contains("expired"));
    }

    #[test]
    fn a_token_living_past_the_ttl_or_without_iat_is_rejected() {
        let keys = keys(&[("k1", "secret-one")]);
        let p = principal(&[], &Scope::ALL, true);
        let sign = |claims: serde_json::Value| {
            let mut header = Header::new(Algorithm::HS256);
            header.kid = Some("k1".into());
            jsonwebtoken::encode(
                &header,
                &claims,
                &EncodingKey::from_secret(b"secret-one").unwrap(),
            )
            .unwrap()
        };
        let now = Utc::now().timestamp();
        let claims = |iat: Option<i64>, exp: i64| {
            let mut c = serde_json::json!({
                "sub": p.user_id, "tid": p.tenant_id, "email": p.email, "roles": [],
                "op": true, "scopes": Scope::ALL, "exp": exp,
            });
            if let Some(iat) = iat {
                c["iat"] = iat.into();
            }
            c
        };
        // exp 2^62: signed with the right key, yet not a token we issued.
        let forever = sign(claims(Some(now), 1i64 << 62));
        let err = keys.verify(&forever).unwrap_err();
        assert_eq!(err.code(), ErrorCode::Unauthenticated);
        assert!(err.to_string().contains("TTL"), "{err}");
        assert_eq!(
            code(keys.verify(&sign(claims(None, now + 60)))),
            ErrorCode::Unauthenticated
        );
        assert_eq!(
            code(keys.verify(&sign(claims(Some(now), now + 3601)))),
            ErrorCode::Unauthenticated
        );
        assert!(keys.verify(&sign(claims(Some(now), now + 3600))).is_ok());
    }

    #[test]
    fn garbage_is_rejected_without_panicking() {
        let keys = keys(&[("k1", "secret-one")]);
        for token in ["", "x", "a.b.c", "eyJhbGciOiJub25lIn0.e30.", "...."] {
            assert_eq!(code(keys.verify(token)), ErrorCode::Unauthenticated);
        }
    }

    #[test]
    fn key_configuration_is_checked() {
        assert!(JwtKeys::new(&[], 3600).is_err());
        assert!(JwtKeys::new(&[("k".into(), SecretString::default())], 3600).is_err());
        assert!(JwtKeys::new(&[("k".into(), "s".into())], 0).is_err());
    }

    #[test]
    fn bearer_tokens_are_sorted_into_jwts_and_api_keys() {
        assert!(matches!(Credential::from_header(None), Credential::None));
        assert!(matches!(
            Credential::from_header(Some("Bearer gpm_abc")),
            Credential::ApiKey(s) if s == "gpm_abc"
        ));
        assert!(matches!(
            Credential::from_header(Some("bearer eyJ.x.y")),
            Credential::Jwt(s) if s == "eyJ.x.y"
        ));
        assert!(matches!(
            Credential::from_header(Some("Basic dXNlcjpwYXNz")),
            Credential::Malformed
        ));
        assert!(matches!(
            Credential::from_header(Some("Bearer ")),
            Credential::Malformed
        ));
    }

    #[test]
    fn renting_needs_the_rent_scope_and_the_renter_role() {
        let renter = principal(&[TenantRole::Renter], &[Scope::Rent], false);
        assert!(Access::Rent.check(&renter).is_ok());
        let read_only = principal(&[TenantRole::Renter], &[Scope::Read], false);
        assert_eq!(code(Access::Rent.check(&read_only)), ErrorCode::Forbidden);
        let host = principal(&[TenantRole::Host], &[Scope::Rent], false);
        assert_eq!(code(Access::Rent.check(&host)), ErrorCode::Forbidden);
    }

    #[test]
    fn hosting_needs_the_host_scope_and_the_host_role() {
        let host = principal(&[TenantRole::Host], &[Scope::Host], false);
        assert!(Access::Host.check(&host).is_ok());
        let renter = principal(&[TenantRole::Renter], &Scope::ALL, false);
        assert_eq!(code(Access::Host.check(&renter)), ErrorCode::Forbidden);
        let no_scope = principal(&[TenantRole::Host], &[Scope::Read], false);
        assert_eq!(code(Access::Host.check(&no_scope)), ErrorCode::Forbidden);
    }

    #[test]
    fn reading_accepts_either_listed_scope() {
        for scope in [Scope::Billing, Scope::Read] {
            assert!(
                Access::Billing
                    .check(&principal(&[], &[scope], false))
                    .is_ok()
            );
        }
        for scope in [Scope::Read, Scope::Rent] {
            assert!(
                Access::Instances
                    .check(&principal(&[], &[scope], false))
                    .is_ok()
            );
        }
        assert_eq!(
            code(Access::Billing.check(&principal(&[], &[Scope::Rent], false))),
            ErrorCode::Forbidden
        );
        assert_eq!(
            code(Access::Instances.check(&principal(&[], &[Scope::Billing], false))),
            ErrorCode::Forbidden
        );
    }

    #[test]
    fn reading_reservations_needs_a_reading_scope_and_the_renter_role() {
        for scope in [Scope::Read, Scope::Rent] {
            assert!(
                Access::Reservations
                    .check(&principal(&[TenantRole::Renter], &[scope], false))
                    .is_ok()
            );
        }
        assert_eq!(
            code(Access::Reservations.check(&principal(
                &[TenantRole::Renter],
                &[Scope::Billing],
                false
            ))),
            ErrorCode::Forbidden
        );
        assert_eq!(
            code(Access::Reservations.check(&principal(&[TenantRole::Host], &Scope::ALL, false))),
            ErrorCode::Forbidden
        );
    }

    #[test]
    fn operator_access_needs_the_flag_and_the_admin_scope() {
        assert!(
            Access::Operator
                .check(&principal(&[TenantRole::Platform], &[Scope::Admin], true))
                .is_ok()
        );
        assert_eq!(
            code(Access::Operator.check(&principal(&[], &Scope::ALL, false))),
            ErrorCode::Forbidden
        );
        assert_eq!(
            code(Access::Operator.check(&principal(&[], &[Scope::Read], true))),
            ErrorCode::Forbidden
        );
    }

    #[test]
    fn a_key_cannot_get_scopes_its_creator_lacks() {
        let p = principal(&[TenantRole::Renter], &[Scope::Read, Scope::Rent], false);
        assert!(check_key_scopes(&p, &[Scope::Read]).is_ok());
        assert!(check_key_scopes(&p, &[Scope::Read, Scope::Rent]).is_ok());
        assert_eq!(
            code(check_key_scopes(&p, &[Scope::Read, Scope::Admin])),
            ErrorCode::Forbidden
        );
    }
}
