//! Renters' invoices: the caller's tenant's invoices and the preview of the
//! current period, the usage export in FinOps FOCUS columns, and the
//! operators' invoicing run. Billing answers for one tenant only (the one
//! in the caller's token): another tenant's invoice is NOT_FOUND.

use async_graphql::{Context, ID, Object, SimpleObject};
use chrono::{DateTime, Utc};
use contracts::api;
use contracts::endpoints;
use contracts::ids::{InvoiceId, TenantId};
use contracts::states::InvoiceStatus;
use contracts::states::Meter;
use rust_decimal::Decimal;

use super::instant;
use crate::auth::{self, Access};
use crate::clients;
use crate::error::{GatewayError, GqlResult};
use crate::validate;

/// One invoice line: an instance's usage of one meter at one hourly price,
/// the exact sum of its ledger postings rounded once (half-even) to the
/// currency's minor unit.
#[derive(SimpleObject)]
pub struct InvoiceLine {
    instance_id: ID,
    #[graphql(deprecation = "a String: use `meterKind`, a Meter")]
    meter: String,
    /// What is measured; null for usage posted before postings carried
    /// their meter (the old field says `unknown` there).
    meter_kind: Option<Meter>,
    /// The line's quantity in `unit`, corrections included.
    quantity: i64,
    /// What `quantity` counts: `second` (GPU time), `gib_second` (storage),
    /// `byte` (bandwidth).
    unit: String,
    /// The price per `pricingUnit` (all the rental's GPUs for GPU time).
    unit_price: Decimal,
    /// What `unitPrice` is per: `hour`, `gib_month` or `tb`.
    pricing_unit: String,
    /// `quantity` in pricing units (9 decimals): hours, GiB-months or TB.
    pricing_quantity: Decimal,
    #[graphql(deprecation = "the quantity in `unit` (seconds only for GPU lines): use `quantity`")]
    quantity_seconds: i64,
    #[graphql(
        deprecation = "the price per `pricingUnit` (per hour only for GPU lines): use `unitPrice`"
    )]
    unit_price_per_hour: Decimal,
    /// Usage from before this invoice's period that reached the ledger after
    /// that period's invoice was finalized (billed here as a delta).
    earlier_period: bool,
    #[graphql(deprecation = "a String: use `chargePeriodStartUtc`, a DateTime")]
    charge_period_start: String,
    charge_period_start_utc: DateTime<Utc>,
    #[graphql(deprecation = "a String: use `chargePeriodEndUtc`, a DateTime")]
    charge_period_end: String,
    charge_period_end_utc: DateTime<Utc>,
    /// Ledger postings summed into the line.
    postings: i32,
    /// The exact sum of the postings (9 decimals).
    exact_amount: Decimal,
    /// What is billed: `exactAmount` rounded to the minor unit.
    amount: Decimal,
}

impl From<api::InvoiceLine> for InvoiceLine {
    fn from(l: api::InvoiceLine) -> Self {
        let pricing_unit = contracts::meters::pricing_unit(&l.meter);
        let pricing_quantity = contracts::meters::pricing_quantity(&l.meter, l.quantity);
        Self {
            instance_id: l.instance_id.into(),
            meter_kind: Meter::parse(&l.meter),
            meter: l.meter,
            quantity: l.quantity,
            unit_price: l.unit_price_per_hour,
            pricing_unit: pricing_unit.to_owned(),
            pricing_quantity,
            quantity_seconds: l.quantity,
            unit: l.unit,
            unit_price_per_hour: l.unit_price_per_hour,
            earlier_period: l.earlier_period,
            charge_period_start: instant(l.charge_period_start),
            charge_period_start_utc: l.charge_period_start,
            charge_period_end: instant(l.charge_period_end),
            charge_period_end_utc: l.charge_period_end,
            postings: l.postings,
            exact_amount: l.exact_amount,
            amount: l.amount,
        }
    }
}

/// A refund or SLA credit against an invoice: numbered per tenant without
/// gaps, added to the renter's balance; the invoice itself never changes.
#[derive(SimpleObject)]
pub struct CreditNote {
    id: ID,
    invoice_id: ID,
    number: i64,
    amount: Decimal,
    currency: String,
    reason: String,
    #[graphql(deprecation = "a String: use `createdAtUtc`, a DateTime")]
    created_at: String,
    created_at_utc: DateTime<Utc>,
}

impl From<api::CreditNote> for CreditNote {
    fn from(c: api::CreditNote) -> Self {
        Self {
            id: c.id.into(),
            invoice_id: c.invoice_id.into(),
            number: c.number,
            amount: c.amount,
            currency: c.currency,
            reason: c.reason,
            created_at: instant(c.created_at),
            created_at_utc: c.created_at,
        }
    }
}

/// A finalized invoice: immutable, numbered per tenant without gaps; only its
/// status moves on (`finalized` → `paid` or `void`).
#[derive(SimpleObject)]
pub struct Invoice {
    id: ID,
    number: i64,
    /// `finalized` (open: the balance was overdrawn), `paid` or `void`.
    #[graphql(deprecation = "a String: use `state`, an InvoiceStatus")]
    status: String,
    /// `FINALIZED` (open: the balance was overdrawn), `PAID` or `VOID`.
    state: InvoiceStatus,
    #[graphql(deprecation = "a String: use `periodStartUtc`, a DateTime")]
    period_start: String,
    period_start_utc: DateTime<Utc>,
    #[graphql(deprecation = "a String: use `periodEndUtc`, a DateTime")]
    period_end: String,
    period_end_utc: DateTime<Utc>,
    currency: String,
    subtotal: Decimal,
    total: Decimal,
    /// The exact sum of the ledger postings; `total − exactTotal` went to the
    /// rounding account.
    exact_total: Decimal,
    rounding: Decimal,
    #[graphql(deprecation = "a String: use `finalizedAtUtc`, a DateTime")]
    finalized_at: Option<String>,
    finalized_at_utc: Option<DateTime<Utc>>,
    #[graphql(deprecation = "a String: use `paidAtUtc`, a DateTime")]
    paid_at: Option<String>,
    paid_at_utc: Option<DateTime<Utc>>,
    #[graphql(deprecation = "a String: use `voidedAtUtc`, a DateTime")]
    voided_at: Option<String>,
    voided_at_utc: Option<DateTime<Utc>>,
    void_reason: Option<String>,
    lines: Vec<InvoiceLine>,
    /// Refunds and credits against this invoice, oldest first.
    credit_notes: Vec<CreditNote>,
}

impl TryFrom<api::Invoice> for Invoice {
    type Error = GatewayError;

    fn try_from(i: api::Invoice) -> Result<Self, GatewayError> {
        let (Some(id), Some(number)) = (i.id, i.number) else {
            return Err(GatewayError::Internal(
                "billing returned an invoice without id or number".into(),
            ));
        };
        Ok(Self {
            id: id.into(),
            number,
            status: i.status.to_string(),
            state: i.status,
            period_start: instant(i.period_start),
            period_start_utc: i.period_start,
            period_end: instant(i.period_end),
            period_end_utc: i.period_end,
            currency: i.currency,
            subtotal: i.subtotal,
            total: i.total,
            exact_total: i.exact_total,
            rounding: i.rounding,
            finalized_at: i.finalized_at.map(instant),
            finalized_at_utc: i.finalized_at,
            paid_at: i.paid_at.map(instant),
            paid_at_utc: i.paid_at,
            voided_at: i.voided_at.map(instant),
            voided_at_utc: i.voided_at,
            void_reason: i.void_reason,
            lines: i.lines.into_iter().map(Into::into).collect(),
            credit_notes: i.credit_notes.into_iter().map(Into::into).collect(),
        })
    }
}

/// What the next invoice would hold if it were finalized now (usage not yet
/// on an invoice, including late usage of earlier periods). Not stored.
#[derive(SimpleObject)]
pub struct InvoicePreview {
    #[graphql(deprecation = "a String: use `periodStartUtc`, a DateTime")]
    period_start: String,
    period_start_utc: DateTime<Utc>,
    #[graphql(deprecation = "a String: use `periodEndUtc`, a DateTime")]
    period_end: String,
    period_end_utc: DateTime<Utc>,
    currency: String,
    total: Decimal,
    exact_total: Decimal,
    rounding: Decimal,
    lines: Vec<InvoiceLine>,
}

impl From<api::Invoice> for InvoicePreview {
    fn from(i: api::Invoice) -> Self {
        Self {
            period_start: instant(i.period_start),
            period_start_utc: i.period_start,
            period_end: instant(i.period_end),
            period_end_utc: i.period_end,
            currency: i.currency,
            total: i.total,
            exact_total: i.exact_total,
            rounding: i.rounding,
            lines: i.lines.into_iter().map(Into::into).collect(),
        }
    }
}

/// What an invoicing run finalized (or found finalized) for its period end.
#[derive(SimpleObject)]
pub struct InvoiceRun {
    #[graphql(deprecation = "a String: use `periodEndUtc`, a DateTime")]
    period_end: String,
    period_end_utc: DateTime<Utc>,
    invoices: Vec<Invoice>,
}

fn invoices(list: Vec<api::Invoice>) -> Result<Vec<Invoice>, GatewayError> {
    list.into_iter().map(Invoice::try_from).collect()
}

#[derive(Default)]
pub struct InvoicesQuery;

#[Object]
impl InvoicesQuery {
    /// The caller's tenant's invoices, newest first (at most 100).
    async fn invoices(&self, ctx: &Context<'_>) -> GqlResult<Vec<Invoice>> {
        let principal = auth::authorize(ctx, Access::Billing).await?;
        let list = clients::from_context(ctx)?
            .billing
            .call(endpoints::billing::INVOICE_LIST, principal.tenant_id, &())
            .await?;
        Ok(invoices(list)?)
    }

    /// One of the caller's tenant's invoices, with its lines.
    async fn invoice(&self, ctx: &Context<'_>, id: ID) -> GqlResult<Invoice> {
        let principal = auth::authorize(ctx, Access::Billing).await?;
        let id = validate::id("id", &id)?;
        let invoice = clients::from_context(ctx)?
            .billing
            .call(
                endpoints::billing::INVOICE,
                (principal.tenant_id, InvoiceId(id)),
                &(),
            )
            .await?;
        Ok(Invoice::try_from(invoice)?)
    }

    /// The current period's invoice as it stands: not stored, not numbered.
    async fn invoice_preview(&self, ctx: &Context<'_>) -> GqlResult<InvoicePreview> {
        let principal = auth::authorize(ctx, Access::Billing).await?;
        let preview = clients::from_context(ctx)?
            .billing
            .call(
                endpoints::billing::INVOICE_PREVIEW,
                principal.tenant_id,
                &(),
            )
            .await?;
        Ok(preview.into())
    }

    /// An invoice's usage as CSV (RFC 4180, CRLF) in FinOps FOCUS 1.0
    /// columns, one row per line; `BilledCost` adds up to the invoice total.
    async fn invoice_usage_csv(&self, ctx: &Context<'_>, invoice_id: ID) -> GqlResult<String> {
        let principal = auth::authorize(ctx, Access::Billing).await?;
        let invoice_id = validate::id("invoiceId", &invoice_id)?;
        let export = clients::from_context(ctx)?
            .billing
            .call(
                endpoints::billing::INVOICE_USAGE_CSV,
                (principal.tenant_id, InvoiceId(invoice_id)),
                &(),
            )
            .await?;
        Ok(export.csv)
    }
}

#[derive(Default)]
pub struct InvoicesMutation;

#[Object]
impl InvoicesMutation {
    /// Finalizes the invoices of the period ending at `periodEnd` (RFC 3339;
    /// default: the start of the current period) for every tenant with
    /// uninvoiced usage, or only `tenantId`. Running it again returns the
    /// same invoices. Operators only.
    async fn run_invoices(
        &self,
        ctx: &Context<'_>,
        #[graphql(deprecation = "a String: use `periodEndUtc`, a DateTime")] period_end: Option<
            String,
        >,
        period_end_utc: Option<DateTime<Utc>>,
        tenant_id: Option<ID>,
    ) -> GqlResult<InvoiceRun> {
        auth::authorize(ctx, Access::Operator).await?;
        let period_end =
            super::scalars::instant_arg("periodEnd", period_end, "periodEndUtc", period_end_utc)?;
        let tenant_id = tenant_id
            .map(|t| validate::id("tenantId", &t))
            .transpose()?;
        let run = clients::from_context(ctx)?
            .billing
            .call(
                endpoints::billing::INVOICES_RUN,
                (),
                &api::RunInvoicesRequest {
                    period_end,
                    tenant_id: tenant_id.map(TenantId),
                },
            )
            .await?;
        Ok(InvoiceRun {
            period_end: instant(run.period_end),
            period_end_utc: run.period_end,
            invoices: invoices(run.invoices)?,
        })
    }

    /// Marks an open invoice (finalized while the balance was overdrawn)
    /// paid once a top-up covered it; refused (`CONFLICT`) while the balance
    /// is still negative. Operators only.
    async fn mark_invoice_paid(&self, ctx: &Context<'_>, id: ID) -> GqlResult<Invoice> {
        auth::authorize(ctx, Access::Operator).await?;
        let id = validate::id("id", &id)?;
        let invoice = clients::from_context(ctx)?
            .billing
            .call(endpoints::billing::INVOICE_MARK_PAID, InvoiceId(id), &())
            .await?;
        Ok(Invoice::try_from(invoice)?)
    }

    /// Issues a credit note (a refund or SLA credit) of `amount` against an
    /// invoice, at most what is not credited yet: the renter's balance rises
    /// by it, the platform bears it. The same `idempotencyKey` returns the
    /// same note. Operators only.
    async fn issue_credit_note(
        &self,
        ctx: &Context<'_>,
        invoice_id: ID,
        amount: Decimal,
        reason: String,
        idempotency_key: String,
    ) -> GqlResult<CreditNote> {
        auth::authorize(ctx, Access::Operator).await?;
        let invoice_id = validate::id("invoiceId", &invoice_id)?;
        validate::money("amount", amount, contracts::bounds::CREDIT)?;
        validate::not_blank("reason", &reason)?;
        validate::idempotency_key("idempotencyKey", &idempotency_key)?;
        let note = clients::from_context(ctx)?
            .billing
            .call(
                endpoints::billing::CREDIT_NOTE_ISSUE,
                (),
                &api::CreditNoteRequest {
                    invoice_id: InvoiceId(invoice_id),
                    amount,
                    reason,
                    idempotency_key,
                },
            )
            .await?;
        Ok(note.into())
    }

    /// Voids an invoice: what is not credited yet is given back by a credit
    /// note and the status becomes `void`; its usage is never billed again.
    /// Operators only.
    async fn void_invoice(&self, ctx: &Context<'_>, id: ID, reason: String) -> GqlResult<Invoice> {
        auth::authorize(ctx, Access::Operator).await?;
        let id = validate::id("id", &id)?;
        validate::not_blank("reason", &reason)?;
        let invoice = clients::from_context(ctx)?
            .billing
            .call(
                endpoints::billing::INVOICE_VOID,
                InvoiceId(id),
                &api::VoidInvoiceRequest { reason },
            )
            .await?;
        Ok(Invoice::try_from(invoice)?)
    }
}
