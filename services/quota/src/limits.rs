//! Quota limits and the admission check, as pure functions: what a tenant or
//! a team may hold, what it holds, and whether one more hold fits.

use std::collections::BTreeMap;

use contracts::api::QuotaLimits;
use rust_decimal::Decimal;
use serde_json::json;
use uuid::Uuid;

use crate::Error;

/// Upper bounds accepted on input, so a typo cannot overflow a sum.
const MAX_COUNT: i32 = 1_000_000;
const MAX_MODEL_NAME: usize = 100;

/// Refuses limits that are negative, absurd or name an empty model.
pub fn validate(field: &str, limits: &QuotaLimits) -> Result<(), Error> {
    let count = |name: &str, value: Option<i32>| match value {
        Some(v) if !(0..=MAX_COUNT).contains(&v) => Err(Error::Validation(format!(
            "{field}.{name}: between 0 and {MAX_COUNT}"
        ))),
        _ => Ok(()),
    };
    count("maxGpus", limits.max_gpus)?;
    count("maxRunningInstances", limits.max_running_instances)?;
    for (model, max) in &limits.max_gpus_per_model {
        if model.trim().is_empty() || model.len() > MAX_MODEL_NAME {
            return Err(Error::Validation(format!(
                "{field}.maxGpusPerModel: a GPU model name of 1 to {MAX_MODEL_NAME} characters"
            )));
        }
        count("maxGpusPerModel", Some(*max))?;
    }
    if let Some(budget) = limits.monthly_budget
        && (budget < Decimal::ZERO || budget > Decimal::from(1_000_000_000_000i64))
    {
        return Err(Error::Validation(format!(
            "{field}.monthlyBudget: between 0 and 1e12"
        )));
    }
    Ok(())
}

/// A team's borrowing applies on top of a nominal limit; borrowing on a
/// dimension the team does not limit would be meaningless.
pub fn validate_borrowing(limits: &QuotaLimits, borrowing: &QuotaLimits) -> Result<(), Error> {
    validate("borrowingLimit", borrowing)?;
    let unpaired = |name: &str, borrow: bool, nominal: bool| {
        if borrow && !nominal {
            Err(Error::Validation(format!(
                "borrowingLimit.{name}: the team has no nominal {name} to borrow beyond"
            )))
        } else {
            Ok(())
        }
    };
    unpaired(
        "maxGpus",
        borrowing.max_gpus.is_some(),
        limits.max_gpus.is_some(),
    )?;
    unpaired(
        "maxRunningInstances",
        borrowing.max_running_instances.is_some(),
        limits.max_running_instances.is_some(),
    )?;
    unpaired(
        "monthlyBudget",
        borrowing.monthly_budget.is_some(),
        limits.monthly_budget.is_some(),
    )?;
    for model in borrowing.max_gpus_per_model.keys() {
        unpaired(
            "maxGpusPerModel",
            true,
            limits.max_gpus_per_model.contains_key(model),
        )?;
    }
    Ok(())
}

/// The tenant's bound on a model: its per-model limit, else its GPU limit.
fn tenant_model_bound(tenant: &QuotaLimits, model: &str) -> Option<i32> {
    tenant
        .max_gpus_per_model
        .get(model)
        .copied()
        .or(tenant.max_gpus)
}

/// A team's nominal quota may not exceed its tenant's in any dimension.
pub fn check_within_tenant(team: &QuotaLimits, tenant: &QuotaLimits) -> Result<(), Error> {
    let above = |name: &str, team: String, tenant: String| {
        Err(Error::Validation(format!(
            "limits.{name}: {team} is above the tenant's {tenant}"
        )))
    };
    match (team.max_gpus, tenant.max_gpus) {
        (Some(t), Some(n)) if t > n => return above("maxGpus", t.to_string(), n.to_string()),
        _ => {}
    }
    for (model, t) in &team.max_gpus_per_model {
        if let Some(n) = tenant_model_bound(tenant, model)
            && *t > n
        {
            return above("maxGpusPerModel", format!("{t} for {model}"), n.to_string());
        }
    }
    match (team.max_running_instances, tenant.max_running_instances) {
        (Some(t), Some(n)) if t > n => {
            return above("maxRunningInstances", t.to_string(), n.to_string());
        }
        _ => {}
    }
    match (team.monthly_budget, tenant.monthly_budget) {
        (Some(t), Some(n)) if t > n => {
            return above(
                "monthlyBudget",
                t.normalize().to_string(),
                n.normalize().to_string(),
            );
        }
        _ => {}
    }
    Ok(())
}

/// Lowers every dimension of a team's nominal quota to the tenant's, so
/// that an operator shrinking a tenant keeps "team ≤ tenant" true.
pub fn clamp_to_tenant(team: &QuotaLimits, tenant: &QuotaLimits) -> QuotaLimits {
    let min = |t: Option<i32>, n: Option<i32>| match (t, n) {
        (Some(t), Some(n)) => Some(t.min(n)),
        (t, _) => t,
    };
    QuotaLimits {
        max_gpus: min(team.max_gpus, tenant.max_gpus),
        max_gpus_per_model: team
            .max_gpus_per_model
            .iter()
            .map(|(model, t)| {
                let bound = tenant_model_bound(tenant, model).map_or(*t, |n| (*t).min(n));
                (model.clone(), bound)
            })
            .collect(),
        max_running_instances: min(team.max_running_instances, tenant.max_running_instances),
        monthly_budget: match (team.monthly_budget, tenant.monthly_budget) {
            (Some(t), Some(n)) => Some(t.min(n)),
            (t, _) => t,
        },
    }
}

/// Nominal plus borrowing, per dimension: what a team may use at most.
pub fn with_borrowing(nominal: &QuotaLimits, borrowing: &QuotaLimits) -> QuotaLimits {
    let plus = |n: Option<i32>, b: Option<i32>| n.map(|n| n.saturating_add(b.unwrap_or(0)));
    QuotaLimits {
        max_gpus: plus(nominal.max_gpus, borrowing.max_gpus),
        max_gpus_per_model: nominal
            .max_gpus_per_model
            .iter()
            .map(|(model, n)| {
                let b = borrowing.max_gpus_per_model.get(model).copied();
                (model.clone(), plus(Some(*n), b).unwrap_or(*n))
            })
            .collect(),
        max_running_instances: plus(
            nominal.max_running_instances,
            borrowing.max_running_instances,
        ),
        monthly_budget: nominal
            .monthly_budget
            .map(|n| n + borrowing.monthly_budget.unwrap_or(Decimal::ZERO)),
    }
}

/// What a tenant or team holds now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Held {
    /// GPU-equivalents: whole GPUs plus each MIG slice's share of its GPU
    /// (eighths of a GPU, so exact in a `Decimal`).
    pub gpus: Decimal,
    pub gpus_by_model: BTreeMap<String, Decimal>,
    pub instances: i32,
    /// Month-to-date spend plus every live hold until the end of the month.
    pub projected_spend: Decimal,
}

/// What a new hold asks for.
#[derive(Debug, Clone)]
pub struct Demand<'a> {
    /// GPU-equivalents asked for (see [`Held::gpus`]).
    pub gpus: Decimal,
    pub model: &'a str,
    /// The new hold's cost from now to the end of the month.
    pub projected_cost: Decimal,
}

/// Whose quota refused.
#[derive(Debug, Clone, PartialEq)]
pub enum Level {
    Tenant,
    Team { id: Uuid, name: String },
}

/// A refusal: which quota, its limit, what is held and what was asked.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    pub quota: String,
    pub level: Level,
    pub limit: serde_json::Value,
    pub used: serde_json::Value,
    pub requested: serde_json::Value,
    pub message: String,
}

impl Violation {
    /// The fields the gateway adds to `extensions`.
    pub fn details(&self) -> serde_json::Value {
        let (scope, team_id, team_name) = match &self.level {
            Level::Tenant => ("TENANT", None, None),
            Level::Team { id, name } => ("TEAM", Some(id.to_string()), Some(name.clone())),
        };
        json!({
            "quota": self.quota,
            "scope": scope,
            "teamId": team_id,
            "teamName": team_name,
            "limit": self.limit,
            "used": self.used,
            "requested": self.requested,
        })
    }
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// A count in `extensions`: an integer when whole (as before MIG slices),
/// else a number with its fraction (`0.5` GPU).
fn share_json(d: Decimal) -> serde_json::Value {
    if d.fract().is_zero() {
        i64::try_from(d).map_or_else(|_| json!(d.to_string()), |n| json!(n))
    } else {
        f64::try_from(d).map_or_else(|_| json!(d.to_string()), |n| json!(n))
    }
}

/// Whether `demand` fits `limit` (already including any borrowing) given
/// `held`. The first dimension that does not fit is named.
pub fn admit(
    level: &Level,
    limit: &QuotaLimits,
    held: &Held,
    demand: &Demand<'_>,
    currency: &str,
) -> Result<(), Box<Violation>> {
    let who = match level {
        Level::Tenant => "the tenant".to_owned(),
        Level::Team { name, .. } => format!("team {name:?}"),
    };
    let count = |quota: String, what: &str, limit: i32, used: Decimal, requested: Decimal| {
        let (used, requested) = (used.normalize(), requested.normalize());
        Box::new(Violation {
            message: format!(
                "quota {quota} exceeded: {who} holds {used} of {limit} {what} and the order asks for {requested}"
            ),
            quota,
            level: level.clone(),
            limit: json!(limit),
            used: share_json(used),
            requested: share_json(requested),
        })
    };
    if let Some(max) = limit.max_gpus
        && held.gpus + demand.gpus > Decimal::from(max)
    {
        return Err(count(
            "max_gpus".into(),
            "GPUs",
            max,
            held.gpus,
            demand.gpus,
        ));
    }
    if let Some(max) = limit.max_gpus_per_model.get(demand.model) {
        let used = held
            .gpus_by_model
            .get(demand.model)
            .copied()
            .unwrap_or_default();
        if used + demand.gpus > Decimal::from(*max) {
            return Err(count(
                format!("max_gpus_per_model:{}", demand.model),
                &format!("{} GPUs", demand.model),
                *max,
                used,
                demand.gpus,
            ));
        }
    }
    if let Some(max) = limit.max_running_instances
        && held.instances.saturating_add(1) > max
    {
        return Err(count(
            "max_running_instances".into(),
            "running instances",
            max,
            held.instances.into(),
            Decimal::ONE,
        ));
    }
    if let Some(budget) = limit.monthly_budget {
        let total = held.projected_spend + demand.projected_cost;
        if total > budget {
            return Err(Box::new(Violation {
                message: format!(
                    "quota monthly_budget exceeded: {who}'s projected spend this month would be {} {currency} \
                     (month-to-date and current rentals {} plus this order {} until the month ends), \
                     above its budget of {} {currency}",
                    total.normalize(),
                    held.projected_spend.normalize(),
                    demand.projected_cost.normalize(),
                    budget.normalize()
                ),
                quota: "monthly_budget".into(),
                level: level.clone(),
                limit: json!(budget.normalize().to_string()),
                used: json!(held.projected_spend.normalize().to_string()),
                requested: json!(demand.projected_cost.normalize().to_string()),
            }));
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use rust_decimal_macros::dec;

    fn limits(gpus: Option<i32>, model: &[(&str, i32)]) -> QuotaLimits {
        QuotaLimits {
            max_gpus: gpus,
            max_gpus_per_model: model.iter().map(|(m, n)| ((*m).to_owned(), *n)).collect(),
            ..QuotaLimits::default()
        }
    }

    fn demand(gpus: i32) -> Demand<'static> {
        Demand {
            gpus: gpus.into(),
            model: "H100",
            projected_cost: dec!(0),
        }
    }

    /// MIG slices count as their share of a GPU: 7.5 held of 8 admits a
    /// half-GPU slice and refuses a whole GPU, reporting the fraction.
    #[test]
    fn slices_count_as_gpu_equivalents() {
        let held = Held {
            gpus: dec!(7.5),
            gpus_by_model: [("H100".to_owned(), dec!(7.5))].into(),
            ..Held::default()
        };
        let limit = limits(Some(8), &[]);
        let half = Demand {
            gpus: dec!(0.5),
            model: "H100",
            projected_cost: dec!(0),
        };
        assert!(admit(&Level::Tenant, &limit, &held, &half, "USD").is_ok());
        let refused = admit(&Level::Tenant, &limit, &held, &demand(1), "USD").unwrap_err();
        assert_eq!(refused.used, serde_json::json!(7.5));
        assert_eq!(refused.requested, serde_json::json!(1));
        assert!(
            refused.message.contains("holds 7.5 of 8 GPUs"),
            "{}",
            refused.message
        );
    }

    #[test]
    fn each_dimension_is_named_when_it_refuses() {
        let held = Held {
            gpus: dec!(6),
            gpus_by_model: [("H100".to_owned(), dec!(3))].into(),
            instances: 2,
            projected_spend: dec!(90),
        };
        let tenant = Level::Tenant;
        let quota = |l: &QuotaLimits, d: &Demand<'_>| {
            admit(&tenant, l, &held, d, "USD").err().map(|v| v.quota)
        };
        assert_eq!(quota(&limits(Some(8), &[]), &demand(2)), None);
        assert_eq!(
            quota(&limits(Some(8), &[]), &demand(3)).as_deref(),
            Some("max_gpus")
        );
        assert_eq!(
            quota(&limits(None, &[("H100", 4)]), &demand(2)).as_deref(),
            Some("max_gpus_per_model:H100")
        );
        let instances = QuotaLimits {
            max_running_instances: Some(2),
            ..QuotaLimits::default()
        };
        assert_eq!(
            quota(&instances, &demand(1)).as_deref(),
            Some("max_running_instances")
        );
        let budget = QuotaLimits {
            monthly_budget: Some(dec!(100)),
            ..QuotaLimits::default()
        };
        let costly = Demand {
            projected_cost: dec!(10.000000001),
            ..demand(1)
        };
        assert_eq!(quota(&budget, &costly).as_deref(), Some("monthly_budget"));
        let exact = Demand {
            projected_cost: dec!(10),
            ..demand(1)
        };
        assert_eq!(quota(&budget, &exact), None);
    }

    #[test]
    fn a_violation_carries_its_numbers() {
        let level = Level::Team {
            id: Uuid::nil(),
            name: "ml".into(),
        };
        let v = admit(
            &level,
            &limits(Some(4), &[]),
            &Held::default(),
            &demand(5),
            "USD",
        )
        .unwrap_err();
        let d = v.details();
        assert_eq!(d["quota"], "max_gpus");
        assert_eq!(d["scope"], "TEAM");
        assert_eq!(d["limit"], 4);
        assert_eq!(d["used"], 0);
        assert_eq!(d["requested"], 5);
        assert!(v.message.contains("team \"ml\""), "{}", v.message);
    }

    #[test]
    fn a_team_may_not_exceed_its_tenant() {
        let tenant = QuotaLimits {
            max_gpus: Some(8),
            max_gpus_per_model: [("H100".to_owned(), 4)].into(),
            max_running_instances: Some(3),
            monthly_budget: Some(dec!(100)),
        };
        assert!(check_within_tenant(&tenant, &tenant).is_ok());
        assert!(check_within_tenant(&limits(Some(9), &[]), &tenant).is_err());
        assert!(check_within_tenant(&limits(None, &[("H100", 5)]), &tenant).is_err());
        // A model the tenant does not name is bounded by its GPU limit.
        assert!(check_within_tenant(&limits(None, &[("A100", 8)]), &tenant).is_ok());
        assert!(check_within_tenant(&limits(None, &[("A100", 9)]), &tenant).is_err());
        let budget = QuotaLimits {
            monthly_budget: Some(dec!(100.01)),
            ..QuotaLimits::default()
        };
        assert!(check_within_tenant(&budget, &tenant).is_err());
    }

    #[test]
    fn clamping_makes_a_team_fit_its_tenant() {
        let tenant = limits(Some(4), &[("H100", 2)]);
        let team = QuotaLimits {
            max_gpus: Some(6),
            max_gpus_per_model: [("H100".to_owned(), 3), ("A100".to_owned(), 5)].into(),
            max_running_instances: Some(7),
            monthly_budget: None,
        };
        let clamped = clamp_to_tenant(&team, &tenant);
        assert!(check_within_tenant(&clamped, &tenant).is_ok());
        assert_eq!(clamped.max_gpus, Some(4));
        assert_eq!(clamped.max_gpus_per_model["H100"], 2);
        assert_eq!(clamped.max_gpus_per_model["A100"], 4);
        assert_eq!(clamped.max_running_instances, Some(7));
    }

    #[test]
    fn borrowing_adds_to_nominal_and_needs_it() {
        let nominal = limits(Some(2), &[("H100", 1)]);
        let borrowing = limits(Some(2), &[("H100", 1)]);
        let ceiling = with_borrowing(&nominal, &borrowing);
        assert_eq!(ceiling.max_gpus, Some(4));
        assert_eq!(ceiling.max_gpus_per_model["H100"], 2);
        assert!(validate_borrowing(&nominal, &borrowing).is_ok());
        assert!(validate_borrowing(&QuotaLimits::default(), &borrowing).is_err());
        assert!(validate("limits", &limits(Some(-1), &[])).is_err());
        assert!(validate("limits", &limits(None, &[(" ", 1)])).is_err());
    }
}
