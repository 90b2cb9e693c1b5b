//! API keys: 256-bit random secrets with a visible prefix, stored as SHA-256
//! (they are high-entropy, so a fast hash is right; argon2 would cost every
//! request), shown once, scoped, revocable.

use chrono::{DateTime, Utc};
use contracts::api::{ApiKeyCreated, CreateApiKeyRequest, Principal, Scope};
use diesel::prelude::*;
use platform::Db;
use rand::RngCore;
use schema::quota::{api_keys, tenants, users};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::Error;
use crate::tenants::{Tenant, User, parse_roles};

pub const KEY_PREFIX: &str = "gpm_";

#[derive(Queryable, Selectable)]
#[diesel(table_name = api_keys)]
struct ApiKey {
    id: Uuid,
    name: String,
    prefix: String,
    scopes: Vec<String>,
    created_at: DateTime<Utc>,
}

#[derive(Insertable)]
#[diesel(table_name = api_keys)]
struct NewApiKey<'a> {
    id: Uuid,
    tenant_id: Uuid,
    user_id: Uuid,
    name: &'a str,
    prefix: &'a str,
    secret_sha256: &'a str,
    scopes: Vec<String>,
    idempotency_key: &'a str,
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

fn scopes_to_strings(scopes: &[Scope]) -> Vec<String> {
    scopes.iter().map(|s| s.as_str().to_owned()).collect()
}

fn scopes_from_strings(scopes: &[String]) -> Vec<Scope> {
    scopes.iter().filter_map(|s| Scope::parse(s)).collect()
}

fn created(key: ApiKey, secret: Option<String>) -> ApiKeyCreated {
    ApiKeyCreated {
        id: key.id,
        name: key.name,
        prefix: key.prefix,
        scopes: scopes_from_strings(&key.scopes),
        secret,
        created_at: key.created_at,
    }
}

/// Creates a key; the same idempotency key returns the first key without its secret.
pub async fn create_api_key(db: &Db, req: CreateApiKeyRequest) -> Result<ApiKeyCreated, Error> {
    let name = req.name.trim().to_owned();
    if name.is_empty() || name.chars().count() > 100 {
        return Err(Error::Validation("name: 1 to 100 characters".into()));
    }
    if req.scopes.is_empty() {
        return Err(Error::Validation("scopes: at least one".into()));
    }
    if req.idempotency_key.is_empty() || req.idempotency_key.len() > 200 {
        return Err(Error::Validation(
            "idempotencyKey: 1 to 200 characters".into(),
        ));
    }
    db.tx(move |conn| {
        let existing: Option<ApiKey> = api_keys::table
            .filter(api_keys::tenant_id.eq(req.tenant_id))
            .filter(api_keys::idempotency_key.eq(&req.idempotency_key))
            .select(ApiKey::as_select())
            .first(conn)
            .optional()?;
        if let Some(key) = existing {
            return Ok(created(key, None));
        }
        let owner: i64 = users::table
            .filter(users::id.eq(req.user_id))
            .filter(users::tenant_id.eq(req.tenant_id))
            .count()
            .get_result(conn)?;
        if owner == 0 {
            return Err(Error::NotFound("user not found in this tenant".into()));
        }
        let (prefix, secret) = generate();
        let id = Uuid::now_v7();
        diesel::insert_into(api_keys::table)
            .values(NewApiKey {
                id,
                tenant_id: req.tenant_id,
                user_id: req.user_id,
                name: &name,
                prefix: &prefix,
                secret_sha256: &hash_secret(&secret),
                scopes: scopes_to_strings(&req.scopes),
                idempotency_key: &req.idempotency_key,
            })
            .execute(conn)?;
        let key = api_keys::table
            .find(id)
            .select(ApiKey::as_select())
            .first(conn)?;
        Ok(created(key, Some(secret)))
    })
    .await
}

/// The principal behind a key, with the key's scopes.
pub async fn authenticate(db: &Db, secret: String) -> Result<Principal, Error> {
    if !secret.starts_with(KEY_PREFIX) {
        return Err(Error::BadApiKey);
    }
    let hash = hash_secret(&secret);
    let found: Option<(Vec<String>, User, Tenant)> = db
        .run(move |conn| {
            api_keys::table
                .inner_join(users::table)
                .inner_join(tenants::table)
                .filter(api_keys::secret_sha256.eq(hash))
                .filter(api_keys::revoked_at.is_null())
                .select((api_keys::scopes, User::as_select(), Tenant::as_select()))
                .first(conn)
                .optional()
                .map_err(Error::from)
        })
        .await?;
    let (scopes, user, tenant) = found.ok_or(Error::BadApiKey)?;
    let mut scopes = scopes_from_strings(&scopes);
    if !user.is_operator {
        scopes.retain(|s| *s != Scope::Admin);
    }
    Ok(Principal {
        user_id: user.id,
        tenant_id: tenant.id,
        email: user.email,
        tenant_roles: parse_roles(&tenant.roles),
        operator: user.is_operator,
        scopes,
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
}
