//! Endpoints: where a tenant's events go, which types, and the secrets
//! that sign them. Every read and write names the tenant, so one tenant
//! never sees or touches another's endpoint (another's id is NOT_FOUND).

use chrono::{DateTime, Utc};
use contracts::ids::{TenantId, WebhookEndpointId};
use contracts::webhooks::{Endpoint, EventType};
use diesel::pg::PgConnection;
use diesel::prelude::*;
use diesel::sql_types::{Array, Bool, Int8, Nullable, Text, Timestamptz, Uuid as SqlUuid};
use uuid::Uuid;

use crate::Error;
use crate::signature::SigningSecret;

/// The longest description.
pub const MAX_DESCRIPTION: usize = 500;

#[derive(QueryableByName)]
pub struct Row {
    #[diesel(sql_type = SqlUuid)]
    pub id: Uuid,
    #[diesel(sql_type = SqlUuid)]
    pub tenant_id: TenantId,
    #[diesel(sql_type = Text)]
    pub url: String,
    #[diesel(sql_type = Text)]
    pub description: String,
    #[diesel(sql_type = Array<Text>)]
    pub event_types: Vec<String>,
    #[diesel(sql_type = Bool)]
    pub enabled: bool,
    #[diesel(sql_type = Nullable<Text>)]
    pub disabled_reason: Option<String>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub disabled_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub previous_secret_until: Option<DateTime<Utc>>,
    #[diesel(sql_type = Timestamptz)]
    pub created_at: DateTime<Utc>,
    #[diesel(sql_type = Timestamptz)]
    pub updated_at: DateTime<Utc>,
}

impl From<Row> for Endpoint {
    fn from(r: Row) -> Self {
        Endpoint {
            id: WebhookEndpointId(r.id),
            tenant_id: r.tenant_id,
            url: r.url,
            description: r.description,
            event_types: r.event_types,
            enabled: r.enabled,
            disabled_reason: r.disabled_reason,
            disabled_at: r.disabled_at,
            previous_secret_until: r.previous_secret_until,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

const COLUMNS: &str = "id, tenant_id, url, description, event_types, enabled, disabled_reason, \
     disabled_at, previous_secret_until, created_at, updated_at";

/// Checks a subscription list: known, subscribable types, each once, in
/// the catalog's order.
pub fn event_types(raw: &[String]) -> Result<Vec<String>, Error> {
    let mut types = Vec::new();
    for name in raw {
        let t = EventType::parse(name.trim())
            .filter(|t| t.subscribable())
            .ok_or_else(|| Error::Validation(format!("eventTypes: unknown event type {name:?}")))?;
        if !types.contains(&t) {
            types.push(t);
        }
    }
    types.sort_by_key(|t| EventType::ALL.iter().position(|a| a == t));
    Ok(types.into_iter().map(|t| t.as_str().to_owned()).collect())
}

pub fn description(raw: &str) -> Result<String, Error> {
    let d = raw.trim();
    if d.contains('\0') {
        return Err(Error::Validation(
            "description: may not contain a NUL character".into(),
        ));
    }
    if d.chars().count() > MAX_DESCRIPTION {
        return Err(Error::Validation(format!(
            "description: at most {MAX_DESCRIPTION} characters"
        )));
    }
    Ok(d.to_owned())
}

/// Creates an endpoint unless the tenant has `max` already; the tenant's
/// endpoints are counted under a lock on them, so racing creations cannot
/// pass the limit together.
pub fn create(
    conn: &mut PgConnection,
    tenant_id: TenantId,
    url: &str,
    description: &str,
    event_types: &[String],
    secret: &SigningSecret,
    max: i64,
) -> Result<Endpoint, Error> {
    diesel::sql_query(
        "SELECT pg_advisory_xact_lock(hashtextextended('webhooks.endpoints:' || $1::text, 0))",
    )
    .bind::<SqlUuid, _>(tenant_id)
    .execute(conn)?;
    #[derive(QueryableByName)]
    struct Count {
        #[diesel(sql_type = Int8)]
        n: i64,
    }
    let count: Count =
        diesel::sql_query("SELECT count(*) AS n FROM webhooks.endpoints WHERE tenant_id = $1")
            .bind::<SqlUuid, _>(tenant_id)
            .get_result(conn)?;
    if count.n >= max {
        return Err(Error::QuotaExceeded(format!(
            "a tenant may have at most {max} webhook endpoints"
        )));
    }
    let row: Row = diesel::sql_query(format!(
        "INSERT INTO webhooks.endpoints (id, tenant_id, url, description, event_types, secret) \
         VALUES ($1, $2, $3, $4, $5, $6) RETURNING {COLUMNS}"
    ))
    .bind::<SqlUuid, _>(Uuid::now_v7())
    .bind::<SqlUuid, _>(tenant_id)
    .bind::<Text, _>(url)
    .bind::<Text, _>(description)
    .bind::<Array<Text>, _>(event_types)
    .bind::<Text, _>(secret.expose())
    .get_result(conn)?;
    Ok(row.into())
}

pub fn list(conn: &mut PgConnection, tenant_id: TenantId) -> Result<Vec<Endpoint>, Error> {
    let rows: Vec<Row> = diesel::sql_query(format!(
        "SELECT {COLUMNS} FROM webhooks.endpoints WHERE tenant_id = $1 ORDER BY created_at, id"
    ))
    .bind::<SqlUuid, _>(tenant_id)
    .load(conn)?;
    Ok(rows.into_iter().map(Into::into).collect())
}

pub fn get(conn: &mut PgConnection, tenant_id: TenantId, id: Uuid) -> Result<Endpoint, Error> {
    let row: Option<Row> = diesel::sql_query(format!(
        "SELECT {COLUMNS} FROM webhooks.endpoints WHERE tenant_id = $1 AND id = $2"
    ))
    .bind::<SqlUuid, _>(tenant_id)
    .bind::<SqlUuid, _>(id)
    .get_result(conn)
    .optional()?;
    row.map(Into::into).ok_or_else(not_found)
}

pub fn not_found() -> Error {
    Error::NotFound("no such webhook endpoint".into())
}

/// Applies a change; `enabled = true` clears a disabling.
pub fn update(
    conn: &mut PgConnection,
    tenant_id: TenantId,
    id: Uuid,
    url: Option<&str>,
    description: Option<&str>,
    event_types: Option<&[String]>,
    enabled: Option<bool>,
) -> Result<Endpoint, Error> {
    let row: Option<Row> = diesel::sql_query(format!(
        "UPDATE webhooks.endpoints SET \
           url = COALESCE($3, url), \
           description = COALESCE($4, description), \
           event_types = COALESCE($5, event_types), \
           enabled = COALESCE($6, enabled), \
           disabled_reason = CASE WHEN $6 THEN NULL WHEN $6 = false THEN 'disabled by its owner' ELSE disabled_reason END, \
           disabled_at = CASE WHEN $6 THEN NULL WHEN $6 = false AND enabled THEN now() ELSE disabled_at END, \
           updated_at = now() \
         WHERE tenant_id = $1 AND id = $2 RETURNING {COLUMNS}"
    ))
    .bind::<SqlUuid, _>(tenant_id)
    .bind::<SqlUuid, _>(id)
    .bind::<Nullable<Text>, _>(url)
    .bind::<Nullable<Text>, _>(description)
    .bind::<Nullable<Array<Text>>, _>(event_types)
    .bind::<Nullable<Bool>, _>(enabled)
    .get_result(conn)
    .optional()?;
    row.map(Into::into).ok_or_else(not_found)
}

/// Deletes an endpoint with its deliveries and their log.
pub fn delete(conn: &mut PgConnection, tenant_id: TenantId, id: Uuid) -> Result<(), Error> {
    let n = diesel::sql_query("DELETE FROM webhooks.endpoints WHERE tenant_id = $1 AND id = $2")
        .bind::<SqlUuid, _>(tenant_id)
        .bind::<SqlUuid, _>(id)
        .execute(conn)?;
    if n == 0 {
        return Err(not_found());
    }
    Ok(())
}

/// Makes `secret` the signing secret; the one it replaces keeps signing
/// beside it until `overlap_until`.
pub fn rotate(
    conn: &mut PgConnection,
    tenant_id: TenantId,
    id: Uuid,
    secret: &SigningSecret,
    overlap_until: DateTime<Utc>,
) -> Result<Endpoint, Error> {
    let row: Option<Row> = diesel::sql_query(format!(
        "UPDATE webhooks.endpoints SET previous_secret = secret, previous_secret_until = $4, \
           secret = $3, updated_at = now() \
         WHERE tenant_id = $1 AND id = $2 RETURNING {COLUMNS}"
    ))
    .bind::<SqlUuid, _>(tenant_id)
    .bind::<SqlUuid, _>(id)
    .bind::<Text, _>(secret.expose())
    .bind::<Timestamptz, _>(overlap_until)
    .get_result(conn)
    .optional()?;
    row.map(Into::into).ok_or_else(not_found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriptions_are_checked_and_put_in_catalog_order() {
        let raw = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            event_types(&raw(&["balance.low", "instance.running", "balance.low"])).unwrap(),
            ["instance.running", "balance.low"]
        );
        assert!(event_types(&raw(&["instance.exploded"])).is_err());
        assert!(event_types(&raw(&["webhook.test"])).is_err());
        assert!(event_types(&[]).unwrap().is_empty());
        assert!(matches!(description("a\0b"), Err(Error::Validation(_))));
        assert!(matches!(
            description(&"x".repeat(501)),
            Err(Error::Validation(_))
        ));
        assert_eq!(description("  ok ").unwrap(), "ok");
    }
}
