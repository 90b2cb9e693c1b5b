//! The billing dashboards (docs/dashboards.md): a tenant's balance history
//! with its running balance, a renter's usage and spend as a time series,
//! and a host's earnings by machine and day. Amounts are the ledger's exact
//! ones (9 decimals), never rounded here. The tenant is the caller's; only
//! an operator may name another with `tenantId`.

use async_graphql::{Context, Enum, ID, Object, SimpleObject};
use chrono::{DateTime, Utc};
use contracts::api;
use rust_decimal::Decimal;
use uuid::Uuid;

use super::instant;
use crate::auth::{self, Access};
use crate::clients;
use crate::error::{GatewayError, GqlResult};
use crate::validate;

const DEFAULT_PAGE: i32 = 50;
const MAX_PAGE: i32 = 200;

/// The width of a series bucket, in UTC.
#[derive(Enum, Clone, Copy, PartialEq, Eq)]
pub enum UsageBucket {
    Hour,
    Day,
}

impl From<UsageBucket> for api::SeriesBucket {
    fn from(b: UsageBucket) -> Self {
        match b {
            UsageBucket::Hour => Self::Hour,
            UsageBucket::Day => Self::Day,
        }
    }
}

/// What the points of a usage series are keyed by.
#[derive(Enum, Clone, Copy, PartialEq, Eq)]
pub enum UsageGroupBy {
    /// The instance id.
    Instance,
    /// The GPU model of the machine the usage ran on.
    GpuModel,
    /// The meter (`gpu`, `storage`, ...).
    Meter,
}

impl From<UsageGroupBy> for api::SeriesGroupBy {
    fn from(g: UsageGroupBy) -> Self {
        match g {
            UsageGroupBy::Instance => Self::Instance,
            UsageGroupBy::GpuModel => Self::GpuModel,
            UsageGroupBy::Meter => Self::Meter,
        }
    }
}

/// One entry of the balance, with the posting it is part of.
#[derive(SimpleObject)]
pub struct BalanceHistoryEntry {
    /// The posting's id (unique in the ledger).
    transaction_id: String,
    /// `usage`, `credit`, `top_up`, `downtime_credit`, `credit_note`, ...
    kind: String,
    description: String,
    instance_id: Option<ID>,
    /// Signed: a charge is negative, a credit positive.
    amount: Decimal,
    /// The balance right after this entry.
    balance_after: Decimal,
    #[graphql(deprecation = "a String: use `postedAtUtc`, a DateTime")]
    posted_at: String,
    posted_at_utc: DateTime<Utc>,
    /// Pass as `after` to continue after this entry.
    cursor: String,
}

#[derive(SimpleObject)]
pub struct HistoryPageInfo {
    /// Pass as `after` to get the next (older) page.
    end_cursor: Option<String>,
    has_next_page: bool,
}

/// A page of a balance's entries, newest first.
#[derive(SimpleObject)]
pub struct BalanceHistory {
    /// The balance now: the newest entry's `balanceAfter`.
    balance: Decimal,
    currency: String,
    nodes: Vec<BalanceHistoryEntry>,
    page_info: HistoryPageInfo,
}

impl From<api::BalanceHistoryPage> for BalanceHistory {
    fn from(p: api::BalanceHistoryPage) -> Self {
        Self {
            balance: p.balance,
            currency: p.currency,
            nodes: p
                .entries
                .into_iter()
                .map(|e| BalanceHistoryEntry {
                    cursor: e.entry_id.to_string(),
                    transaction_id: e.transaction_id,
                    kind: e.kind,
                    description: e.description,
                    instance_id: e.instance_id.map(Into::into),
                    amount: e.amount,
                    balance_after: e.balance_after,
                    posted_at: instant(e.posted_at),
                    posted_at_utc: e.posted_at,
                })
                .collect(),
            page_info: HistoryPageInfo {
                end_cursor: p.end_cursor,
                has_next_page: p.has_next_page,
            },
        }
    }
}

/// Usage of one key in one bucket. Buckets without usage have no point.
#[derive(SimpleObject)]
pub struct UsagePoint {
    #[graphql(deprecation = "a String: use `bucketStartUtc`, a DateTime")]
    bucket_start: String,
    bucket_start_utc: DateTime<Utc>,
    /// The instance id, GPU model or meter; null when the usage predates the
    /// dimension.
    key: Option<String>,
    /// Whole seconds, corrections included.
    seconds: i64,
    /// The exact charge (the renter's ledger legs), 9 decimals.
    spend: Decimal,
    /// Ledger postings summed into the point.
    postings: i64,
}

/// A renter's usage and spend over `[from, to)`. A posting counts, whole, in
/// the bucket its usage segment started in, so the points add up exactly
/// to the ledger.
#[derive(SimpleObject)]
pub struct UsageSeries {
    #[graphql(deprecation = "a String: use `fromUtc`, a DateTime")]
    from: String,
    from_utc: DateTime<Utc>,
    #[graphql(deprecation = "a String: use `toUtc`, a DateTime")]
    to: String,
    to_utc: DateTime<Utc>,
    currency: String,
    /// By bucket start, then key.
    points: Vec<UsagePoint>,
    total_seconds: i64,
    total_spend: Decimal,
}

impl From<api::UsageSeries> for UsageSeries {
    fn from(s: api::UsageSeries) -> Self {
        Self {
            from: instant(s.from),
            from_utc: s.from,
            to: instant(s.to),
            to_utc: s.to,
            currency: s.currency,
            points: s
                .points
                .into_iter()
                .map(|p| UsagePoint {
                    bucket_start: instant(p.bucket_start),
                    bucket_start_utc: p.bucket_start,
                    key: p.key,
                    seconds: p.seconds,
                    spend: p.spend,
                    postings: p.postings,
                })
                .collect(),
            total_seconds: s.total_seconds,
            total_spend: s.total_spend,
        }
    }
}

/// A host's earnings on one machine in one UTC day.
#[derive(SimpleObject)]
pub struct MachineDayEarnings {
    #[graphql(deprecation = "a String: use `dayUtc`, a DateTime")]
    day: String,
    day_utc: DateTime<Utc>,
    /// Null for usage from before machines were recorded on postings.
    machine_id: Option<ID>,
    gpu_model: Option<String>,
    seconds: i64,
    /// What renters were charged: `net + fee`.
    gross: Decimal,
    /// The platform fee.
    fee: Decimal,
    /// The host's share of the usage.
    net: Decimal,
    /// Downtime credits paid to renters from the host's earnings.
    downtime_credits: Decimal,
    /// `net − downtimeCredits`: the day's change to the host's earnings.
    total: Decimal,
}

#[derive(SimpleObject)]
pub struct MachineEarnings {
    #[graphql(deprecation = "a String: use `fromUtc`, a DateTime")]
    from: String,
    from_utc: DateTime<Utc>,
    #[graphql(deprecation = "a String: use `toUtc`, a DateTime")]
    to: String,
    to_utc: DateTime<Utc>,
    currency: String,
    /// By day, then machine.
    days: Vec<MachineDayEarnings>,
    total_gross: Decimal,
    total_fee: Decimal,
    total_net: Decimal,
    total_downtime_credits: Decimal,
    total: Decimal,
}

impl From<api::MachineEarnings> for MachineEarnings {
    fn from(e: api::MachineEarnings) -> Self {
        Self {
            from: instant(e.from),
            from_utc: e.from,
            to: instant(e.to),
            to_utc: e.to,
            currency: e.currency,
            days: e
                .days
                .into_iter()
                .map(|d| MachineDayEarnings {
                    day: instant(d.day),
                    day_utc: d.day,
                    machine_id: d.machine_id.map(Into::into),
                    gpu_model: d.gpu_model,
                    seconds: d.seconds,
                    gross: d.gross,
                    fee: d.fee,
                    net: d.net,
                    downtime_credits: d.downtime_credits,
                    total: d.total,
                })
                .collect(),
            total_gross: e.total_gross,
            total_fee: e.total_fee,
            total_net: e.total_net,
            total_downtime_credits: e.total_downtime_credits,
            total: e.total,
        }
    }
}

/// `[from, to)`, checked before billing is asked (billing checks the bucket
/// count too).
pub(super) fn range(
    from: Option<String>,
    from_utc: Option<DateTime<Utc>>,
    to: Option<String>,
    to_utc: Option<DateTime<Utc>>,
) -> Result<(DateTime<Utc>, DateTime<Utc>), GatewayError> {
    let from = super::scalars::required_instant("from", from, "fromUtc", from_utc)?;
    let to = super::scalars::required_instant("to", to, "toUtc", to_utc)?;
    if to <= from {
        return Err(GatewayError::validation("to", "must be after from"));
    }
    Ok((from, to))
}

/// Whose data a dashboard shows: the caller's tenant, or, for an operator,
/// the one named. Anyone else naming another tenant is refused, not shown
/// an empty dashboard.
async fn tenant(
    ctx: &Context<'_>,
    access: Access,
    named: Option<ID>,
) -> Result<Uuid, GatewayError> {
    let principal = auth::principal(ctx).await?;
    let named = named.map(|t| validate::id("tenantId", &t)).transpose()?;
    match named {
        Some(t) if t != principal.tenant_id => {
            Access::Operator.check(&principal).map_err(|_| {
                GatewayError::Forbidden(
                    "only operators may read another tenant's dashboards".into(),
                )
            })?;
            Ok(t)
        }
        _ => {
            access.check(&principal)?;
            Ok(principal.tenant_id.into())
        }
    }
}

#[derive(Default)]
pub struct DashboardsQuery;

#[Object]
impl DashboardsQuery {
    /// The balance's entries, newest first, each with the balance right
    /// after it (`first` at most 200; `after` an `endCursor`).
    #[graphql(complexity = "super::extensions::limits::EXPENSIVE_FIELD + child_complexity")]
    async fn balance_history(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        tenant_id: Option<ID>,
    ) -> GqlResult<BalanceHistory> {
        let tenant = tenant(ctx, Access::Billing, tenant_id).await?;
        let first = first.unwrap_or(DEFAULT_PAGE);
        if !(1..=MAX_PAGE).contains(&first) {
            return Err(GatewayError::validation(
                "first",
                format!("must be between 1 and {MAX_PAGE}"),
            )
            .into());
        }
        let page = clients::from_context(ctx)?
            .balance_history(
                tenant,
                &api::BalanceHistoryQuery {
                    first: Some(i64::from(first)),
                    after: after.filter(|a| !a.is_empty()),
                },
            )
            .await?;
        Ok(page.into())
    }

    /// Usage and spend per `bucket` (UTC) and key over `[from, to)` (RFC
    /// 3339; at most 2000 buckets). A ledger posting counts, whole, in the
    /// bucket its usage segment started in: the points add up exactly to
    /// the postings.
    #[graphql(complexity = "super::extensions::limits::EXPENSIVE_FIELD + child_complexity")]
    // A resolver's arguments are the GraphQL field's: one each.
    #[allow(clippy::too_many_arguments)]
    async fn usage_series(
        &self,
        ctx: &Context<'_>,
        bucket: UsageBucket,
        group_by: UsageGroupBy,
        #[graphql(deprecation = "a String: use `fromUtc`, a DateTime")] from: Option<String>,
        from_utc: Option<DateTime<Utc>>,
        #[graphql(deprecation = "a String: use `toUtc`, a DateTime")] to: Option<String>,
        to_utc: Option<DateTime<Utc>>,
        tenant_id: Option<ID>,
    ) -> GqlResult<UsageSeries> {
        let tenant = tenant(ctx, Access::Billing, tenant_id).await?;
        let (from, to) = range(from, from_utc, to, to_utc)?;
        let series = clients::from_context(ctx)?
            .usage_series(
                tenant,
                &api::UsageSeriesQuery {
                    bucket: bucket.into(),
                    group_by: group_by.into(),
                    from,
                    to,
                },
            )
            .await?;
        Ok(series.into())
    }

    /// A host's earnings per machine and UTC day over `[from, to)`: usage
    /// whose segment started in it, downtime credits posted in it.
    #[graphql(complexity = "super::extensions::limits::EXPENSIVE_FIELD + child_complexity")]
    async fn earnings_by_machine(
        &self,
        ctx: &Context<'_>,
        #[graphql(deprecation = "a String: use `fromUtc`, a DateTime")] from: Option<String>,
        from_utc: Option<DateTime<Utc>>,
        #[graphql(deprecation = "a String: use `toUtc`, a DateTime")] to: Option<String>,
        to_utc: Option<DateTime<Utc>>,
        tenant_id: Option<ID>,
    ) -> GqlResult<MachineEarnings> {
        let tenant = tenant(ctx, Access::Host, tenant_id).await?;
        let (from, to) = range(from, from_utc, to, to_utc)?;
        let earnings = clients::from_context(ctx)?
            .machine_earnings(tenant, &api::MachineEarningsQuery { from, to })
            .await?;
        Ok(earnings.into())
    }
}
