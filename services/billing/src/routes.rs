use actix_web::{HttpResponse, web};
use contracts::api::{FundsCheckRequest, GrantCreditRequest};
use platform::Db;
use platform::internal::ServiceCaller;
use uuid::Uuid;

use crate::{Error, Settings, usage};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/internal")
            .route("/balances/{tenant_id}", web::get().to(balance))
            .route("/credits", web::post().to(grant_credit))
            .route("/funds-checks", web::post().to(funds_check))
            .route("/earnings/{host_tenant_id}", web::get().to(earnings)),
    );
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
