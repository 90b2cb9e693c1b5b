//! API keys: 256-bit random secrets with a visible prefix, stored as SHA-256
//! (they are high-entropy, so a fast hash is right; argon2 would cost every
//! request), shown once, scoped, listed with their last use, revocable and
//! rotatable.

use contracts::ids::{ApiKeyId, TenantId};
use std::collections::BTreeSet;

use chrono::{DateTime, Duration, Utc};
use contracts::api::{
    ApiKeyCaller, ApiKeyCreated, ApiKeyInfo, CreateApiKeyRequest, ListApiKeysRequest, Principal,
    RotateApiKeyRequest, Scope,
};
use diesel::prelude::*;
use platform::Db;
use rand::RngCore;
use schema::quota::{api_keys, tenants, users};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::Error;
use crate::tenants::{Tenant, User, parse_roles};

pub const KEY_PREFIX: &str = "gpm_";

/// Active (unrevoked) keys one tenant may hold: a bound on what a caller can
/// make the listing and the table hold.
pub const MAX_ACTIVE_KEYS_PER_TENANT: i64 = 100;

/// A listing with revoked keys shows at most this many, newest first.
const MAX_LISTED: i64 = 500;

/// `last_used_at` is written only when older than this, so authentication
/// does not write on every request (docs/security.md, "API keys").
const LAST_USED_GRANULARITY_SECONDS: i64 = 60;

#[derive(Queryable, Selectable)]
#[diesel(table_name = api_keys)]
struct ApiKey {
    id: Uuid,
    user_id: Uuid,
    name: String,
    prefix: String,
    scopes: Vec<String>,
    created_at: DateTime<Utc>,
    last_used_at: Option<DateTime<Utc>>,
    revoked_at: Option<DateTime<Utc>>,
    rotated_from: Option<Uuid>,
    created_by_key: Option<Uuid>,
}

/// Where a new key comes from: the key it replaces (a rotation) and the key
/// whose request made it (revoking that one revokes this one too).
#[derive(Clone, Copy, Default)]
struct Origin {
    rotated_from: Option<Uuid>,
    created_by_key: Option<Uuid>,
}

#[derive(Insertable)]
#[diesel(table_name = api_keys)]
struct NewApiKey<'a> {
    id: Uuid,
    tenant_id: TenantId,
    user_id: Uuid,
    name: &'a str,
    prefix: &'a str,
    secret_sha256: &'a str,
    scopes: Vec<String>,
    idempotency_key: &'a str,
    rotated_from: Option<Uuid>,
    created_by_key: Option<Uuid>,
}

pub fn hash_secret(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// `gpm_<8 hex prefix>_<64 hex secret>`: the prefix identifies the key in
/// listings and logs without revealing it.
fn generate() -> (String, String) {
    let mut prefix = [0u8; 4];
    let mut secret = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut prefix);
    rand::rngs::OsRng.fill_bytes(&mut secret);
    let prefix = hex::encode(prefix);
    let full = format!("{KEY_PREFIX}{prefix}_{}", hex::encode(secret));
    (prefix, full)
}

/// Each scope once, in the canonical order (`Scope::ALL`).
fn scopes_to_strings(scopes: &[Scope]) -> Vec<String> {
    Scope::ALL
        .into_iter()
        .filter(|s| scopes.contains(s))
        .map(|s| s.as_str().to_owned())
        .collect()
}

fn scopes_from_strings(scopes: &[String]) -> Vec<Scope> {
    scopes.iter().filter_map(|s| Scope::parse(s)).collect()
}

/// Scopes as a set: `[read, rent]` and `[rent, read, rent]` ask for the same key.
fn scope_set(scopes: &[Scope]) -> BTreeSet<&'static str> {
    scopes.iter().map(|s| s.as_str()).collect()
}

fn created(key: ApiKey, secret: Option<String>) -> ApiKeyCreated {
    ApiKeyCreated {
        id: ApiKeyId(key.id),
        name: key.name,
        prefix: key.prefix,
        scopes: scopes_from_strings(&key.scopes),
        secret,
        created_at: key.created_at,
    }
}

fn info(key: ApiKey, owner_email: String) -> ApiKeyInfo {
    ApiKeyInfo {
        id: ApiKeyId(key.id),
        user_id: key.user_id,
        owner_email,
        name: key.name,
        prefix: key.prefix,
        scopes: scopes_from_strings(&key.scopes),
        created_at: key.created_at,
        last_used_at: key.last_used_at,
        revoked_at: key.revoked_at,
        rotated_from: key.rotated_from,
    }
}

fn check_idempotency_key(key: &str) -> Result<(), Error> {
    if key.trim().is_empty() || key.len() > 200 {
        return Err(Error::Validation(
            "idempotencyKey: 1 to 200 characters".into(),
        ));
    }
    Ok(())
}

fn by_idempotency_key(
    conn: &mut PgConnection,
    tenant_id: TenantId,
    key: &str,
) -> QueryResult<Option<ApiKey>> {
    api_keys::table
        .filter(api_keys::tenant_id.eq(tenant_id))
        .filter(api_keys::idempotency_key.eq(key))
        .select(ApiKey::as_select())
        .first(conn)
        .optional()
}

fn reused() -> Error {
    Error::Conflict("idempotencyKey: already used for another API key".into())
}

/// The caller's role in its tenant; a user of another tenant is not found.
fn caller_role(conn: &mut PgConnection, caller: &ApiKeyCaller) -> Result<String, Error> {
    users::table
        .find(caller.user_id)
        .filter(users::tenant_id.eq(caller.tenant_id))
        .select(users::role)
        .first(conn)
        .optional()?
        .ok_or_else(|| Error::NotFound("user not found in this tenant".into()))
}

/// Owners and admins see and revoke every key of their tenant (so that a
/// departed member's leaked key can be stopped); other users their own.
fn sees_tenant_keys(role: &str) -> bool {
    matches!(role, "owner" | "admin")
}

/// A key the caller may see, locked for the change that follows; any other
/// key, another tenant's included, is not found.
fn visible_key(conn: &mut PgConnection, caller: &ApiKeyCaller, id: Uuid) -> Result<ApiKey, Error> {
    let role = caller_role(conn, caller)?;
    api_keys::table
        .find(id)
        .filter(api_keys::tenant_id.eq(caller.tenant_id))
        .select(ApiKey::as_select())
        .for_update()
        .first(conn)
        .optional()?
        .filter(|key| sees_tenant_keys(&role) || key.user_id == caller.user_id)
        .ok_or_else(|| Error::NotFound(format!("API key {id} not found")))
}

/// A key-authenticated caller may not revoke or rotate a key that can do
/// more than itself: a leaked read-only key must not stop the owner's others.
fn check_within_caller(caller: &ApiKeyCaller, key: &ApiKey) -> Result<(), Error> {
    let held = scope_set(&caller.scopes);
    match scopes_from_strings(&key.scopes)
        .into_iter()
        .find(|s| !held.contains(s.as_str()))
    {
        None => Ok(()),
        Some(extra) => Err(Error::Forbidden(format!(
            "the key has scope {}, which you do not hold",
            extra.as_str()
        ))),
    }
}

fn active_keys(conn: &mut PgConnection, tenant_id: TenantId) -> QueryResult<i64> {
    api_keys::table
        .filter(api_keys::tenant_id.eq(tenant_id))
        .filter(api_keys::revoked_at.is_null())
        .count()
        .get_result(conn)
}

/// Inserts a new key; `None` when a concurrent request took the same
/// idempotency key first (the caller then compares with that one).
fn insert(
    conn: &mut PgConnection,
    tenant_id: TenantId,
    user_id: Uuid,
    name: &str,
    scopes: Vec<String>,
    idempotency_key: &str,
    origin: Origin,
) -> Result<Option<ApiKeyCreated>, Error> {
    let (prefix, secret) = generate();
    let id = Uuid::now_v7();
    let inserted = diesel::insert_into(api_keys::table)
        .values(NewApiKey {
            id,
            tenant_id,
            user_id,
            name,
            prefix: &prefix,
            secret_sha256: &hash_secret(&secret),
            scopes,
            idempotency_key,
            rotated_from: origin.rotated_from,
            created_by_key: origin.created_by_key,
        })
        .on_conflict((api_keys::tenant_id, api_keys::idempotency_key))
        .do_nothing()
        .execute(conn)?;
    if inserted == 0 {
        return Ok(None);
    }
    let key = api_keys::table
        .find(id)
        .select(ApiKey::as_select())
        .first(conn)?;
    Ok(Some(created(key, Some(secret))))
}

/// Creates a key. The same idempotency key with the same request returns the
/// first key without its secret; with another request it is a CONFLICT.
pub async fn create_api_key(db: &Db, req: CreateApiKeyRequest) -> Result<ApiKeyCreated, Error> {
    let name = req.name.trim().to_owned();
    if name.is_empty() || name.chars().count() > 100 {
        return Err(Error::Validation("name: 1 to 100 characters".into()));
    }
    if req.scopes.is_empty() {
        return Err(Error::Validation("scopes: at least one".into()));
    }
    check_idempotency_key(&req.idempotency_key)?;
    let same_request = {
        let (user_id, name, scopes) = (req.user_id, name.clone(), scope_set(&req.scopes));
        move |key: &ApiKey| {
            key.user_id == user_id
                && key.name == name
                && key.rotated_from.is_none()
                && scope_set(&scopes_from_strings(&key.scopes)) == scopes
        }
    };
    db.tx(move |conn| {
        if let Some(key) = by_idempotency_key(conn, req.tenant_id, &req.idempotency_key)? {
            return if same_request(&key) {
                Ok(created(key, None))
            } else {
                Err(reused())
            };
        }
        let owner: i64 = users::table
            .filter(users::id.eq(req.user_id))
            .filter(users::tenant_id.eq(req.tenant_id))
            .count()
            .get_result(conn)?;
        if owner == 0 {
            return Err(Error::NotFound("user not found in this tenant".into()));
        }
        // The tenant's row, so that keys created at once are counted one
        // after the other and the limit holds.
        tenants::table
            .find(req.tenant_id)
            .select(tenants::id)
            .for_update()
            .first::<Uuid>(conn)
            .optional()?;
        if active_keys(conn, req.tenant_id)? >= MAX_ACTIVE_KEYS_PER_TENANT {
            return Err(Error::Conflict(format!(
                "the tenant has {MAX_ACTIVE_KEYS_PER_TENANT} active API keys; revoke one first"
            )));
        }
        let scopes = scopes_to_strings(&req.scopes);
        match insert(
            conn,
            req.tenant_id,
            req.user_id,
            &name,
            scopes,
            &req.idempotency_key,
            Origin {
                rotated_from: None,
                created_by_key: req.created_by_key,
            },
        )? {
            Some(new) => Ok(new),
            None => match by_idempotency_key(conn, req.tenant_id, &req.idempotency_key)? {
                Some(key) if same_request(&key) => Ok(created(key, None)),
                _ => Err(reused()),
            },
        }
    })
    .await
}

/// The keys the caller may see, newest first: the tenant's for its owners and
/// admins, the caller's own otherwise; revoked ones only when asked.
pub async fn list(db: &Db, req: ListApiKeysRequest) -> Result<Vec<ApiKeyInfo>, Error> {
    db.run(move |conn| {
        let role = caller_role(conn, &req.caller)?;
        let mut query = api_keys::table
            .inner_join(users::table)
            .filter(api_keys::tenant_id.eq(req.caller.tenant_id))
            .into_boxed();
        if !sees_tenant_keys(&role) {
            query = query.filter(api_keys::user_id.eq(req.caller.user_id));
        }
        if !req.include_revoked {
            query = query.filter(api_keys::revoked_at.is_null());
        }
        let rows: Vec<(ApiKey, String)> = query
            .order_by((api_keys::created_at.desc(), api_keys::id.desc()))
            .limit(MAX_LISTED)
            .select((ApiKey::as_select(), users::email))
            .load(conn)?;
        Ok(rows
            .into_iter()
            .map(|(key, email)| info(key, email))
            .collect())
    })
    .await
}

fn owner_email(conn: &mut PgConnection, user_id: Uuid) -> QueryResult<String> {
    users::table.find(user_id).select(users::email).first(conn)
}

/// Revokes a key the caller may see; the key fails authentication from the
/// next request on (the gateway asks quota on every request, no cache).
/// Revoking a revoked key returns it unchanged.
pub async fn revoke(db: &Db, id: Uuid, caller: ApiKeyCaller) -> Result<ApiKeyInfo, Error> {
    db.tx(move |conn| {
        let key = visible_key(conn, &caller, id)?;
        check_within_caller(&caller, &key)?;
        if key.revoked_at.is_none() {
            diesel::update(api_keys::table.find(id))
                .set(api_keys::revoked_at.eq(diesel::dsl::now))
                .execute(conn)?;
            tracing::info!(
                tenant.id = %caller.tenant_id, api_key.id = %id, by.user_id = %caller.user_id,
                "API key revoked"
            );
        }
        let descendants = revoke_descendants(conn, caller.tenant_id, id)?;
        if descendants > 0 {
            tracing::info!(
                tenant.id = %caller.tenant_id, api_key.id = %id, descendants,
                "keys created with the revoked key revoked with it"
            );
        }
        let key = api_keys::table
            .find(id)
            .select(ApiKey::as_select())
            .first(conn)?;
        let email = owner_email(conn, key.user_id)?;
        Ok(info(key, email))
    })
    .await
}

/// Revokes every key made with `id` or with a key `id` replaced (its
/// rotations' ancestors), and every key made with those, and so on; their
/// rotations answer to the same key, so they go too. A leaked key cannot
/// leave behind keys that outlive its revocation. Returns how many it
/// revoked.
fn revoke_descendants(
    conn: &mut PgConnection,
    tenant_id: TenantId,
    id: Uuid,
) -> QueryResult<usize> {
    diesel::sql_query(
        "WITH RECURSIVE lineage AS ( \
             SELECT id, rotated_from FROM quota.api_keys WHERE id = $1 AND tenant_id = $2 \
             UNION \
             SELECT k.id, k.rotated_from FROM quota.api_keys k \
             JOIN lineage l ON k.id = l.rotated_from WHERE k.tenant_id = $2), \
         made AS ( \
             SELECT k.id FROM quota.api_keys k \
             WHERE k.created_by_key IN (SELECT id FROM lineage) AND k.tenant_id = $2 \
             UNION \
             SELECT k.id FROM quota.api_keys k JOIN made m ON k.created_by_key = m.id \
             WHERE k.tenant_id = $2) \
         UPDATE quota.api_keys SET revoked_at = now() \
         WHERE id IN (SELECT id FROM made) AND revoked_at IS NULL",
    )
    .bind::<diesel::sql_types::Uuid, _>(id)
    .bind::<diesel::sql_types::Uuid, _>(tenant_id)
    .execute(conn)
}

/// Replaces one of the caller's own keys by a new one with the same name and
/// scopes, and revokes it, in one transaction; the new secret is shown once.
/// Only the key's own user rotates it: a new secret acts as that user.
pub async fn rotate(db: &Db, id: Uuid, req: RotateApiKeyRequest) -> Result<ApiKeyCreated, Error> {
    check_idempotency_key(&req.idempotency_key)?;
    db.tx(move |conn| {
        let caller = &req.caller;
        let same_request =
            |key: &ApiKey| key.rotated_from == Some(id) && key.user_id == caller.user_id;
        if let Some(key) = by_idempotency_key(conn, caller.tenant_id, &req.idempotency_key)? {
            return if same_request(&key) {
                Ok(created(key, None))
            } else {
                Err(reused())
            };
        }
        let old = visible_key(conn, caller, id)?;
        if old.user_id != caller.user_id {
            return Err(Error::Forbidden(
                "only the key's own user can rotate it; revoke it instead".into(),
            ));
        }
        check_within_caller(caller, &old)?;
        if old.revoked_at.is_some() {
            return Err(Error::Conflict(format!(
                "API key {id} is revoked; create a new one"
            )));
        }
        diesel::update(api_keys::table.find(id))
            .set(api_keys::revoked_at.eq(diesel::dsl::now))
            .execute(conn)?;
        let new = insert(
            conn,
            caller.tenant_id,
            caller.user_id,
            &old.name,
            old.scopes.clone(),
            &req.idempotency_key,
            // The replacement answers to whatever key made the old one.
            Origin {
                rotated_from: Some(id),
                created_by_key: old.created_by_key,
            },
        )?;
        match new {
            Some(created) => {
                tracing::info!(
                    tenant.id = %caller.tenant_id, api_key.id = %created.id, rotated_from = %id,
                    "API key rotated"
                );
                Ok(created)
            }
            // A concurrent rotation with the same key won; this transaction
            // revoked nothing it keeps.
            None => Err(Error::Conflict(
                "idempotencyKey: a concurrent request is using it; retry".into(),
            )),
        }
    })
    .await
}

/// The principal behind a key, with the key's scopes. Records the key's use
/// at most once a minute, so that authenticating is a read almost always.
pub async fn authenticate(db: &Db, secret: String) -> Result<Principal, Error> {
    if !secret.starts_with(KEY_PREFIX) {
        return Err(Error::BadApiKey);
    }
    let hash = hash_secret(&secret);
    type Found = (Uuid, Vec<String>, Option<DateTime<Utc>>, User, Tenant);
    let found: Option<Found> = db
        .run(move |conn| {
            api_keys::table
                .inner_join(users::table)
                .inner_join(tenants::table)
                .filter(api_keys::secret_sha256.eq(hash))
                .filter(api_keys::revoked_at.is_null())
                .select((
                    api_keys::id,
                    api_keys::scopes,
                    api_keys::last_used_at,
                    User::as_select(),
                    Tenant::as_select(),
                ))
                .first(conn)
                .optional()
                .map_err(Error::from)
        })
        .await?;
    let (key_id, scopes, last_used, user, tenant) = found.ok_or(Error::BadApiKey)?;
    let now = contracts::time::now();
    let stale_before = now - Duration::seconds(LAST_USED_GRANULARITY_SECONDS);
    if last_used.is_none_or(|at| at < stale_before) {
        // Bookkeeping: a failed write must not refuse a valid key.
        let recorded = db
            .run(move |conn| {
                diesel::update(api_keys::table.find(key_id))
                    .filter(
                        api_keys::last_used_at
                            .is_null()
                            .or(api_keys::last_used_at.lt(stale_before)),
                    )
                    .set(api_keys::last_used_at.eq(now))
                    .execute(conn)
                    .map_err(Error::from)
            })
            .await;
        if let Err(e) = recorded {
            tracing::warn!(api_key.id = %key_id, error = %e, "recording an API key's use failed");
        }
    }
    let mut scopes = scopes_from_strings(&scopes);
    if !user.is_operator {
        scopes.retain(|s| *s != Scope::Admin);
    }
    Ok(Principal {
        user_id: user.id,
        tenant_id: TenantId(tenant.id),
        email: user.email,
        tenant_roles: parse_roles(&tenant.roles),
        operator: user.is_operator,
        scopes,
        api_key_id: Some(ApiKeyId(key_id)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_carry_a_visible_prefix_and_256_bits() {
        let (prefix, key) = generate();
        assert!(key.starts_with(&format!("gpm_{prefix}_")));
        assert_eq!(key.len(), 4 + 8 + 1 + 64);
        assert_ne!(generate().1, key);
        assert_eq!(hash_secret(&key).len(), 64);
    }

    #[test]
    fn scopes_are_stored_once_in_canonical_order_and_compared_as_sets() {
        let asked = [Scope::Billing, Scope::Read, Scope::Billing];
        assert_eq!(scopes_to_strings(&asked), ["read", "billing"]);
        assert_eq!(scope_set(&asked), scope_set(&[Scope::Read, Scope::Billing]));
        assert_ne!(scope_set(&asked), scope_set(&[Scope::Read]));
    }
}
