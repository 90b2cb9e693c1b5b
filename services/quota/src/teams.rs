//! Teams (projects) inside a tenant, each with a nominal quota no larger
//! than the tenant's and an optional borrowing limit: in the spirit of
//! Kueue's cohorts, the tenant's quota is the cohort, and a team may use the
//! tenant's unused quota beyond its nominal quota up to its borrowing limit.
//! Every order of a team counts against the team and the tenant.

use chrono::{DateTime, Utc};
use contracts::api::{CreateTeamRequest, QuotaLimits, SetTeamQuotaRequest, Team};
use contracts::ids::{TeamId, TenantId};
use diesel::prelude::*;
use platform::Db;
use rust_decimal::Decimal;
use schema::quota::{teams, users};
use uuid::Uuid;

use crate::holdings::{held, model_json, model_map, tenant_limits, usage};
use crate::{Error, limits};

#[derive(Queryable, Selectable)]
#[diesel(table_name = teams)]
struct TeamRow {
    id: Uuid,
    tenant_id: TenantId,
    name: String,
    max_gpus: Option<i32>,
    max_gpus_per_model: serde_json::Value,
    max_running_instances: Option<i32>,
    monthly_budget: Option<Decimal>,
    borrow_gpus: Option<i32>,
    borrow_gpus_per_model: serde_json::Value,
    borrow_running_instances: Option<i32>,
    borrow_monthly_budget: Option<Decimal>,
    created_at: DateTime<Utc>,
}

/// A team with its quota, before usage is added.
pub struct TeamQuota {
    pub id: Uuid,
    pub name: String,
    pub limits: QuotaLimits,
    pub borrowing_limit: QuotaLimits,
    created_at: DateTime<Utc>,
    tenant_id: TenantId,
}

impl From<TeamRow> for TeamQuota {
    fn from(row: TeamRow) -> Self {
        Self {
            id: row.id,
            tenant_id: row.tenant_id,
            name: row.name,
            limits: QuotaLimits {
                max_gpus: row.max_gpus,
                max_gpus_per_model: model_map(row.max_gpus_per_model),
                max_running_instances: row.max_running_instances,
                monthly_budget: row.monthly_budget,
            },
            borrowing_limit: QuotaLimits {
                max_gpus: row.borrow_gpus,
                max_gpus_per_model: model_map(row.borrow_gpus_per_model),
                max_running_instances: row.borrow_running_instances,
                monthly_budget: row.borrow_monthly_budget,
            },
            created_at: row.created_at,
        }
    }
}

/// A team of `tenant_id`; another tenant's team is not found.
pub fn load(conn: &mut PgConnection, tenant_id: TenantId, id: Uuid) -> Result<TeamQuota, Error> {
    teams::table
        .find(id)
        .filter(teams::tenant_id.eq(tenant_id))
        .select(TeamRow::as_select())
        .first(conn)
        .optional()?
        .map(TeamQuota::from)
        .ok_or_else(|| Error::NotFound(format!("team {id} not found")))
}

fn with_usage(
    conn: &mut PgConnection,
    team: TeamQuota,
    now: DateTime<Utc>,
    currency: &str,
) -> Result<Team, Error> {
    let (held, spend) = held(conn, team.tenant_id, Some(team.id), now)?;
    Ok(Team {
        id: TeamId(team.id),
        tenant_id: team.tenant_id,
        name: team.name,
        limits: team.limits,
        borrowing_limit: team.borrowing_limit,
        usage: usage(held, spend, currency),
        created_at: team.created_at,
    })
}

/// Every team of the tenant with its usage, oldest first.
pub fn all(
    conn: &mut PgConnection,
    tenant_id: TenantId,
    now: DateTime<Utc>,
    currency: &str,
) -> Result<Vec<Team>, Error> {
    let rows: Vec<TeamRow> = teams::table
        .filter(teams::tenant_id.eq(tenant_id))
        .order_by((teams::created_at, teams::id))
        .select(TeamRow::as_select())
        .load(conn)?;
    rows.into_iter()
        .map(|row| with_usage(conn, row.into(), now, currency))
        .collect()
}

fn write_quota(
    conn: &mut PgConnection,
    id: Uuid,
    limits: &QuotaLimits,
    borrowing: &QuotaLimits,
) -> QueryResult<usize> {
    diesel::update(teams::table.find(id))
        .set((
            teams::max_gpus.eq(limits.max_gpus),
            teams::max_gpus_per_model.eq(model_json(&limits.max_gpus_per_model)),
            teams::max_running_instances.eq(limits.max_running_instances),
            teams::monthly_budget.eq(limits.monthly_budget),
            teams::borrow_gpus.eq(borrowing.max_gpus),
            teams::borrow_gpus_per_model.eq(model_json(&borrowing.max_gpus_per_model)),
            teams::borrow_running_instances.eq(borrowing.max_running_instances),
            teams::borrow_monthly_budget.eq(borrowing.monthly_budget),
            teams::updated_at.eq(diesel::dsl::now),
        ))
        .execute(conn)
}

/// Lowers every team's nominal quota to fit the tenant's new one. Runs
/// under the tenant's quota lock.
pub fn clamp_all(
    conn: &mut PgConnection,
    tenant_id: TenantId,
    tenant: &QuotaLimits,
) -> Result<(), Error> {
    let rows: Vec<TeamRow> = teams::table
        .filter(teams::tenant_id.eq(tenant_id))
        .select(TeamRow::as_select())
        .load(conn)?;
    for team in rows.into_iter().map(TeamQuota::from) {
        let clamped = limits::clamp_to_tenant(&team.limits, tenant);
        if clamped != team.limits {
            tracing::info!(team.id = %team.id, "team quota lowered to the tenant's");
            write_quota(conn, team.id, &clamped, &team.borrowing_limit)?;
        }
    }
    Ok(())
}

/// Only a tenant's owners and admins manage its teams.
fn authorize(conn: &mut PgConnection, tenant_id: TenantId, user_id: Uuid) -> Result<(), Error> {
    let role: Option<String> = users::table
        .find(user_id)
        .filter(users::tenant_id.eq(tenant_id))
        .select(users::role)
        .first(conn)
        .optional()?;
    match role.as_deref() {
        Some("owner" | "admin") => Ok(()),
        _ => Err(Error::Forbidden(
            "only the tenant's owners and admins manage teams".into(),
        )),
    }
}

fn validate_quota(limits: &QuotaLimits, borrowing: &QuotaLimits) -> Result<(), Error> {
    limits::validate("limits", limits)?;
    limits::validate_borrowing(limits, borrowing)
}

pub async fn create(
    db: &Db,
    currency: String,
    tenant_id: TenantId,
    req: CreateTeamRequest,
) -> Result<Team, Error> {
    let name = req.name.trim().to_owned();
    if name.is_empty() || name.chars().count() > 100 {
        return Err(Error::Validation("name: 1 to 100 characters".into()));
    }
    if req.idempotency_key.trim().is_empty() || req.idempotency_key.len() > 200 {
        return Err(Error::Validation(
            "idempotencyKey: 1 to 200 characters".into(),
        ));
    }
    validate_quota(&req.limits, &req.borrowing_limit)?;
    db.tx(move |conn| {
        authorize(conn, tenant_id, req.user_id)?;
        let tenant = tenant_limits(conn, tenant_id, true)?;
        let now = contracts::time::now();
        let previous: Option<TeamRow> = teams::table
            .filter(teams::tenant_id.eq(tenant_id))
            .filter(teams::idempotency_key.eq(&req.idempotency_key))
            .select(TeamRow::as_select())
            .first(conn)
            .optional()?;
        if let Some(previous) = previous {
            // The quota as the team holds it now: a replay after a change to
            // the tenant's quota lowered it (clamp_all) is a CONFLICT too,
            // since the team no longer is what the request asked for.
            let first = TeamQuota::from(previous);
            if first.name != name
                || first.limits != req.limits
                || first.borrowing_limit != req.borrowing_limit
            {
                return Err(Error::Conflict(
                    "idempotencyKey: already used for another team".into(),
                ));
            }
            return with_usage(conn, first, now, &currency);
        }
        limits::check_within_tenant(&req.limits, &tenant)?;
        let taken: i64 = teams::table
            .filter(teams::tenant_id.eq(tenant_id))
            .filter(teams::name.eq(&name))
            .count()
            .get_result(conn)?;
        if taken > 0 {
            return Err(Error::Conflict(format!(
                "name: the tenant has a team named {name:?}"
            )));
        }
        let id = Uuid::now_v7();
        diesel::insert_into(teams::table)
            .values((
                teams::id.eq(id),
                teams::tenant_id.eq(tenant_id),
                teams::name.eq(&name),
                teams::idempotency_key.eq(&req.idempotency_key),
                teams::created_at.eq(now),
                teams::updated_at.eq(now),
            ))
            .execute(conn)?;
        write_quota(conn, id, &req.limits, &req.borrowing_limit)?;
        tracing::info!(tenant.id = %tenant_id, team.id = %id, "team created");
        let team = load(conn, tenant_id, id)?;
        with_usage(conn, team, now, &currency)
    })
    .await
}

/// Replaces a team's quota and borrowing limit. Holds already taken stay.
pub async fn set_quota(
    db: &Db,
    currency: String,
    tenant_id: TenantId,
    team_id: Uuid,
    req: SetTeamQuotaRequest,
) -> Result<Team, Error> {
    validate_quota(&req.limits, &req.borrowing_limit)?;
    db.tx(move |conn| {
        authorize(conn, tenant_id, req.user_id)?;
        // The tenant's lock orders this against admissions and tenant changes.
        let tenant = tenant_limits(conn, tenant_id, true)?;
        load(conn, tenant_id, team_id)?;
        limits::check_within_tenant(&req.limits, &tenant)?;
        write_quota(conn, team_id, &req.limits, &req.borrowing_limit)?;
        let team = load(conn, tenant_id, team_id)?;
        with_usage(conn, team, contracts::time::now(), &currency)
    })
    .await
}

pub async fn list(db: &Db, currency: String, tenant_id: TenantId) -> Result<Vec<Team>, Error> {
    db.tx(move |conn| all(conn, tenant_id, contracts::time::now(), &currency))
        .await
}
