use actix_web::{HttpResponse, web};
use platform::Db;
use platform::internal::ServiceCaller;
use serde::Deserialize;
use uuid::Uuid;

use crate::{Error, intervals};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(web::scope("/internal").route("/usage", web::get().to(usage)));
}

#[derive(Deserialize)]
struct UsageQuery {
    tenant_id: Uuid,
    instance_id: Option<Uuid>,
}

async fn usage(
    _: ServiceCaller,
    db: web::Data<Db>,
    q: web::Query<UsageQuery>,
) -> Result<HttpResponse, Error> {
    Ok(HttpResponse::Ok().json(intervals::usage(&db, q.tenant_id, q.instance_id).await?))
}
