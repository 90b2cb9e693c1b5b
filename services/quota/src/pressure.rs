//! Tenants near their quotas, for the operators' marketplace overview
//! (docs/dashboards.md, "Operator overview"): every tenant-level dimension
//! whose use is at or above a share of its limit, measured exactly as
//! admission measures it (`holdings::held`), so a tenant listed at
//! 100 % is one whose next order in that dimension is refused. Teams are
//! not listed: a team is bounded by its tenant, whose row shows the
//! pressure that refuses orders across the tenant.

use contracts::ids::TenantId;
use std::collections::HashMap;

use actix_web::web;
use contracts::api::QuotaLimits;
use contracts::operator::{
    MAX_LISTED_TENANTS, QuotaPressure, QuotaPressureDimension, QuotaPressureQuery,
    QuotaPressureTenant, TenantName, TenantNamesRequest,
};
use diesel::prelude::*;
use platform::Db;
use platform::endpoint::Reply;
use platform::internal::ServiceCaller;
use rust_decimal::{Decimal, RoundingStrategy};
use schema::quota::{reservations, tenant_quotas, tenants};
use uuid::Uuid;

use crate::State;
use crate::limits::Held;
use crate::{Error, holdings as holds};

/// `used / limit` in percent, half-even to one decimal. A zero limit is
/// full as soon as anything uses it.
fn percent(used: Decimal, limit: Decimal) -> Decimal {
    if limit <= Decimal::ZERO {
        return Decimal::ONE_HUNDRED;
    }
    (used * Decimal::ONE_HUNDRED / limit)
        .round_dp_with_strategy(1, RoundingStrategy::MidpointNearestEven)
}

/// The limited dimensions of one tenant at or above `threshold` percent,
/// highest share first. Nothing used is never listed, whatever the limit.
pub fn pressed(
    limits: &QuotaLimits,
    held: &Held,
    threshold: Decimal,
) -> Vec<QuotaPressureDimension> {
    let mut candidates: Vec<(String, Decimal, Decimal)> = Vec::new();
    if let Some(max) = limits.max_gpus {
        candidates.push(("max_gpus".into(), max.into(), held.gpus));
    }
    for (model, max) in &limits.max_gpus_per_model {
        let used = held.gpus_by_model.get(model).copied().unwrap_or_default();
        candidates.push((format!("max_gpus_per_model:{model}"), (*max).into(), used));
    }
    if let Some(max) = limits.max_running_instances {
        candidates.push((
            "max_running_instances".into(),
            max.into(),
            held.instances.into(),
        ));
    }
    if let Some(budget) = limits.monthly_budget {
        candidates.push((
            "monthly_budget".into(),
            budget,
            held.projected_spend.normalize(),
        ));
    }
    let mut dimensions: Vec<QuotaPressureDimension> = candidates
        .into_iter()
        .filter(|(_, _, used)| *used > Decimal::ZERO)
        // On the exact share: a rounded 80.0 % may be 79.96 %.
        .filter(|(_, limit, used)| *used * Decimal::ONE_HUNDRED >= threshold * *limit)
        .map(|(quota, limit, used)| QuotaPressureDimension {
            percent: percent(used, limit),
            quota,
            limit,
            used,
        })
        .collect();
    dimensions.sort_by(|a, b| b.percent.cmp(&a.percent).then(a.quota.cmp(&b.quota)));
    dimensions
}

/// Every tenant with a dimension at or above `threshold_percent` of its
/// limit. Only tenants that hold something now or have a monthly budget can
/// be near a limit, so only those are measured.
pub async fn pressure(
    db: &Db,
    currency: String,
    query: QuotaPressureQuery,
) -> Result<QuotaPressure, Error> {
    let threshold_percent = query.threshold_percent;
    if !(1..=100).contains(&threshold_percent) {
        return Err(Error::Validation(
            "threshold_percent: must be between 1 and 100".into(),
        ));
    }
    let threshold = Decimal::from(threshold_percent);
    let code = currency.clone();
    let mut listed = db
        .run(move |conn| {
            conn.build_transaction()
                .read_only()
                .repeatable_read()
                .run(|conn| {
                    let mut candidates: Vec<Uuid> = reservations::table
                        .filter(reservations::released_at.is_null())
                        .select(reservations::tenant_id)
                        .distinct()
                        .load(conn)?;
                    let budgeted: Vec<Uuid> = tenant_quotas::table
                        .filter(tenant_quotas::monthly_budget.is_not_null())
                        .select(tenant_quotas::tenant_id)
                        .load(conn)?;
                    candidates.extend(budgeted);
                    candidates.sort_unstable();
                    candidates.dedup();
                    let now = contracts::time::now();
                    let mut listed = Vec::new();
                    for tenant_id in candidates {
                        let limits = match holds::tenant_limits(conn, TenantId(tenant_id), false) {
                            Ok(limits) => limits,
                            // Holds of a tenant without a quota row cannot be
                            // admitted; nothing to measure against.
                            Err(Error::NotFound(_)) => continue,
                            Err(e) => return Err(e),
                        };
                        let (held, _) = holds::held(conn, TenantId(tenant_id), None, now)?;
                        let dimensions = pressed(&limits, &held, threshold);
                        if dimensions.is_empty() {
                            continue;
                        }
                        let tenant_name: String = tenants::table
                            .find(tenant_id)
                            .select(tenants::name)
                            .first(conn)
                            .optional()?
                            .unwrap_or_default();
                        listed.push(QuotaPressureTenant {
                            tenant_id: TenantId(tenant_id),
                            tenant_name,
                            dimensions,
                        });
                    }
                    Ok::<_, Error>(listed)
                })
        })
        .await?;
    let top = |t: &QuotaPressureTenant| t.dimensions.first().map(|d| d.percent).unwrap_or_default();
    listed.sort_by(|a, b| top(b).cmp(&top(a)).then(a.tenant_id.cmp(&b.tenant_id)));
    listed.truncate(MAX_LISTED_TENANTS);
    Ok(QuotaPressure {
        threshold_percent,
        currency: code,
        tenants: listed,
    })
}

/// The names of `tenant_ids` (unknown ids are left out), so other services'
/// lists of tenants can be shown with who they are.
pub async fn names(db: &Db, req: TenantNamesRequest) -> Result<Vec<TenantName>, Error> {
    if req.tenant_ids.len() > MAX_LISTED_TENANTS {
        return Err(Error::Validation(format!(
            "tenant_ids: at most {MAX_LISTED_TENANTS}"
        )));
    }
    let rows: Vec<(Uuid, String)> = db
        .run(move |conn| {
            tenants::table
                .filter(tenants::id.eq_any(&req.tenant_ids))
                .select((tenants::id, tenants::name))
                .load(conn)
                .map_err(Error::from)
        })
        .await?;
    let by_id: HashMap<Uuid, String> = rows.into_iter().collect();
    let mut named: Vec<TenantName> = by_id
        .into_iter()
        .map(|(tenant_id, name)| TenantName {
            tenant_id: TenantId(tenant_id),
            name,
        })
        .collect();
    named.sort_by_key(|n| n.tenant_id);
    Ok(named)
}

pub async fn pressure_route(
    _: ServiceCaller,
    db: web::Data<Db>,
    state: web::Data<State>,
    query: web::Query<QuotaPressureQuery>,
) -> Result<Reply<QuotaPressure>, Error> {
    let currency = state.currency.clone();
    Ok(Reply::ok(
        pressure(&db, currency, query.into_inner()).await?,
    ))
}

pub async fn names_route(
    _: ServiceCaller,
    db: web::Data<Db>,
    body: web::Json<TenantNamesRequest>,
) -> Result<Reply<Vec<TenantName>>, Error> {
    Ok(Reply::ok(names(&db, body.into_inner()).await?))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    #[test]
    fn dimensions_at_or_above_the_threshold_are_listed_highest_first() {
        let limits = QuotaLimits {
            max_gpus: Some(10),
            max_gpus_per_model: BTreeMap::from([("L40S".to_owned(), 4), ("A100".to_owned(), 2)]),
            max_running_instances: Some(5),
            monthly_budget: Some(d("100")),
        };
        let held = Held {
            gpus: d("8"),
            gpus_by_model: BTreeMap::from([
                ("L40S".to_owned(), d("4")),
                ("H100".to_owned(), d("4")),
            ]),
            instances: 3,
            projected_spend: d("79.99"),
        };
        let listed = pressed(&limits, &held, d("80"));
        let names: Vec<&str> = listed.iter().map(|d| d.quota.as_str()).collect();
        // A100 holds nothing; 3 of 5 instances and 79.99 of 100 are below 80 %.
        assert_eq!(names, ["max_gpus_per_model:L40S", "max_gpus"]);
        assert_eq!(listed[0].percent, d("100"));
        assert_eq!(listed[1].percent, d("80"));
        // 79.96 % shows as 80.0 % but is below the threshold.
        let held = Held {
            projected_spend: d("79.96"),
            ..Held::default()
        };
        assert!(pressed(&limits, &held, d("80")).is_empty());
        assert_eq!((listed[1].used, listed[1].limit), (d("8"), d("10")));
    }

    #[test]
    fn percent_is_rounded_half_even_and_a_zero_limit_is_full() {
        assert_eq!(percent(d("1"), d("3")), d("33.3"));
        assert_eq!(percent(d("2"), d("3")), d("66.7"));
        assert_eq!(percent(d("0.0125"), d("0.1")), d("12.5"));
        assert_eq!(percent(d("0.00025"), d("0.001")), d("25"));
        assert_eq!(percent(d("1"), d("0")), d("100"));
        assert_eq!(percent(d("3"), d("2")), d("150"));
    }
}
