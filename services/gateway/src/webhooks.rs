//! `POST /webhooks/stripe` on the public edge, forwarded to billing with the
//! raw body and the `Stripe-Signature` header unchanged: the signature
//! covers the exact bytes, so nothing here may parse or re-encode them.
//! Billing verifies and answers; its status and body go back to Stripe as
//! they are. (An ingress may route the path to billing directly instead.)

use actix_web::http::StatusCode;
use actix_web::http::header::CONTENT_TYPE;
use actix_web::{HttpRequest, HttpResponse, web};

const SIGNATURE_HEADER: &str = "stripe-signature";

pub struct StripeForward {
    http: reqwest::Client,
    url: String,
}

impl StripeForward {
    pub fn new(billing_base: &str) -> Self {
        Self {
            http: reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(30))
                .build()
                .unwrap_or_default(),
            url: format!("{}/webhooks/stripe", billing_base.trim_end_matches('/')),
        }
    }
}

pub async fn stripe(
    forward: web::Data<StripeForward>,
    req: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    let mut out = forward
        .http
        .post(&forward.url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_vec());
    if let Some(signature) = req.headers().get(SIGNATURE_HEADER)
        && let Ok(value) = reqwest::header::HeaderValue::from_bytes(signature.as_bytes())
    {
        out = out.header(SIGNATURE_HEADER, value);
    }
    let answer = match out.send().await {
        Ok(answer) => answer,
        Err(error) => {
            // Stripe retries any non-2xx delivery for days: say "later".
            tracing::warn!(%error, "billing unreachable for a Stripe webhook");
            return HttpResponse::ServiceUnavailable().json(
                serde_json::json!({ "code": "UNAVAILABLE", "message": "billing unavailable" }),
            );
        }
    };
    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    match answer.bytes().await {
        Ok(bytes) => HttpResponse::build(status)
            .insert_header((CONTENT_TYPE, "application/json"))
            .body(bytes.to_vec()),
        Err(_) => HttpResponse::BadGateway().finish(),
    }
}
