use actix_web::web;
use contracts::api::{
    Balance, BalanceHistoryPage, BalanceHistoryQuery, CreatePayoutAccountRequest,
    CreateTopUpRequest, CreditNote, CreditNoteRequest, FundsCheckRequest, GrantCreditRequest,
    HostEarnings, InstanceCharges, InstanceChargesRequest, Invoice, MachineEarnings,
    MachineEarningsQuery, OnboardingLink, OnboardingLinkRequest, Payout, PayoutAccount,
    PlatformTerms, RunInvoicesRequest, RunInvoicesResult, RunPayoutsRequest, RunPayoutsResult,
    RunStatementsRequest, RunStatementsResult, Statement, TopUp, UsageExport, UsageSeries,
    UsageSeriesQuery, VoidInvoiceRequest,
};
use contracts::endpoints::billing::{
    BALANCE, CREDIT_NOTE_ISSUE, CREDIT_RISKS, DASHBOARD_BALANCE_HISTORY, DASHBOARD_EARNINGS,
    DASHBOARD_USAGE, EARNINGS, FUNDS_CHECK, GRANT_CREDIT, INSTANCE_CHARGES, INVOICE, INVOICE_LIST,
    INVOICE_MARK_PAID, INVOICE_PREVIEW, INVOICE_USAGE_CSV, INVOICE_VOID, INVOICES_RUN,
    MARKET_VOLUME, PAYOUT_ACCOUNT, PAYOUT_ACCOUNT_CREATE, PAYOUT_LIST, PAYOUT_ONBOARDING_LINK,
    PAYOUTS_RUN, PLATFORM_TERMS, STATEMENT, STATEMENT_LIST, STATEMENT_PREVIEW, STATEMENTS_RUN,
    TOP_UP_CREATE, TOP_UP_LIST,
};
use contracts::endpoints::billing::{
    ESCROW, ESCROW_CANCEL, ESCROW_CHARGE, ESCROW_LIST, RESALE_TRANSFER, RESERVATION_TERMS,
};
use contracts::ids::{InvoiceId, ReservationId, StatementId, TenantId};
use contracts::reservations::{
    Escrow, EscrowCancelRequest, EscrowChargeRequest, EscrowQuery, ResaleTransfer,
    ResaleTransferRequest, ReservationMoneyTerms,
};
use platform::Db;
use platform::endpoint::{Reply, route};
use platform::internal::ServiceCaller;

use crate::escrow::{CatalogEvidence, EscrowPeers, EscrowTerms};
use crate::invoices::InvoicePeriod;
use crate::stripe::client::StripeApi;
use crate::stripe::{StripeSettings, topups, webhook};
use crate::{Error, Settings, focus, invoices, usage};

pub fn configure(cfg: &mut web::ServiceConfig) {
    configure_dashboards(cfg);
    configure_payouts(cfg);
    configure_reservations(cfg);
    route(cfg, BALANCE, balance);
    route(cfg, MARKET_VOLUME, crate::marketplace::volume_route);
    route(cfg, CREDIT_RISKS, crate::marketplace::credit_risks_route);
    route(cfg, GRANT_CREDIT, grant_credit);
    route(cfg, FUNDS_CHECK, funds_check);
    route(cfg, INSTANCE_CHARGES, instance_charges);
    route(cfg, EARNINGS, earnings);
    route(cfg, TOP_UP_CREATE, create_top_up);
    route(cfg, TOP_UP_LIST, list_top_ups);
    route(cfg, PLATFORM_TERMS, platform_terms);
    route(cfg, INVOICES_RUN, run_invoices);
    // Before the tenant's routes of the same shape.
    route(cfg, INVOICE_MARK_PAID, mark_invoice_paid);
    route(cfg, INVOICE_VOID, void_invoice);
    route(cfg, CREDIT_NOTE_ISSUE, issue_credit_note);
    route(cfg, INVOICE_LIST, list_invoices);
    // Before `{invoice_id}`, which would not parse "preview".
    route(cfg, INVOICE_PREVIEW, invoice_preview);
    route(cfg, INVOICE, invoice);
    route(cfg, INVOICE_USAGE_CSV, invoice_usage_csv);
    // Public: Stripe calls it (through the gateway or the ingress) and
    // proves itself by signature, not by the service token.
    cfg.route("/webhooks/stripe", web::post().to(webhook::receive));
}

async fn balance(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    path: web::Path<TenantId>,
) -> Result<Reply<Balance>, Error> {
    Ok(Reply::ok(usage::balance(&db, &s, path.into_inner()).await?))
}

async fn grant_credit(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    body: web::Json<GrantCreditRequest>,
) -> Result<Reply<Balance>, Error> {
    Ok(Reply::ok(
        usage::grant_credit(&db, &s, body.into_inner()).await?,
    ))
}

async fn funds_check(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    body: web::Json<FundsCheckRequest>,
) -> Result<Reply<Balance>, Error> {
    Ok(Reply::ok(
        usage::funds_check(&db, &s, body.into_inner()).await?,
    ))
}

async fn instance_charges(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    body: web::Json<InstanceChargesRequest>,
) -> Result<Reply<Vec<InstanceCharges>>, Error> {
    let charges = crate::charges::instance_charges(&db, &s, body.into_inner()).await?;
    Ok(Reply::ok(charges))
}

async fn earnings(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    path: web::Path<TenantId>,
) -> Result<Reply<HostEarnings>, Error> {
    Ok(Reply::ok(
        usage::earnings(&db, &s, path.into_inner()).await?,
    ))
}

async fn create_top_up(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    stripe: web::Data<StripeSettings>,
    api: web::Data<StripeApi>,
    body: web::Json<CreateTopUpRequest>,
) -> Result<Reply<TopUp>, Error> {
    Ok(Reply::ok(
        topups::create(&db, &api, &s, &stripe, body.into_inner()).await?,
    ))
}

async fn list_top_ups(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<TenantId>,
) -> Result<Reply<Vec<TopUp>>, Error> {
    Ok(Reply::ok(topups::list(&db, path.into_inner()).await?))
}

/// The terms the gateway shows publicly; from billing's settings, so the
/// gateway never parses billing's configuration itself.
async fn platform_terms(
    _: ServiceCaller,
    s: web::Data<Settings>,
) -> Result<Reply<PlatformTerms>, Error> {
    Ok(Reply::ok(PlatformTerms {
        currency: s.currency.clone(),
        fee_rate: s.fee_rate,
    }))
}

async fn run_invoices(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    period: web::Data<InvoicePeriod>,
    body: web::Json<RunInvoicesRequest>,
) -> Result<Reply<RunInvoicesResult>, Error> {
    let run = invoices::run_invoices(&db, &s, **period, body.into_inner()).await?;
    Ok(Reply::ok(run))
}

async fn list_invoices(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<TenantId>,
) -> Result<Reply<Vec<Invoice>>, Error> {
    Ok(Reply::ok(invoices::list(&db, path.into_inner()).await?))
}

async fn invoice_preview(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    period: web::Data<InvoicePeriod>,
    path: web::Path<TenantId>,
) -> Result<Reply<Invoice>, Error> {
    let now = chrono::Utc::now();
    let preview = invoices::preview(&db, &s, **period, path.into_inner(), now).await?;
    Ok(Reply::ok(preview))
}

/// Tenant and invoice: an invoice of another tenant is not found.
async fn invoice(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<(TenantId, InvoiceId)>,
) -> Result<Reply<Invoice>, Error> {
    let (tenant_id, invoice_id) = path.into_inner();
    Ok(Reply::ok(
        invoices::get(&db, tenant_id, invoice_id.into_uuid()).await?,
    ))
}

/// JSON around the CSV text: internal callers speak JSON only.
async fn invoice_usage_csv(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<(TenantId, InvoiceId)>,
) -> Result<Reply<UsageExport>, Error> {
    let (tenant_id, invoice_id) = path.into_inner();
    let invoice = invoices::get(&db, tenant_id, invoice_id.into_uuid()).await?;
    Ok(Reply::ok(UsageExport {
        invoice_id,
        csv: focus::csv(&invoice),
    }))
}

async fn mark_invoice_paid(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    path: web::Path<InvoiceId>,
) -> Result<Reply<Invoice>, Error> {
    Ok(Reply::ok(
        invoices::mark_paid(&db, &s, path.into_inner().into_uuid()).await?,
    ))
}

async fn void_invoice(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    path: web::Path<InvoiceId>,
    body: web::Json<VoidInvoiceRequest>,
) -> Result<Reply<Invoice>, Error> {
    let id = path.into_inner().into_uuid();
    let invoice = invoices::void(&db, &s, id, body.into_inner().reason).await?;
    Ok(Reply::ok(invoice))
}

async fn issue_credit_note(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    body: web::Json<CreditNoteRequest>,
) -> Result<Reply<CreditNote>, Error> {
    Ok(Reply::ok(
        invoices::credit_note(&db, &s, body.into_inner()).await?,
    ))
}

/// The billing dashboards' reads (docs/dashboards.md), one tenant each.
fn configure_dashboards(cfg: &mut web::ServiceConfig) {
    route(cfg, DASHBOARD_BALANCE_HISTORY, balance_history);
    route(cfg, DASHBOARD_USAGE, usage_series);
    route(cfg, DASHBOARD_EARNINGS, machine_earnings);
}

async fn balance_history(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    path: web::Path<TenantId>,
    query: web::Query<BalanceHistoryQuery>,
) -> Result<Reply<BalanceHistoryPage>, Error> {
    let tenant_id = path.into_inner().into_uuid();
    let page = crate::dashboards::balance_history(&db, &s, TenantId(tenant_id), query.into_inner())
        .await?;
    Ok(Reply::ok(page))
}

async fn usage_series(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    path: web::Path<TenantId>,
    query: web::Query<UsageSeriesQuery>,
) -> Result<Reply<UsageSeries>, Error> {
    let tenant_id = path.into_inner().into_uuid();
    let series =
        crate::dashboards::usage_series(&db, &s, TenantId(tenant_id), query.into_inner()).await?;
    Ok(Reply::ok(series))
}

async fn machine_earnings(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    path: web::Path<TenantId>,
    query: web::Query<MachineEarningsQuery>,
) -> Result<Reply<MachineEarnings>, Error> {
    let host_tenant_id = path.into_inner().into_uuid();
    let earnings =
        crate::dashboards::machine_earnings(&db, &s, TenantId(host_tenant_id), query.into_inner())
            .await?;
    Ok(Reply::ok(earnings))
}

// ---------------------------------------------------------------- host statements and payouts

fn configure_payouts(cfg: &mut web::ServiceConfig) {
    route(cfg, STATEMENTS_RUN, run_statements);
    route(cfg, STATEMENT_LIST, list_statements);
    // Before `{statement_id}`, which would not parse "preview".
    route(cfg, STATEMENT_PREVIEW, statement_preview);
    route(cfg, STATEMENT, statement);
    route(cfg, PAYOUT_ACCOUNT_CREATE, create_payout_account);
    route(cfg, PAYOUT_ACCOUNT, payout_account);
    route(cfg, PAYOUT_ONBOARDING_LINK, create_onboarding_link);
    route(cfg, PAYOUTS_RUN, run_payouts);
    route(cfg, PAYOUT_LIST, list_payouts);
}

async fn run_statements(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    period: web::Data<InvoicePeriod>,
    body: web::Json<RunStatementsRequest>,
) -> Result<Reply<RunStatementsResult>, Error> {
    let run = crate::statements::run_statements(&db, &s, **period, body.into_inner()).await?;
    Ok(Reply::ok(run))
}

async fn list_statements(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<TenantId>,
) -> Result<Reply<Vec<Statement>>, Error> {
    Ok(Reply::ok(
        crate::statements::list(&db, path.into_inner()).await?,
    ))
}

async fn statement_preview(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    period: web::Data<InvoicePeriod>,
    path: web::Path<TenantId>,
) -> Result<Reply<Statement>, Error> {
    let now = chrono::Utc::now();
    let host = path.into_inner().into_uuid();
    let preview = crate::statements::preview(&db, &s, **period, TenantId(host), now).await?;
    Ok(Reply::ok(preview))
}

/// Host and statement: a statement of another host is not found.
async fn statement(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<(TenantId, StatementId)>,
) -> Result<Reply<Statement>, Error> {
    let (host, id) = path.into_inner();
    Ok(Reply::ok(
        crate::statements::get(&db, host, id.into_uuid()).await?,
    ))
}

async fn create_payout_account(
    _: ServiceCaller,
    db: web::Data<Db>,
    api: web::Data<crate::stripe::connect::ConnectApi>,
    body: web::Json<CreatePayoutAccountRequest>,
) -> Result<Reply<PayoutAccount>, Error> {
    let account = crate::payouts::create_account(&db, &api, body.into_inner()).await?;
    Ok(Reply::ok(account))
}

async fn payout_account(
    _: ServiceCaller,
    db: web::Data<Db>,
    api: web::Data<crate::stripe::connect::ConnectApi>,
    path: web::Path<TenantId>,
) -> Result<Reply<PayoutAccount>, Error> {
    let host = path.into_inner().into_uuid();
    let account = crate::payouts::get_account(&db, &api, host).await?;
    Ok(Reply::ok(account))
}

async fn create_onboarding_link(
    _: ServiceCaller,
    db: web::Data<Db>,
    api: web::Data<crate::stripe::connect::ConnectApi>,
    path: web::Path<TenantId>,
    body: web::Json<OnboardingLinkRequest>,
) -> Result<Reply<OnboardingLink>, Error> {
    let host = path.into_inner().into_uuid();
    let link = crate::payouts::onboarding_link(&db, &api, host, body.into_inner()).await?;
    Ok(Reply::ok(link))
}

async fn run_payouts(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    p: web::Data<crate::payouts::PayoutSettings>,
    api: web::Data<crate::stripe::connect::ConnectApi>,
    body: web::Json<RunPayoutsRequest>,
) -> Result<Reply<RunPayoutsResult>, Error> {
    let run = crate::payouts::run_payouts(&db, &api, &s, &p, body.into_inner()).await?;
    Ok(Reply::ok(run))
}

async fn list_payouts(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<TenantId>,
) -> Result<Reply<Vec<Payout>>, Error> {
    Ok(Reply::ok(
        crate::payouts::list(&db, path.into_inner().into_uuid()).await?,
    ))
}

// ---------------------------------------------------------------- reserved capacity (issue 20)

fn configure_reservations(cfg: &mut web::ServiceConfig) {
    route(cfg, ESCROW_CHARGE, escrow_charge);
    route(cfg, ESCROW_LIST, escrow_list);
    route(cfg, ESCROW, escrow);
    route(cfg, ESCROW_CANCEL, escrow_cancel);
    route(cfg, RESALE_TRANSFER, resale_transfer);
    route(cfg, RESERVATION_TERMS, reservation_terms);
}

async fn escrow_charge(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    peers: web::Data<EscrowPeers>,
    body: web::Json<EscrowChargeRequest>,
) -> Result<Reply<Escrow>, Error> {
    let escrow = crate::escrow::charge::charge(&db, &s, &peers.quota, body.into_inner()).await?;
    Ok(Reply::ok(escrow))
}

async fn escrow_list(
    _: ServiceCaller,
    db: web::Data<Db>,
    query: web::Query<EscrowQuery>,
) -> Result<Reply<Vec<Escrow>>, Error> {
    Ok(Reply::ok(
        crate::escrow::list(&db, query.into_inner()).await?,
    ))
}

async fn escrow(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<ReservationId>,
) -> Result<Reply<Escrow>, Error> {
    Ok(Reply::ok(crate::escrow::get(&db, path.into_inner()).await?))
}

async fn escrow_cancel(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    terms: web::Data<EscrowTerms>,
    peers: web::Data<EscrowPeers>,
    path: web::Path<ReservationId>,
    body: web::Json<EscrowCancelRequest>,
) -> Result<Reply<Escrow>, Error> {
    let evidence = CatalogEvidence(peers.catalog.clone());
    let escrow = crate::escrow::cancel::cancel(
        &db,
        &s,
        &terms,
        &evidence,
        path.into_inner(),
        body.into_inner(),
        contracts::time::now(),
    )
    .await?;
    Ok(Reply::ok(escrow))
}

async fn resale_transfer(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    terms: web::Data<EscrowTerms>,
    peers: web::Data<EscrowPeers>,
    body: web::Json<ResaleTransferRequest>,
) -> Result<Reply<ResaleTransfer>, Error> {
    let transfer =
        crate::escrow::resale::transfer(&db, &s, &terms, &peers.quota, body.into_inner()).await?;
    Ok(Reply::ok(transfer))
}

/// The published money terms of reservations.
async fn reservation_terms(
    _: ServiceCaller,
    s: web::Data<Settings>,
    terms: web::Data<EscrowTerms>,
) -> Result<Reply<ReservationMoneyTerms>, Error> {
    Ok(Reply::ok(terms.published(&s)))
}
