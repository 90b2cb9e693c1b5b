use actix_web::{HttpResponse, web};
use contracts::api::{CreateTopUpRequest, FundsCheckRequest, GrantCreditRequest};
use platform::Db;
use platform::internal::ServiceCaller;
use uuid::Uuid;

use crate::stripe::client::StripeApi;
use crate::stripe::{StripeSettings, topups, webhook};
use crate::{Error, Settings, usage};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/internal")
            .route("/balances/{tenant_id}", web::get().to(balance))
            .route("/credits", web::post().to(grant_credit))
            .route("/funds-checks", web::post().to(funds_check))
            .route("/earnings/{host_tenant_id}", web::get().to(earnings))
            .route("/top-ups", web::post().to(create_top_up))
            .route("/top-ups/{tenant_id}", web::get().to(list_top_ups)),
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
