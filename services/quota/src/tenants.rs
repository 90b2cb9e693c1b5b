//! Tenants and their users: sign-up, login, operators.

use contracts::FieldErrors;
use contracts::api::{Principal, Scope, SignUpRequest, TenantRole};
use contracts::ids::TenantId;
use diesel::prelude::*;
use platform::Db;
use schema::quota::{tenant_quotas, tenants, users};
use uuid::Uuid;

use crate::Error;

#[derive(Queryable, Selectable)]
#[diesel(table_name = tenants)]
pub struct Tenant {
    pub id: Uuid,
    pub roles: Vec<String>,
}

#[derive(Insertable)]
#[diesel(table_name = tenants)]
struct NewTenant<'a> {
    id: Uuid,
    name: &'a str,
    roles: Vec<String>,
    is_platform: bool,
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = users)]
pub struct User {
    pub id: Uuid,
    pub email: String,
    pub password_hash: String,
    pub is_operator: bool,
}

#[derive(Insertable)]
#[diesel(table_name = users)]
struct NewUser<'a> {
    id: Uuid,
    tenant_id: TenantId,
    email: &'a str,
    password_hash: &'a str,
    role: &'a str,
    is_operator: bool,
}

pub fn role_name(role: TenantRole) -> &'static str {
    match role {
        TenantRole::Renter => "renter",
        TenantRole::Host => "host",
        TenantRole::Platform => "platform",
    }
}

pub fn parse_roles(roles: &[String]) -> Vec<TenantRole> {
    roles
        .iter()
        .filter_map(|r| match r.as_str() {
            "renter" => Some(TenantRole::Renter),
            "host" => Some(TenantRole::Host),
            "platform" => Some(TenantRole::Platform),
            _ => None,
        })
        .collect()
}

/// The scopes a password login grants: what the tenant's roles allow.
pub fn scopes_for(roles: &[TenantRole], operator: bool) -> Vec<Scope> {
    let mut scopes = vec![Scope::Read, Scope::Billing];
    if roles.contains(&TenantRole::Renter) {
        scopes.push(Scope::Rent);
    }
    if roles.contains(&TenantRole::Host) {
        scopes.push(Scope::Host);
    }
    if operator {
        scopes.push(Scope::Admin);
    }
    scopes
}

pub fn principal(user: &User, tenant: &Tenant) -> Principal {
    let roles = parse_roles(&tenant.roles);
    Principal {
        user_id: user.id,
        tenant_id: TenantId(tenant.id),
        email: user.email.clone(),
        scopes: scopes_for(&roles, user.is_operator),
        api_key_id: None,
        tenant_roles: roles,
        operator: user.is_operator,
    }
}

/// Emails are stored lower-cased so that lookups need no function index.
fn normalize_email(email: &str) -> String {
    email.trim().to_lowercase()
}

/// Checks every field and reports all that are wrong, so that a sign-up
/// form marks each at once.
fn validate(req: &SignUpRequest) -> Result<(), Error> {
    let mut errors = FieldErrors::new();
    let email = req.email.trim();
    errors.check(
        email.len() <= 254
            && email.contains('@')
            && !email.starts_with('@')
            && !email.ends_with('@'),
        "email",
        "not an email address",
    );
    if req.password.chars().count() < 8 {
        errors.add("password", "at least 8 characters");
    } else if req.password.len() > 1024 {
        errors.add("password", "at most 1024 bytes");
    }
    let name = req.tenant_name.trim();
    errors.check(
        !name.is_empty() && name.chars().count() <= 200,
        "tenantName",
        "1 to 200 characters",
    );
    if req.roles.is_empty() {
        errors.add("roles", "at least one of RENTER, HOST");
    } else if req.roles.contains(&TenantRole::Platform) {
        errors.add("roles", "PLATFORM cannot be signed up for");
    }
    Ok(errors.into_result()?)
}

/// A tenant and its first user, made together.
struct NewOwner<'a> {
    tenant_name: &'a str,
    roles: &'a [TenantRole],
    is_platform: bool,
    email: &'a str,
    password_hash: &'a str,
    is_operator: bool,
    max_gpus: i32,
}

fn insert_tenant_with_owner(
    conn: &mut PgConnection,
    new: NewOwner<'_>,
) -> Result<Principal, Error> {
    let NewOwner {
        tenant_name: name,
        roles,
        is_platform,
        email,
        password_hash,
        is_operator,
        max_gpus: default_max_gpus,
    } = new;
    let tenant_id = Uuid::now_v7();
    let user_id = Uuid::now_v7();
    let taken: i64 = users::table
        .filter(users::email.eq(email))
        .count()
        .get_result(conn)?;
    if taken > 0 {
        return Err(Error::Conflict("email: already registered".into()));
    }
    diesel::insert_into(tenants::table)
        .values(NewTenant {
            id: tenant_id,
            name,
            roles: roles.iter().map(|r| role_name(*r).to_owned()).collect(),
            is_platform,
        })
        .execute(conn)?;
    diesel::insert_into(users::table)
        .values(NewUser {
            id: user_id,
            tenant_id: TenantId(tenant_id),
            email,
            password_hash,
            role: "owner",
            is_operator,
        })
        .execute(conn)?;
    diesel::insert_into(tenant_quotas::table)
        .values((
            tenant_quotas::tenant_id.eq(tenant_id),
            tenant_quotas::max_gpus.eq(default_max_gpus),
        ))
        .execute(conn)?;
    let tenant: Tenant = tenants::table
        .find(tenant_id)
        .select(Tenant::as_select())
        .first(conn)?;
    let user: User = users::table
        .find(user_id)
        .select(User::as_select())
        .first(conn)?;
    Ok(principal(&user, &tenant))
}

/// Creates a tenant with the given roles and its owner.
pub async fn sign_up(
    db: &Db,
    req: SignUpRequest,
    default_max_gpus: i32,
) -> Result<Principal, Error> {
    validate(&req)?;
    let hash = crate::passwords::hash(req.password.clone()).await?;
    db.tx(move |conn| {
        insert_tenant_with_owner(
            conn,
            NewOwner {
                tenant_name: req.tenant_name.trim(),
                roles: &req.roles,
                is_platform: false,
                email: &normalize_email(&req.email),
                password_hash: &hash,
                is_operator: false,
                max_gpus: default_max_gpus,
            },
        )
    })
    .await
    .map_err(unique_email)
}

/// Creates an operator: a user of the platform tenant (made on first use).
pub async fn create_operator(db: &Db, email: &str, password: &str) -> Result<Principal, Error> {
    validate(&SignUpRequest {
        email: email.to_owned(),
        password: password.to_owned(),
        tenant_name: "gpumarket platform".into(),
        roles: vec![TenantRole::Renter],
    })?;
    let hash = crate::passwords::hash(password.to_owned()).await?;
    let email = normalize_email(email);
    db.tx(move |conn| {
        let platform: Option<Tenant> = tenants::table
            .filter(tenants::is_platform.eq(true))
            .select(Tenant::as_select())
            .first(conn)
            .optional()?;
        match platform {
            None => insert_tenant_with_owner(
                conn,
                NewOwner {
                    tenant_name: "gpumarket platform",
                    roles: &[TenantRole::Platform],
                    is_platform: true,
                    email: &email,
                    password_hash: &hash,
                    is_operator: true,
                    max_gpus: 0,
                },
            ),
            Some(tenant) => {
                let user_id = Uuid::now_v7();
                diesel::insert_into(users::table)
                    .values(NewUser {
                        id: user_id,
                        tenant_id: TenantId(tenant.id),
                        email: &email,
                        password_hash: &hash,
                        role: "admin",
                        is_operator: true,
                    })
                    .execute(conn)?;
                let user: User = users::table
                    .find(user_id)
                    .select(User::as_select())
                    .first(conn)?;
                Ok(principal(&user, &tenant))
            }
        }
    })
    .await
    .map_err(unique_email)
}

/// Two sign-ups racing for one email: the unique index decides.
fn unique_email(e: Error) -> Error {
    match e {
        Error::Database(diesel::result::Error::DatabaseError(
            diesel::result::DatabaseErrorKind::UniqueViolation,
            _,
        )) => Error::Conflict("email: already registered".into()),
        other => other,
    }
}

pub async fn login(db: &Db, email: String, password: String) -> Result<Principal, Error> {
    let found: Option<(User, Tenant)> = db
        .run(move |conn| {
            users::table
                .inner_join(tenants::table)
                .filter(users::email.eq(normalize_email(&email)))
                .select((User::as_select(), Tenant::as_select()))
                .first(conn)
                .optional()
                .map_err(Error::from)
        })
        .await?;
    let Some((user, tenant)) = found else {
        return Err(Error::BadCredentials);
    };
    let hash = user.password_hash.clone();
    let ok = crate::passwords::verify(password, hash).await?;
    if !ok {
        return Err(Error::BadCredentials);
    }
    Ok(principal(&user, &tenant))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_hash_verifies_only_its_password() {
        use crate::passwords::{hash, verify};
        let hash = hash("correct horse".into()).await.unwrap();
        assert!(verify("correct horse".into(), hash.clone()).await.unwrap());
        assert!(!verify("wrong horse".into(), hash).await.unwrap());
        assert!(
            !verify("correct horse".into(), "not a hash".into())
                .await
                .unwrap()
        );
    }

    #[test]
    fn sign_up_input_is_validated() {
        let ok = SignUpRequest {
            email: "a@b.c".into(),
            password: "12345678".into(),
            tenant_name: "Acme".into(),
            roles: vec![TenantRole::Renter],
        };
        assert!(validate(&ok).is_ok());
        assert!(
            validate(&SignUpRequest {
                email: "nope".into(),
                ..ok.clone()
            })
            .is_err()
        );
        assert!(
            validate(&SignUpRequest {
                password: "short".into(),
                ..ok.clone()
            })
            .is_err()
        );
        assert!(
            validate(&SignUpRequest {
                roles: vec![],
                ..ok.clone()
            })
            .is_err()
        );
        assert!(
            validate(&SignUpRequest {
                roles: vec![TenantRole::Platform],
                ..ok
            })
            .is_err()
        );
    }
}
