use actix_web::{HttpResponse, web};
use contracts::api::{
    CreateTopUpRequest, CreditNoteRequest, FundsCheckRequest, GrantCreditRequest, PlatformTerms,
    RunInvoicesRequest, UsageExport, VoidInvoiceRequest,
};
use platform::Db;
use platform::internal::ServiceCaller;
use uuid::Uuid;

use crate::invoices::InvoicePeriod;
use crate::stripe::client::StripeApi;
use crate::stripe::{StripeSettings, topups, webhook};
use crate::{Error, Settings, focus, invoices, usage};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/internal")
            .configure(configure_dashboards)
            .configure(configure_payouts)
            .route("/balances/{tenant_id}", web::get().to(balance))
            .route(
                "/marketplace/volume",
                web::get().to(crate::marketplace::volume_route),
            )
            .route(
                "/marketplace/credit-risks",
                web::get().to(crate::marketplace::credit_risks_route),
            )
            .route("/credits", web::post().to(grant_credit))
            .route("/funds-checks", web::post().to(funds_check))
            .route("/instance-charges", web::post().to(instance_charges))
            .route("/earnings/{host_tenant_id}", web::get().to(earnings))
            .route("/top-ups", web::post().to(create_top_up))
            .route("/top-ups/{tenant_id}", web::get().to(list_top_ups))
            .route("/platform-terms", web::get().to(platform_terms))
            .route("/invoices/run", web::post().to(run_invoices))
            // Before the tenant's routes of the same shape.
            .route(
                "/invoices/paid/{invoice_id}",
                web::post().to(mark_invoice_paid),
            )
            .route("/invoices/void/{invoice_id}", web::post().to(void_invoice))
            .route("/invoices/credit-notes", web::post().to(issue_credit_note))
            .route("/invoices/{tenant_id}", web::get().to(list_invoices))
            // Before `{invoice_id}`, which would not parse "preview".
            .route(
                "/invoices/{tenant_id}/preview",
                web::get().to(invoice_preview),
            )
            .route("/invoices/{tenant_id}/{invoice_id}", web::get().to(invoice))
            .route(
                "/invoices/{tenant_id}/{invoice_id}/usage.csv",
                web::get().to(invoice_usage_csv),
            ),
    );
    // Public: Stripe calls it (through the gateway or the ingress) and
    // proves itself by signature, not by the service token.
    cfg.route("/webhooks/stripe", web::post().to(webhook::receive));
}

type Reply = Result<HttpResponse, Error>;

async fn balance(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    path: web::Path<Uuid>,
) -> Reply {
    Ok(HttpResponse::Ok().json(usage::balance(&db, &s, path.into_inner()).await?))
}

async fn grant_credit(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    body: web::Json<GrantCreditRequest>,
) -> Reply {
    Ok(HttpResponse::Ok().json(usage::grant_credit(&db, &s, body.into_inner()).await?))
}

async fn funds_check(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    body: web::Json<FundsCheckRequest>,
) -> Reply {
    Ok(HttpResponse::Ok().json(usage::funds_check(&db, &s, body.into_inner()).await?))
}

async fn instance_charges(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    body: web::Json<contracts::api::InstanceChargesRequest>,
) -> Reply {
    let charges = crate::charges::instance_charges(&db, &s, body.into_inner()).await?;
    Ok(HttpResponse::Ok().json(charges))
}

async fn earnings(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    path: web::Path<Uuid>,
) -> Reply {
    Ok(HttpResponse::Ok().json(usage::earnings(&db, &s, path.into_inner()).await?))
}

async fn create_top_up(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    stripe: web::Data<StripeSettings>,
    api: web::Data<StripeApi>,
    body: web::Json<CreateTopUpRequest>,
) -> Reply {
    Ok(HttpResponse::Ok().json(topups::create(&db, &api, &s, &stripe, body.into_inner()).await?))
}

async fn list_top_ups(_: ServiceCaller, db: web::Data<Db>, path: web::Path<Uuid>) -> Reply {
    Ok(HttpResponse::Ok().json(topups::list(&db, path.into_inner()).await?))
}

/// The terms the gateway shows publicly; from billing's settings, so the
/// gateway never parses billing's configuration itself.
async fn platform_terms(_: ServiceCaller, s: web::Data<Settings>) -> HttpResponse {
    HttpResponse::Ok().json(PlatformTerms {
        currency: s.currency.clone(),
        fee_rate: s.fee_rate,
    })
}

async fn run_invoices(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    period: web::Data<InvoicePeriod>,
    body: web::Json<RunInvoicesRequest>,
) -> Reply {
    let run = invoices::run_invoices(&db, &s, **period, body.into_inner()).await?;
    Ok(HttpResponse::Ok().json(run))
}

async fn list_invoices(_: ServiceCaller, db: web::Data<Db>, path: web::Path<Uuid>) -> Reply {
    Ok(HttpResponse::Ok().json(invoices::list(&db, path.into_inner()).await?))
}

async fn invoice_preview(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    period: web::Data<InvoicePeriod>,
    path: web::Path<Uuid>,
) -> Reply {
    let now = chrono::Utc::now();
    let preview = invoices::preview(&db, &s, **period, path.into_inner(), now).await?;
    Ok(HttpResponse::Ok().json(preview))
}

/// Tenant and invoice: an invoice of another tenant is not found.
async fn invoice(_: ServiceCaller, db: web::Data<Db>, path: web::Path<(Uuid, Uuid)>) -> Reply {
    let (tenant_id, invoice_id) = path.into_inner();
    Ok(HttpResponse::Ok().json(invoices::get(&db, tenant_id, invoice_id).await?))
}

/// JSON around the CSV text: internal callers speak JSON only.
async fn invoice_usage_csv(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<(Uuid, Uuid)>,
) -> Reply {
    let (tenant_id, invoice_id) = path.into_inner();
    let invoice = invoices::get(&db, tenant_id, invoice_id).await?;
    Ok(HttpResponse::Ok().json(UsageExport {
        invoice_id,
        csv: focus::csv(&invoice),
    }))
}

async fn mark_invoice_paid(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    path: web::Path<Uuid>,
) -> Reply {
    Ok(HttpResponse::Ok().json(invoices::mark_paid(&db, &s, path.into_inner()).await?))
}

async fn void_invoice(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    path: web::Path<Uuid>,
    body: web::Json<VoidInvoiceRequest>,
) -> Reply {
    let invoice = invoices::void(&db, &s, path.into_inner(), body.into_inner().reason).await?;
    Ok(HttpResponse::Ok().json(invoice))
}

async fn issue_credit_note(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    body: web::Json<CreditNoteRequest>,
) -> Reply {
    Ok(HttpResponse::Ok().json(invoices::credit_note(&db, &s, body.into_inner()).await?))
}

/// The billing dashboards' reads (docs/dashboards.md), one tenant each.
fn configure_dashboards(cfg: &mut web::ServiceConfig) {
    cfg.route(
        "/dashboards/balance-history/{tenant_id}",
        web::get().to(balance_history),
    )
    .route("/dashboards/usage/{tenant_id}", web::get().to(usage_series))
    .route(
        "/dashboards/earnings/{host_tenant_id}",
        web::get().to(machine_earnings),
    );
}

async fn balance_history(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    path: web::Path<Uuid>,
    query: web::Query<contracts::api::BalanceHistoryQuery>,
) -> Reply {
    let page =
        crate::dashboards::balance_history(&db, &s, path.into_inner(), query.into_inner()).await?;
    Ok(HttpResponse::Ok().json(page))
}

async fn usage_series(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    path: web::Path<Uuid>,
    query: web::Query<contracts::api::UsageSeriesQuery>,
) -> Reply {
    let series =
        crate::dashboards::usage_series(&db, &s, path.into_inner(), query.into_inner()).await?;
    Ok(HttpResponse::Ok().json(series))
}

async fn machine_earnings(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    path: web::Path<Uuid>,
    query: web::Query<contracts::api::MachineEarningsQuery>,
) -> Reply {
    let earnings =
        crate::dashboards::machine_earnings(&db, &s, path.into_inner(), query.into_inner()).await?;
    Ok(HttpResponse::Ok().json(earnings))
}

// ---------------------------------------------------------------- host statements and payouts

fn configure_payouts(cfg: &mut web::ServiceConfig) {
    cfg.route("/statements/run", web::post().to(run_statements))
        .route(
            "/statements/{host_tenant_id}",
            web::get().to(list_statements),
        )
        // Before `{statement_id}`, which would not parse "preview".
        .route(
            "/statements/{host_tenant_id}/preview",
            web::get().to(statement_preview),
        )
        .route(
            "/statements/{host_tenant_id}/{statement_id}",
            web::get().to(statement),
        )
        .route("/payout-accounts", web::post().to(create_payout_account))
        .route(
            "/payout-accounts/{host_tenant_id}",
            web::get().to(payout_account),
        )
        .route(
            "/payout-accounts/{host_tenant_id}/onboarding-link",
            web::post().to(create_onboarding_link),
        )
        .route("/payouts/run", web::post().to(run_payouts))
        .route("/payouts/{host_tenant_id}", web::get().to(list_payouts));
}

async fn run_statements(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    period: web::Data<InvoicePeriod>,
    body: web::Json<contracts::api::RunStatementsRequest>,
) -> Reply {
    let run = crate::statements::run_statements(&db, &s, **period, body.into_inner()).await?;
    Ok(HttpResponse::Ok().json(run))
}

async fn list_statements(_: ServiceCaller, db: web::Data<Db>, path: web::Path<Uuid>) -> Reply {
    Ok(HttpResponse::Ok().json(crate::statements::list(&db, path.into_inner()).await?))
}

async fn statement_preview(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    period: web::Data<InvoicePeriod>,
    path: web::Path<Uuid>,
) -> Reply {
    let now = chrono::Utc::now();
    let preview = crate::statements::preview(&db, &s, **period, path.into_inner(), now).await?;
    Ok(HttpResponse::Ok().json(preview))
}

/// Host and statement: a statement of another host is not found.
async fn statement(_: ServiceCaller, db: web::Data<Db>, path: web::Path<(Uuid, Uuid)>) -> Reply {
    let (host, id) = path.into_inner();
    Ok(HttpResponse::Ok().json(crate::statements::get(&db, host, id).await?))
}

async fn create_payout_account(
    _: ServiceCaller,
    db: web::Data<Db>,
    api: web::Data<crate::stripe::connect::ConnectApi>,
    body: web::Json<contracts::api::CreatePayoutAccountRequest>,
) -> Reply {
    let account = crate::payouts::create_account(&db, &api, body.into_inner()).await?;
    Ok(HttpResponse::Ok().json(account))
}

async fn payout_account(
    _: ServiceCaller,
    db: web::Data<Db>,
    api: web::Data<crate::stripe::connect::ConnectApi>,
    path: web::Path<Uuid>,
) -> Reply {
    let account = crate::payouts::get_account(&db, &api, path.into_inner()).await?;
    Ok(HttpResponse::Ok().json(account))
}

async fn create_onboarding_link(
    _: ServiceCaller,
    db: web::Data<Db>,
    api: web::Data<crate::stripe::connect::ConnectApi>,
    path: web::Path<Uuid>,
    body: web::Json<contracts::api::OnboardingLinkRequest>,
) -> Reply {
    let link =
        crate::payouts::onboarding_link(&db, &api, path.into_inner(), body.into_inner()).await?;
    Ok(HttpResponse::Ok().json(link))
}

async fn run_payouts(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    p: web::Data<crate::payouts::PayoutSettings>,
    api: web::Data<crate::stripe::connect::ConnectApi>,
    body: web::Json<contracts::api::RunPayoutsRequest>,
) -> Reply {
    let run = crate::payouts::run_payouts(&db, &api, &s, &p, body.into_inner()).await?;
    Ok(HttpResponse::Ok().json(run))
}

async fn list_payouts(_: ServiceCaller, db: web::Data<Db>, path: web::Path<Uuid>) -> Reply {
    Ok(HttpResponse::Ok().json(crate::payouts::list(&db, path.into_inner()).await?))
}
