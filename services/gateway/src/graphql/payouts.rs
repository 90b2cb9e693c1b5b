//! Hosts' statements and payouts: the caller's host tenant's statements
//! (finalized, and the preview of the current period), its Stripe connected
//! account and its payouts; the operators' statement and payout runs.
//! Billing answers for one host only (the one in the caller's token):
//! another host's statement is NOT_FOUND.

use async_graphql::{Context, ID, Object, SimpleObject};
use chrono::{DateTime, Utc};
use contracts::api;
use contracts::endpoints;
use contracts::ids::{StatementId, TenantId};
use contracts::states::Meter;
use contracts::states::{PayoutStatus, StatementStatus};
use rust_decimal::Decimal;

use super::instant;
use crate::auth::{self, Access};
use crate::clients;
use crate::error::{GatewayError, GqlResult};
use crate::validate;

/// One statement line: one machine's usage of one meter, with the exact
/// sums (9 decimals) of its ledger postings.
#[derive(SimpleObject)]
pub struct StatementLine {
    /// None for usage recorded before machines were tracked on postings.
    machine_id: Option<ID>,
    gpu_model: Option<String>,
    #[graphql(deprecation = "a String: use `meterKind`, a Meter")]
    meter: String,
    /// What is measured; null for usage posted before postings carried
    /// their meter (the old field says `unknown` there).
    meter_kind: Option<Meter>,
    /// Usage of an earlier period that reached the ledger after that
    /// period's statement was finalized.
    earlier_period: bool,
    /// Whole seconds, corrections included.
    seconds: i64,
    /// What renters paid.
    gross: Decimal,
    /// The platform's fee.
    fee: Decimal,
    /// The host's earnings: `gross − fee`.
    net: Decimal,
    /// Downtime credits renters received from the host's earnings.
    downtime_credits: Decimal,
    /// `net − downtimeCredits`.
    amount: Decimal,
    /// Ledger postings on the line.
    postings: i32,
}

impl From<api::StatementLine> for StatementLine {
    fn from(l: api::StatementLine) -> Self {
        Self {
            machine_id: l.machine_id.map(Into::into),
            gpu_model: l.gpu_model,
            meter_kind: Meter::parse(&l.meter),
            meter: l.meter,
            earlier_period: l.earlier_period,
            seconds: l.seconds,
            gross: l.gross,
            fee: l.fee,
            net: l.net,
            downtime_credits: l.downtime_credits,
            amount: l.amount,
            postings: l.postings,
        }
    }
}

/// A host's statement of a period: what its machines earned, exactly as the
/// ledger's postings on its earnings account. A finalized statement is
/// numbered per host without gaps and never changes; a preview (`status`
/// `draft`) has neither id nor number.
#[derive(SimpleObject)]
pub struct Statement {
    id: Option<ID>,
    number: Option<i64>,
    /// `finalized`, or `draft` for the preview.
    #[graphql(deprecation = "a String: use `state`, a StatementStatus")]
    status: String,
    /// `FINALIZED`, or `DRAFT` for the preview.
    state: StatementStatus,
    #[graphql(deprecation = "a String: use `periodStartUtc`, a DateTime")]
    period_start: String,
    period_start_utc: DateTime<Utc>,
    #[graphql(deprecation = "a String: use `periodEndUtc`, a DateTime")]
    period_end: String,
    period_end_utc: DateTime<Utc>,
    currency: String,
    seconds: i64,
    gross: Decimal,
    fee: Decimal,
    net: Decimal,
    downtime_credits: Decimal,
    /// The sum of the lines: `net − downtimeCredits`.
    earnings: Decimal,
    /// Other postings on the earnings account.
    adjustments: Decimal,
    /// Payouts posted in this statement.
    payouts: Decimal,
    /// The earnings account after the previous statement.
    opening_balance: Decimal,
    /// `openingBalance + earnings + adjustments − payouts`.
    closing_balance: Decimal,
    #[graphql(deprecation = "a String: use `finalizedAtUtc`, a DateTime")]
    finalized_at: Option<String>,
    finalized_at_utc: Option<DateTime<Utc>>,
    lines: Vec<StatementLine>,
}

impl From<api::Statement> for Statement {
    fn from(s: api::Statement) -> Self {
        Self {
            id: s.id.map(Into::into),
            number: s.number,
            status: s.status.to_string(),
            state: s.status,
            period_start: instant(s.period_start),
            period_start_utc: s.period_start,
            period_end: instant(s.period_end),
            period_end_utc: s.period_end,
            currency: s.currency,
            seconds: s.seconds,
            gross: s.gross,
            fee: s.fee,
            net: s.net,
            downtime_credits: s.downtime_credits,
            earnings: s.earnings,
            adjustments: s.adjustments,
            payouts: s.payouts,
            opening_balance: s.opening_balance,
            closing_balance: s.closing_balance,
            finalized_at: s.finalized_at.map(instant),
            finalized_at_utc: s.finalized_at,
            lines: s.lines.into_iter().map(Into::into).collect(),
        }
    }
}

/// What a statement run finalized (or found finalized) for its period end.
#[derive(SimpleObject)]
pub struct StatementRun {
    #[graphql(deprecation = "a String: use `periodEndUtc`, a DateTime")]
    period_end: String,
    period_end_utc: DateTime<Utc>,
    statements: Vec<Statement>,
}

/// The host's Stripe connected account, where payouts are transferred.
#[derive(SimpleObject)]
pub struct PayoutAccount {
    stripe_account_id: String,
    country: String,
    email: Option<String>,
    /// The account's `transfers` capability at Stripe: `active`, `pending`,
    /// `inactive`. Payouts wait until it is `active`.
    transfers_status: String,
    payouts_enabled: bool,
    details_submitted: bool,
    #[graphql(deprecation = "a String: use `createdAtUtc`, a DateTime")]
    created_at: String,
    created_at_utc: DateTime<Utc>,
}

impl From<api::PayoutAccount> for PayoutAccount {
    fn from(a: api::PayoutAccount) -> Self {
        Self {
            stripe_account_id: a.stripe_account_id,
            country: a.country,
            email: a.email,
            transfers_status: a.transfers_status,
            payouts_enabled: a.payouts_enabled,
            details_submitted: a.details_submitted,
            created_at: instant(a.created_at),
            created_at_utc: a.created_at,
        }
    }
}

/// Where the web front ends are served (`GPUMARKET_PUBLIC_URL`).
pub struct PublicUrl(pub String);

/// A single-use link to Stripe's hosted onboarding of the host's connected
/// account; open it in the browser before `expiresAt`.
#[derive(SimpleObject)]
pub struct PayoutOnboardingLink {
    url: String,
    #[graphql(deprecation = "a String: use `expiresAtUtc`, a DateTime")]
    expires_at: String,
    expires_at_utc: DateTime<Utc>,
}

/// A transfer of earnings to the host's connected account.
#[derive(SimpleObject)]
pub struct Payout {
    id: ID,
    /// A whole number of the currency's minor units.
    amount: Decimal,
    currency: String,
    /// `pending` (Stripe not answered yet), `paid` or `failed`.
    #[graphql(deprecation = "a String: use `state`, a PayoutStatus")]
    status: String,
    /// `PENDING` (Stripe not answered yet), `PAID` or `FAILED`.
    state: PayoutStatus,
    stripe_account_id: String,
    stripe_transfer_id: Option<String>,
    /// The ledger posting (`payout:{id}`), once paid.
    posting_id: Option<String>,
    failure_reason: Option<String>,
    #[graphql(deprecation = "a String: use `createdAtUtc`, a DateTime")]
    created_at: String,
    created_at_utc: DateTime<Utc>,
    #[graphql(deprecation = "a String: use `paidAtUtc`, a DateTime")]
    paid_at: Option<String>,
    paid_at_utc: Option<DateTime<Utc>>,
}

impl From<api::Payout> for Payout {
    fn from(p: api::Payout) -> Self {
        Self {
            id: p.id.into(),
            amount: p.amount,
            currency: p.currency,
            status: p.status.to_string(),
            state: p.status,
            stripe_account_id: p.stripe_account_id,
            stripe_transfer_id: p.stripe_transfer_id,
            posting_id: p.transaction_id,
            failure_reason: p.failure_reason,
            created_at: instant(p.created_at),
            created_at_utc: p.created_at,
            paid_at: p.paid_at.map(instant),
            paid_at_utc: p.paid_at,
        }
    }
}

/// What a payout run did for one host.
#[derive(SimpleObject)]
pub struct PayoutOutcome {
    host_tenant_id: ID,
    /// `paid`, `failed`, `pending` (retried by the next run), `skipped` or
    /// `error`.
    outcome: String,
    /// What was available to pay (9 decimals).
    available: Decimal,
    payout: Option<Payout>,
    reason: Option<String>,
}

impl From<api::PayoutOutcome> for PayoutOutcome {
    fn from(o: api::PayoutOutcome) -> Self {
        Self {
            host_tenant_id: o.host_tenant_id.into(),
            outcome: o.outcome,
            available: o.available,
            payout: o.payout.map(Into::into),
            reason: o.reason,
        }
    }
}

#[derive(SimpleObject)]
pub struct PayoutRun {
    outcomes: Vec<PayoutOutcome>,
}

#[derive(Default)]
pub struct PayoutsQuery;

#[Object]
impl PayoutsQuery {
    /// The caller's host tenant's statements, newest first (at most 100).
    async fn statements(&self, ctx: &Context<'_>) -> GqlResult<Vec<Statement>> {
        let principal = auth::authorize(ctx, Access::Host).await?;
        let list = clients::from_context(ctx)?
            .billing
            .call(endpoints::billing::STATEMENT_LIST, principal.tenant_id, &())
            .await?;
        Ok(list.into_iter().map(Into::into).collect())
    }

    /// One of the caller's host tenant's statements, with its lines.
    async fn statement(&self, ctx: &Context<'_>, id: ID) -> GqlResult<Statement> {
        let principal = auth::authorize(ctx, Access::Host).await?;
        let id = validate::id("id", &id)?;
        let statement = clients::from_context(ctx)?
            .billing
            .call(
                endpoints::billing::STATEMENT,
                (principal.tenant_id, StatementId(id)),
                &(),
            )
            .await?;
        Ok(statement.into())
    }

    /// The current period's statement as it stands: not stored, not numbered.
    async fn statement_preview(&self, ctx: &Context<'_>) -> GqlResult<Statement> {
        let principal = auth::authorize(ctx, Access::Host).await?;
        let preview = clients::from_context(ctx)?
            .billing
            .call(
                endpoints::billing::STATEMENT_PREVIEW,
                principal.tenant_id,
                &(),
            )
            .await?;
        Ok(preview.into())
    }

    /// The caller's host tenant's payouts, newest first (at most 100).
    async fn payouts(&self, ctx: &Context<'_>) -> GqlResult<Vec<Payout>> {
        let principal = auth::authorize(ctx, Access::Host).await?;
        let list = clients::from_context(ctx)?
            .billing
            .call(endpoints::billing::PAYOUT_LIST, principal.tenant_id, &())
            .await?;
        Ok(list.into_iter().map(Into::into).collect())
    }

    /// The caller's host tenant's Stripe connected account (its state read
    /// from Stripe when Stripe answers); null when there is none yet.
    async fn payout_account(&self, ctx: &Context<'_>) -> GqlResult<Option<PayoutAccount>> {
        let principal = auth::authorize(ctx, Access::Host).await?;
        let result = clients::from_context(ctx)?
            .billing
            .call(endpoints::billing::PAYOUT_ACCOUNT, principal.tenant_id, &())
            .await;
        match result {
            Ok(account) => Ok(Some(account.into())),
            Err(e) if e.code == contracts::ErrorCode::NotFound => Ok(None),
            Err(e) => Err(GatewayError::from(e).into()),
        }
    }
}

#[derive(Default)]
pub struct PayoutsMutation;

#[Object]
impl PayoutsMutation {
    /// Creates the caller's host tenant's Stripe connected account (Express,
    /// with the `transfers` capability) to receive payouts. Calling it again
    /// returns the same account.
    async fn create_payout_account(
        &self,
        ctx: &Context<'_>,
        country: String,
        email: Option<String>,
    ) -> GqlResult<PayoutAccount> {
        let principal = auth::authorize(ctx, Access::Host).await?;
        validate::not_blank("country", &country)?;
        let account = clients::from_context(ctx)?
            .billing
            .call(
                endpoints::billing::PAYOUT_ACCOUNT_CREATE,
                (),
                &api::CreatePayoutAccountRequest {
                    host_tenant_id: principal.tenant_id,
                    country,
                    email,
                },
            )
            .await?;
        Ok(account.into())
    }

    /// A link to Stripe's hosted onboarding, where the host gives Stripe what
    /// payouts need (identity, bank account). Stripe sends the browser back
    /// to the portal's profile page (`?payouts=done`, or `?payouts=expired`
    /// for a stale link); the account's state is then read from Stripe.
    /// NOT_FOUND before `createPayoutAccount`.
    async fn create_payout_onboarding_link(
        &self,
        ctx: &Context<'_>,
    ) -> GqlResult<PayoutOnboardingLink> {
        let principal = auth::authorize(ctx, Access::Host).await?;
        let base = &ctx
            .data_opt::<PublicUrl>()
            .ok_or_else(|| GatewayError::Internal("public URL missing from schema data".into()))?
            .0;
        let page = format!("{base}/portal/profile");
        let link = clients::from_context(ctx)?
            .billing
            .call(
                endpoints::billing::PAYOUT_ONBOARDING_LINK,
                principal.tenant_id,
                &api::OnboardingLinkRequest {
                    return_url: format!("{page}?payouts=done"),
                    refresh_url: format!("{page}?payouts=expired"),
                },
            )
            .await?;
        Ok(PayoutOnboardingLink {
            url: link.url,
            expires_at: instant(link.expires_at),
            expires_at_utc: link.expires_at,
        })
    }

    /// Finalizes the host statements of the period ending at `periodEnd`
    /// (RFC 3339; default: the start of the current period) for every host
    /// with earnings not yet on a statement, or only `hostTenantId`. Running
    /// it again returns the same statements. Operators only.
    async fn run_statements(
        &self,
        ctx: &Context<'_>,
        #[graphql(deprecation = "a String: use `periodEndUtc`, a DateTime")] period_end: Option<
            String,
        >,
        period_end_utc: Option<DateTime<Utc>>,
        host_tenant_id: Option<ID>,
    ) -> GqlResult<StatementRun> {
        auth::authorize(ctx, Access::Operator).await?;
        let period_end =
            super::scalars::instant_arg("periodEnd", period_end, "periodEndUtc", period_end_utc)?;
        let host_tenant_id = host_tenant_id
            .map(|t| validate::id("hostTenantId", &t))
            .transpose()?;
        let run = clients::from_context(ctx)?
            .billing
            .call(
                endpoints::billing::STATEMENTS_RUN,
                (),
                &api::RunStatementsRequest {
                    period_end,
                    host_tenant_id: host_tenant_id.map(TenantId),
                },
            )
            .await?;
        Ok(StatementRun {
            period_end: instant(run.period_end),
            period_end_utc: run.period_end,
            statements: run.statements.into_iter().map(Into::into).collect(),
        })
    }

    /// Pays every host with a connected account (or only `hostTenantId`)
    /// whose available earnings reach the payout minimum, as billing's
    /// schedule does. Safe to repeat: a host is never paid twice for the same
    /// earnings. Operators only.
    async fn run_payouts(
        &self,
        ctx: &Context<'_>,
        host_tenant_id: Option<ID>,
    ) -> GqlResult<PayoutRun> {
        auth::authorize(ctx, Access::Operator).await?;
        let host_tenant_id = host_tenant_id
            .map(|t| validate::id("hostTenantId", &t))
            .transpose()?;
        let run = clients::from_context(ctx)?
            .billing
            .call(
                endpoints::billing::PAYOUTS_RUN,
                (),
                &api::RunPayoutsRequest {
                    host_tenant_id: host_tenant_id.map(TenantId),
                },
            )
            .await?;
        Ok(PayoutRun {
            outcomes: run.outcomes.into_iter().map(Into::into).collect(),
        })
    }
}
