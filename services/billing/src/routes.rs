use actix_web::{HttpResponse, web};
use contracts::api::{
    CreateTopUpRequest, CreditNoteRequest, FundsCheckRequest, GrantCreditRequest,
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
            .route("/balances/{tenant_id}", web::get().to(balance))
            .route("/credits", web::post().to(grant_credit))
            .route("/funds-checks", web::post().to(funds_check))
            .route("/earnings/{host_tenant_id}", web::get().to(earnings))
            .route("/top-ups", web::post().to(create_top_up))
            .route("/top-ups/{tenant_id}", web::get().to(list_top_ups))
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
