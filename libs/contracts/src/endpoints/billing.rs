//! Billing's internal endpoints.

use super::Endpoint;
use crate::api::{
    Balance, BalanceHistoryPage, BalanceHistoryQuery, CreatePayoutAccountRequest,
    CreateTopUpRequest, CreditNote, CreditNoteRequest, FundsCheckRequest, GrantCreditRequest,
    HostEarnings, InstanceCharges, InstanceChargesRequest, Invoice, MachineEarnings,
    MachineEarningsQuery, OnboardingLink, OnboardingLinkRequest, Payout, PayoutAccount,
    PlatformTerms, RunInvoicesRequest, RunInvoicesResult, RunPayoutsRequest, RunPayoutsResult,
    RunStatementsRequest, RunStatementsResult, Statement, TopUp, UsageExport, UsageSeries,
    UsageSeriesQuery, VoidInvoiceRequest,
};
use crate::ids::{InvoiceId, ReservationId, StatementId, TenantId};
use crate::operator::{CreditRisks, MarketVolume, MarketVolumeQuery};
use crate::reservations::{
    Escrow, EscrowCancelRequest, EscrowChargeRequest, EscrowQuery, ResaleTransfer,
    ResaleTransferRequest, ReservationMoneyTerms,
};

// ---------------------------------------------------------------- dashboards

/// A page of a renter's balance history, newest first, with running balances.
pub const DASHBOARD_BALANCE_HISTORY: Endpoint<TenantId, BalanceHistoryQuery, BalanceHistoryPage> =
    Endpoint::get("/internal/dashboards/balance-history/{tenant_id}");

/// A renter's usage and spend per bucket and key over a range.
pub const DASHBOARD_USAGE: Endpoint<TenantId, UsageSeriesQuery, UsageSeries> =
    Endpoint::get("/internal/dashboards/usage/{tenant_id}");

/// A host's earnings per machine and day over a range.
pub const DASHBOARD_EARNINGS: Endpoint<TenantId, MachineEarningsQuery, MachineEarnings> =
    Endpoint::get("/internal/dashboards/earnings/{host_tenant_id}");

// ---------------------------------------------------------------- host statements and payouts

/// Finalizes the host statements of a period (every host, or one).
pub const STATEMENTS_RUN: Endpoint<(), RunStatementsRequest, RunStatementsResult> =
    Endpoint::post("/internal/statements/run");

/// A host's statements, newest first.
pub const STATEMENT_LIST: Endpoint<TenantId, (), Vec<Statement>> =
    Endpoint::get("/internal/statements/{host_tenant_id}");

/// A host's statement of the current period as it stands (not stored).
pub const STATEMENT_PREVIEW: Endpoint<TenantId, (), Statement> =
    Endpoint::get("/internal/statements/{host_tenant_id}/preview");

/// One of a host's statements; another host's is not found.
pub const STATEMENT: Endpoint<(TenantId, StatementId), (), Statement> =
    Endpoint::get("/internal/statements/{host_tenant_id}/{statement_id}");

/// Creates a host's Stripe connected account (again: the same account).
pub const PAYOUT_ACCOUNT_CREATE: Endpoint<(), CreatePayoutAccountRequest, PayoutAccount> =
    Endpoint::post("/internal/payout-accounts");

/// A host's Stripe connected account, its state read from Stripe.
pub const PAYOUT_ACCOUNT: Endpoint<TenantId, (), PayoutAccount> =
    Endpoint::get("/internal/payout-accounts/{host_tenant_id}");

/// A link to Stripe's hosted onboarding of a host's connected account.
pub const PAYOUT_ONBOARDING_LINK: Endpoint<TenantId, OnboardingLinkRequest, OnboardingLink> =
    Endpoint::post("/internal/payout-accounts/{host_tenant_id}/onboarding-link");

/// Pays every host with a connected account (or one) what is due.
pub const PAYOUTS_RUN: Endpoint<(), RunPayoutsRequest, RunPayoutsResult> =
    Endpoint::post("/internal/payouts/run");

/// A host's payouts, newest first.
pub const PAYOUT_LIST: Endpoint<TenantId, (), Vec<Payout>> =
    Endpoint::get("/internal/payouts/{host_tenant_id}");

// ---------------------------------------------------------------- balances, credits and charges

/// A renter's balance.
pub const BALANCE: Endpoint<TenantId, (), Balance> =
    Endpoint::get("/internal/balances/{tenant_id}");

/// The marketplace's volume and fees per bucket over a range (operators).
pub const MARKET_VOLUME: Endpoint<(), MarketVolumeQuery, MarketVolume> =
    Endpoint::get("/internal/marketplace/volume");

/// Renters out of credit or low on runway, lowest balance first (operators).
pub const CREDIT_RISKS: Endpoint<(), (), CreditRisks> =
    Endpoint::get("/internal/marketplace/credit-risks");

/// Grants credit to a tenant's balance (idempotent by key); the new balance.
pub const GRANT_CREDIT: Endpoint<(), GrantCreditRequest, Balance> =
    Endpoint::post("/internal/credits");

/// Checks that a renter's balance covers what an order needs; the balance.
pub const FUNDS_CHECK: Endpoint<(), FundsCheckRequest, Balance> =
    Endpoint::post("/internal/funds-checks");

/// What the ledger charged for each of a renter's instances named.
pub const INSTANCE_CHARGES: Endpoint<(), InstanceChargesRequest, Vec<InstanceCharges>> =
    Endpoint::post("/internal/instance-charges");

/// A host's earnings: the total and its latest postings.
pub const EARNINGS: Endpoint<TenantId, (), HostEarnings> =
    Endpoint::get("/internal/earnings/{host_tenant_id}");

/// Starts a card top-up (a Stripe PaymentIntent), idempotent by key.
pub const TOP_UP_CREATE: Endpoint<(), CreateTopUpRequest, TopUp> =
    Endpoint::post("/internal/top-ups");

/// A renter's latest top-ups, newest first.
pub const TOP_UP_LIST: Endpoint<TenantId, (), Vec<TopUp>> =
    Endpoint::get("/internal/top-ups/{tenant_id}");

/// The platform's money terms: settlement currency and fee rate.
pub const PLATFORM_TERMS: Endpoint<(), (), PlatformTerms> =
    Endpoint::get("/internal/platform-terms");

// ---------------------------------------------------------------- invoices

/// Finalizes the invoices of a period (every renter, or one).
pub const INVOICES_RUN: Endpoint<(), RunInvoicesRequest, RunInvoicesResult> =
    Endpoint::post("/internal/invoices/run");

/// Marks an open invoice paid once the balance covers it.
pub const INVOICE_MARK_PAID: Endpoint<InvoiceId, (), Invoice> =
    Endpoint::post("/internal/invoices/paid/{invoice_id}");

/// Voids an invoice, crediting back what is not credited yet.
pub const INVOICE_VOID: Endpoint<InvoiceId, VoidInvoiceRequest, Invoice> =
    Endpoint::post("/internal/invoices/void/{invoice_id}");

/// Issues a credit note against an invoice (idempotent by key).
pub const CREDIT_NOTE_ISSUE: Endpoint<(), CreditNoteRequest, CreditNote> =
    Endpoint::post("/internal/invoices/credit-notes");

/// A renter's invoices, newest first.
pub const INVOICE_LIST: Endpoint<TenantId, (), Vec<Invoice>> =
    Endpoint::get("/internal/invoices/{tenant_id}");

/// A renter's invoice of the current period as it stands (not stored).
pub const INVOICE_PREVIEW: Endpoint<TenantId, (), Invoice> =
    Endpoint::get("/internal/invoices/{tenant_id}/preview");

/// One of a renter's invoices; another renter's is not found.
pub const INVOICE: Endpoint<(TenantId, InvoiceId), (), Invoice> =
    Endpoint::get("/internal/invoices/{tenant_id}/{invoice_id}");

/// An invoice's usage as FinOps FOCUS CSV, wrapped in JSON.
pub const INVOICE_USAGE_CSV: Endpoint<(TenantId, InvoiceId), (), UsageExport> =
    Endpoint::get("/internal/invoices/{tenant_id}/{invoice_id}/usage.csv");

// ---------------------------------------------------------------- reserved capacity (issue 20)

/// Charges a reserved block into escrow (idempotent per reservation).
pub const ESCROW_CHARGE: Endpoint<(), EscrowChargeRequest, Escrow> =
    Endpoint::post("/internal/escrows");

/// Escrows of a renter or of a host, newest block first.
pub const ESCROW_LIST: Endpoint<(), EscrowQuery, Vec<Escrow>> = Endpoint::get("/internal/escrows");

/// One reservation's escrow.
pub const ESCROW: Endpoint<ReservationId, (), Escrow> =
    Endpoint::get("/internal/escrows/{reservation_id}");

/// Cancels an escrow: refunds what is not released (plus the host's penalty).
pub const ESCROW_CANCEL: Endpoint<ReservationId, EscrowCancelRequest, Escrow> =
    Endpoint::post("/internal/escrows/{reservation_id}/cancel");

/// A resale buyer pays the seller (idempotent per listing).
pub const RESALE_TRANSFER: Endpoint<(), ResaleTransferRequest, ResaleTransfer> =
    Endpoint::post("/internal/resale-transfers");

/// The published money terms of reservations.
pub const RESERVATION_TERMS: Endpoint<(), (), ReservationMoneyTerms> =
    Endpoint::get("/internal/reservation-terms");
