//! The serving end of [`contracts::endpoints`]: a route is registered from
//! its endpoint's method and path, and its handler must answer the
//! endpoint's reply type ([`Reply<R>`]), so a reply changed in `contracts`
//! is a compile error in the handler that still answers the old one.

use actix_web::body::BoxBody;
use actix_web::http::StatusCode;
use actix_web::{FromRequest, Handler, HttpRequest, HttpResponse, Responder, web};
use contracts::endpoints::{Endpoint, Method, PathParams};
use serde::Serialize;

/// A handler's answer: the endpoint's reply and the status it goes with.
pub struct Reply<R> {
    status: StatusCode,
    body: R,
}

impl<R> Reply<R> {
    /// 200 OK.
    pub fn ok(body: R) -> Self {
        Self {
            status: StatusCode::OK,
            body,
        }
    }

    /// 201 Created.
    pub fn created(body: R) -> Self {
        Self {
            status: StatusCode::CREATED,
            body,
        }
    }
}

impl<R: Serialize> Responder for Reply<R> {
    type Body = BoxBody;

    fn respond_to(self, _: &HttpRequest) -> HttpResponse {
        HttpResponse::build(self.status).json(&self.body)
    }
}

/// Registers `handler` at the endpoint's method and path. The handler
/// answers `Result<Reply<R>, E>` for the endpoint's `R`; anything else does
/// not compile.
pub fn route<P, B, R, H, Args, E>(
    cfg: &mut web::ServiceConfig,
    endpoint: Endpoint<P, B, R>,
    handler: H,
) where
    P: PathParams,
    R: Serialize + 'static,
    H: Handler<Args, Output = Result<Reply<R>, E>>,
    Args: FromRequest + 'static,
    E: Into<actix_web::Error> + 'static,
{
    let method = match endpoint.method {
        Method::Get => web::get(),
        Method::Post => web::post(),
        Method::Put => web::put(),
    };
    cfg.route(endpoint.path, method.to(handler));
}
