//! The Stripe Connect calls of host payouts, through async-stripe: create and
//! read a host's connected account, and transfer earnings to it. Every create
//! carries an idempotency key derived from our own id, so a retry after a
//! lost answer (or a crash) gets the same Stripe object instead of a second
//! one: for a transfer, the same money is never sent twice.

use contracts::ids::TenantId;
use std::collections::HashMap;

use platform::Config;
use stripe::{IdempotencyKey, RequestStrategy, StripeError, StripeRequest};
use stripe_connect::account::{
    CreateAccount, CreateAccountCapabilities, CreateAccountCapabilitiesTransfers,
    CreateAccountType, RetrieveAccount,
};
use stripe_connect::account_link::{CreateAccountLink, CreateAccountLinkType};
use stripe_connect::transfer::{CreateTransfer, ListTransfer};
use uuid::Uuid;

use crate::Error;

/// What billing keeps of a connected account.
#[derive(Debug, Clone, PartialEq)]
pub struct AccountView {
    pub id: String,
    pub country: Option<String>,
    pub email: Option<String>,
    /// The `transfers` capability: `active`, `inactive`, `pending` (or
    /// `none` when Stripe reports no such capability).
    pub transfers_status: String,
    pub payouts_enabled: bool,
    pub details_submitted: bool,
}

/// A transfer of a payout to a host's connected account.
pub struct NewTransfer<'a> {
    pub payout_id: Uuid,
    pub host_tenant_id: TenantId,
    pub destination: &'a str,
    pub amount_minor: i64,
    /// ISO code; Stripe wants it in lower case.
    pub currency: &'a str,
}

/// Why a transfer was not made.
#[derive(Debug, Clone, PartialEq)]
pub enum TransferError {
    /// Stripe answered and refused it: retrying the same request cannot
    /// succeed, so the payout fails with this reason.
    Refused(String),
    /// No answer, or one that says nothing about the transfer (5xx, 429, a
    /// timeout, a body we cannot parse): the transfer may or may not exist,
    /// so the payout stays pending and is retried under the same key.
    Unavailable(String),
}

#[derive(Clone)]
pub struct ConnectApi {
    client: Option<stripe::Client>,
}

impl ConnectApi {
    pub fn from_config(config: &Config) -> Result<Self, Error> {
        Ok(Self {
            client: super::client::client_from_config(config)?,
        })
    }

    /// Creates the Express connected account of `host_tenant_id`, asking for
    /// the `transfers` capability. The key is the tenant's, so concurrent or
    /// repeated first calls make one account.
    pub async fn create_account(
        &self,
        host_tenant_id: TenantId,
        country: &str,
        email: Option<&str>,
    ) -> Result<AccountView, Error> {
        let capabilities = CreateAccountCapabilities {
            transfers: Some(CreateAccountCapabilitiesTransfers {
                requested: Some(true),
            }),
            ..CreateAccountCapabilities::new()
        };
        let mut create = CreateAccount::new()
            .type_(CreateAccountType::Express)
            .country(country)
            .capabilities(capabilities)
            .metadata(HashMap::from([(
                "host_tenant_id".to_owned(),
                host_tenant_id.to_string(),
            )]));
        if let Some(email) = email {
            create = create.email(email);
        }
        let account = create
            .customize()
            .request_strategy(idempotent(&format!(
                "gpumarket-connect-account-{host_tenant_id}"
            ))?)
            .send(super::client::configured(self.client.as_ref())?)
            .await
            .map_err(account_error)?;
        Ok(view(account))
    }

    pub async fn retrieve_account(&self, id: &str) -> Result<AccountView, Error> {
        let account = RetrieveAccount::new(id)
            .send(super::client::configured(self.client.as_ref())?)
            .await
            .map_err(account_error)?;
        Ok(view(account))
    }

    /// A link to Stripe's hosted onboarding of `account_id`, where the host
    /// gives Stripe what the `transfers` capability needs. Links are single
    /// use and short-lived, so none is stored and no idempotency key is sent.
    pub async fn create_onboarding_link(
        &self,
        account_id: &str,
        return_url: &str,
        refresh_url: &str,
    ) -> Result<(String, i64), Error> {
        let link = CreateAccountLink::new(account_id, CreateAccountLinkType::AccountOnboarding)
            .return_url(return_url)
            .refresh_url(refresh_url)
            .send(super::client::configured(self.client.as_ref())?)
            .await
            .map_err(link_error)?;
        Ok((link.url, link.expires_at))
    }

    /// Transfers a payout; the Stripe transfer's id. The idempotency key is
    /// the payout's: whoever retries a payout gets its one transfer back.
    pub async fn create_transfer(&self, new: &NewTransfer<'_>) -> Result<String, TransferError> {
        let Ok(currency) = new
            .currency
            .to_ascii_lowercase()
            .parse::<stripe_types::Currency>();
        let client = transfer_client(self.client.as_ref())?;
        let strategy = idempotent(&payout_key(new.payout_id))
            .map_err(|e| TransferError::Refused(e.to_string()))?;
        let transfer = CreateTransfer::new(currency, new.destination)
            .amount(new.amount_minor)
            .description(format!("gpumarket payout {}", new.payout_id))
            .transfer_group(transfer_group(new.payout_id))
            .metadata(HashMap::from([
                ("payout_id".to_owned(), new.payout_id.to_string()),
                ("host_tenant_id".to_owned(), new.host_tenant_id.to_string()),
            ]))
            .customize()
            .request_strategy(strategy)
            .send(client)
            .await
            .map_err(transfer_error)?;
        Ok(transfer.id.to_string())
    }

    /// The transfer an earlier attempt made for a payout, found by its
    /// transfer group. The idempotency key protects a retry only while Stripe
    /// keeps it (24 hours); this holds for as long as the transfer exists.
    /// Any error is `Unavailable`: not finding out is never a refusal.
    pub async fn find_transfer(&self, payout_id: Uuid) -> Result<Option<String>, TransferError> {
        let client = transfer_client(self.client.as_ref())?;
        let list = ListTransfer::new()
            .transfer_group(transfer_group(payout_id))
            .limit(1)
            .send(client)
            .await
            .map_err(|e| TransferError::Unavailable(e.to_string()))?;
        Ok(list.data.into_iter().next().map(|t| t.id.to_string()))
    }
}

/// Without a secret key nothing was sent: the payout stays pending until an
/// operator configures Stripe, then the next run pays it.
fn transfer_client(client: Option<&stripe::Client>) -> Result<&stripe::Client, TransferError> {
    client.ok_or_else(|| {
        TransferError::Unavailable("Stripe is not configured (GPUMARKET_STRIPE_SECRET_KEY)".into())
    })
}

/// The transfer group of a payout's transfer: how it is found again.
pub fn transfer_group(payout_id: Uuid) -> String {
    format!("payout_{payout_id}")
}

/// The Stripe idempotency key of a payout's transfer.
pub fn payout_key(payout_id: Uuid) -> String {
    format!("gpumarket-payout-{payout_id}")
}

fn view(account: stripe_shared::Account) -> AccountView {
    AccountView {
        id: account.id.to_string(),
        country: account.country,
        email: account.email,
        transfers_status: account
            .capabilities
            .and_then(|c| c.transfers)
            .map_or_else(|| "none".to_owned(), |s| s.as_str().to_owned()),
        payouts_enabled: account.payouts_enabled.unwrap_or(false),
        details_submitted: account.details_submitted.unwrap_or(false),
    }
}

fn idempotent(key: &str) -> Result<RequestStrategy, Error> {
    IdempotencyKey::new(key)
        .map(RequestStrategy::Idempotent)
        .map_err(|e| Error::Validation(format!("idempotency key: {e}")))
}

/// Stripe refusing an account (a country it does not support, say) is the
/// caller's to fix; everything else is the provider's trouble.
fn account_error(error: StripeError) -> Error {
    match error {
        StripeError::Stripe(api, 400) => Error::Validation(format!(
            "country: Stripe refused the account: {}",
            api.message.as_deref().unwrap_or("no reason given")
        )),
        StripeError::Stripe(api, 404) => Error::NotFound(format!(
            "Stripe account: {}",
            api.message.as_deref().unwrap_or("not found")
        )),
        StripeError::Stripe(_, 401) => super::client::key_refused(),
        other => Error::PaymentProvider(other.to_string()),
    }
}

fn link_error(error: StripeError) -> Error {
    match error {
        StripeError::Stripe(api, 400) => Error::Validation(format!(
            "Stripe refused the onboarding link: {}",
            api.message.as_deref().unwrap_or("no reason given")
        )),
        StripeError::Stripe(_, 401) => super::client::key_refused(),
        other => Error::PaymentProvider(other.to_string()),
    }
}

/// A 4xx other than 409 (a concurrent request with the same key still in
/// flight) and 429 (rate limited) is Stripe's final word on the request.
fn transfer_error(error: StripeError) -> TransferError {
    match error {
        // A refused key is the deployment's fault, not the transfer's: nothing
        // was made, and the next run retries once the key is fixed.
        StripeError::Stripe(_, 401) => {
            TransferError::Unavailable("Stripe refused the configured secret key".into())
        }
        StripeError::Stripe(api, status)
            if (400..500).contains(&status) && status != 409 && status != 429 =>
        {
            let message = api.message.as_deref().unwrap_or("no reason given");
            TransferError::Refused(match &api.code {
                Some(code) => format!("Stripe refused the transfer ({}): {message}", code.as_str()),
                None => format!("Stripe refused the transfer: {message}"),
            })
        }
        other => TransferError::Unavailable(other.to_string()),
    }
}
