//! The Stripe calls billing makes, through async-stripe: find-or-create a
//! tenant's customer and create or read a top-up's PaymentIntent. Every
//! create carries an idempotency key derived from our own id, so a retry
//! after a lost answer gets the same Stripe object instead of a second one.

use contracts::ids::TenantId;
use std::collections::HashMap;
use std::time::Duration;

use platform::Config;
use stripe::{ClientBuilder, IdempotencyKey, RequestStrategy, StripeError, StripeRequest};
use stripe_core::customer::CreateCustomer;
use stripe_core::payment_intent::{
    CreatePaymentIntent, CreatePaymentIntentAutomaticPaymentMethods, RetrievePaymentIntent,
};
use uuid::Uuid;

use crate::Error;

/// A Stripe call that has not answered by then counts as unavailable.
const TIMEOUT: Duration = Duration::from_secs(20);

/// What billing keeps of a PaymentIntent.
#[derive(Debug, Clone)]
pub struct PaymentIntentView {
    pub id: String,
    pub status: String,
    pub client_secret: Option<String>,
}

/// What a top-up asks Stripe for.
pub struct NewPaymentIntent<'a> {
    pub top_up_id: Uuid,
    pub tenant_id: TenantId,
    pub customer_id: &'a str,
    pub amount_minor: i64,
    /// ISO code; Stripe wants it in lower case.
    pub currency: &'a str,
}

/// The async-stripe client every Stripe call of billing goes through (the
/// top-ups' and Connect's), pointed at `GPUMARKET_STRIPE_API_BASE`; `None`
/// without a secret key, so that the calls answer `NOT_CONFIGURED` rather
/// than sending a key Stripe can only refuse.
pub(crate) fn client_from_config(config: &Config) -> Result<Option<stripe::Client>, Error> {
    let settings = config.settings::<crate::BillingSettings>()?;
    if settings.stripe_secret_key.is_empty() {
        tracing::info!(
            "GPUMARKET_STRIPE_SECRET_KEY is empty: card top-ups and payouts are not configured"
        );
        return Ok(None);
    }
    // async-stripe appends `v1/...` to the base as given.
    let mut base = settings.stripe_api_base.clone();
    if !base.ends_with('/') {
        base.push('/');
    }
    ClientBuilder::new(settings.stripe_secret_key.expose())
        .url(base)
        .timeout(TIMEOUT)
        .app_info(
            "gpumarket",
            Some(env!("CARGO_PKG_VERSION").to_owned()),
            None,
        )
        .build()
        .map(Some)
        .map_err(|e| Error::Validation(format!("GPUMARKET_STRIPE_*: {e}")))
}

/// The client, or `NOT_CONFIGURED` when there is none.
pub(crate) fn configured(client: Option<&stripe::Client>) -> Result<&stripe::Client, Error> {
    client.ok_or_else(|| Error::NotConfigured(crate::error::PAYMENT_PROVIDER_NOT_CONFIGURED.into()))
}

/// Stripe refusing the secret key itself (401) is a configuration fault: no
/// retry helps until an operator fixes the key.
pub(crate) fn key_refused() -> Error {
    Error::NotConfigured(
        "card payments are not configured on this deployment: the payment provider \
         (Stripe) refused its secret key; ask the operator"
            .into(),
    )
}

#[derive(Clone)]
pub struct StripeApi {
    client: Option<stripe::Client>,
}

impl StripeApi {
    pub fn from_config(config: &Config) -> Result<Self, Error> {
        Ok(Self {
            client: client_from_config(config)?,
        })
    }

    /// Whether a secret key is configured: callers check it before writing
    /// anything, so an unconfigured deployment leaves no trace.
    pub fn check_configured(&self) -> Result<(), Error> {
        configured(self.client.as_ref()).map(|_| ())
    }

    /// Creates the Stripe customer of `tenant_id`; its id.
    pub async fn create_customer(&self, tenant_id: TenantId) -> Result<String, Error> {
        let customer = CreateCustomer::new()
            .description(format!("gpumarket tenant {tenant_id}"))
            .metadata(HashMap::from([(
                "tenant_id".to_owned(),
                tenant_id.to_string(),
            )]))
            .customize()
            .request_strategy(idempotent(&format!("gpumarket-customer-{tenant_id}"))?)
            .send(configured(self.client.as_ref())?)
            .await
            .map_err(provider_error)?;
        Ok(customer.id.to_string())
    }

    pub async fn create_payment_intent(
        &self,
        new: &NewPaymentIntent<'_>,
    ) -> Result<PaymentIntentView, Error> {
        let Ok(currency) = new
            .currency
            .to_ascii_lowercase()
            .parse::<stripe_types::Currency>();
        let intent = CreatePaymentIntent::new(new.amount_minor, currency)
            .customer(new.customer_id)
            .automatic_payment_methods(CreatePaymentIntentAutomaticPaymentMethods::new(true))
            .description(format!("gpumarket balance top-up {}", new.top_up_id))
            // The webhook finds the top-up by these even before the
            // PaymentIntent id was stored on our side.
            .metadata(HashMap::from([
                ("tenant_id".to_owned(), new.tenant_id.to_string()),
                ("top_up_id".to_owned(), new.top_up_id.to_string()),
            ]))
            .customize()
            .request_strategy(idempotent(&format!("gpumarket-top-up-{}", new.top_up_id))?)
            .send(configured(self.client.as_ref())?)
            .await
            .map_err(provider_error)?;
        Ok(view(intent))
    }

    pub async fn retrieve_payment_intent(&self, id: &str) -> Result<PaymentIntentView, Error> {
        let intent = RetrievePaymentIntent::new(id)
            .send(configured(self.client.as_ref())?)
            .await
            .map_err(provider_error)?;
        Ok(view(intent))
    }
}

fn view(intent: stripe_shared::PaymentIntent) -> PaymentIntentView {
    PaymentIntentView {
        id: intent.id.to_string(),
        status: intent.status.as_str().to_owned(),
        client_secret: intent.client_secret,
    }
}

fn idempotent(key: &str) -> Result<RequestStrategy, Error> {
    IdempotencyKey::new(key)
        .map(RequestStrategy::Idempotent)
        .map_err(|e| Error::Validation(format!("idempotency key: {e}")))
}

/// Stripe refusing our request for a reason the caller can act on (an amount
/// Stripe will not charge, say) is a validation error; everything else (no
/// answer, 5xx, 429, an answer we cannot parse) is the provider's trouble.
fn provider_error(error: StripeError) -> Error {
    match error {
        StripeError::Stripe(api, status) if status == 400 || status == 402 => {
            Error::Validation(format!(
                "amount: Stripe refused the payment: {}",
                api.message.as_deref().unwrap_or("no reason given")
            ))
        }
        StripeError::Stripe(_, 401) => key_refused(),
        other => Error::PaymentProvider(other.to_string()),
    }
}
