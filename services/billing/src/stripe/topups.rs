//! Creating and listing top-ups. The top-up row is written before Stripe is
//! called, under the caller's idempotency key; the PaymentIntent is created
//! under a Stripe idempotency key derived from the row's id. So a request
//! that dies between the two, or whose answer is lost, is repeated with the
//! same key and meets the same row and the same PaymentIntent.
//!
//! The client secret is not stored: it lets its holder pay, so it goes to
//! the caller of the create (and of its idempotent repeat, read back from
//! Stripe) and nowhere else.

use chrono::{DateTime, Utc};
use contracts::api;
use contracts::ids::TenantId;
use diesel::prelude::*;
use platform::Db;
use rust_decimal::Decimal;
use schema::billing_stripe::{stripe_customers, top_ups};
use uuid::Uuid;

use super::StripeSettings;
use super::client::{NewPaymentIntent, StripeApi};
use super::minor_units;
use crate::{Error, Settings};

/// The status of a top-up whose PaymentIntent Stripe has not yet confirmed.
pub const CREATING: &str = "creating";
/// The status of a top-up whose PaymentIntent could not be created (Stripe
/// unreachable or refusing); `failure_reason` says why. A retry with the same
/// idempotency key asks Stripe again under the same Stripe key.
pub const FAILED: &str = "failed";

const MAX_KEY_LEN: usize = 200;
const LIST_LIMIT: i64 = 100;

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = top_ups)]
pub struct TopUpRow {
    pub id: Uuid,
    pub tenant_id: TenantId,
    pub amount: Decimal,
    pub currency: String,
    pub amount_minor: i64,
    pub status: String,
    pub payment_intent_id: Option<String>,
    pub created_at: DateTime<Utc>,
    pub succeeded_at: Option<DateTime<Utc>>,
    pub failure_reason: Option<String>,
}

impl TopUpRow {
    fn into_api(self, client_secret: Option<String>) -> api::TopUp {
        api::TopUp {
            id: self.id,
            tenant_id: self.tenant_id,
            amount: self.amount,
            currency: self.currency,
            status: self.status,
            payment_intent_id: self.payment_intent_id,
            client_secret,
            created_at: self.created_at,
            succeeded_at: self.succeeded_at,
            failure_reason: self.failure_reason,
        }
    }
}

/// Checks a requested top-up amount; its value in minor units.
pub fn check_amount(
    amount: Decimal,
    currency: &str,
    limits: &StripeSettings,
) -> Result<i64, Error> {
    if amount < limits.min_amount || amount > limits.max_amount {
        return Err(Error::Validation(format!(
            "amount: must be between {} and {} {currency}",
            limits.min_amount, limits.max_amount
        )));
    }
    minor_units::to_minor(amount, currency)
}

pub async fn create(
    db: &Db,
    api: &StripeApi,
    settings: &Settings,
    limits: &StripeSettings,
    req: api::CreateTopUpRequest,
) -> Result<api::TopUp, Error> {
    let currency = settings.currency.clone();
    let amount_minor = check_amount(req.amount, &currency, limits)?;
    // Without a key no top-up can ever be created: say so before writing a
    // row that could only end failed.
    api.check_configured()?;
    let key = match req.idempotency_key {
        Some(key) if key.trim().is_empty() || key.chars().count() > MAX_KEY_LEN => {
            return Err(Error::Validation(format!(
                "idempotencyKey: 1 to {MAX_KEY_LEN} characters"
            )));
        }
        Some(key) => key,
        // No key: every call is a new top-up.
        None => Uuid::now_v7().to_string(),
    };
    let tenant_id = req.tenant_id;
    let amount = req.amount;
    let row = db
        .tx(move |conn| {
            diesel::insert_into(top_ups::table)
                .values((
                    top_ups::id.eq(Uuid::now_v7()),
                    top_ups::tenant_id.eq(tenant_id),
                    top_ups::idempotency_key.eq(&key),
                    top_ups::amount.eq(amount),
                    top_ups::currency.eq(&currency),
                    top_ups::amount_minor.eq(amount_minor),
                    top_ups::status.eq(CREATING),
                ))
                .on_conflict((top_ups::tenant_id, top_ups::idempotency_key))
                .do_nothing()
                .execute(conn)?;
            let row = top_ups::table
                .filter(top_ups::tenant_id.eq(tenant_id))
                .filter(top_ups::idempotency_key.eq(&key))
                .select(TopUpRow::as_select())
                .first(conn)?;
            Ok::<_, Error>(row)
        })
        .await?;
    if row.amount != amount || row.currency != settings.currency {
        return Err(Error::Conflict(format!(
            "idempotencyKey: already used for a top-up of {} {}",
            row.amount, row.currency
        )));
    }

    // A repeat of a create that reached Stripe: the same PaymentIntent.
    if let Some(intent_id) = row.payment_intent_id.clone() {
        let intent = api.retrieve_payment_intent(&intent_id).await?;
        return Ok(row.into_api(intent.client_secret));
    }

    let intent = match create_intent(db, api, &row).await {
        Ok(intent) => intent,
        Err(error) => {
            mark_failed(db, row.id, &error).await;
            return Err(error);
        }
    };
    let (top_up_id, intent_id, status) = (row.id, intent.id.clone(), intent.status.clone());
    let row = db
        .tx(move |conn| {
            // The webhook may have been first (it finds the row by the
            // PaymentIntent's metadata): never move a status backwards.
            diesel::update(top_ups::table.find(top_up_id))
                .filter(top_ups::payment_intent_id.is_null())
                .set((
                    top_ups::payment_intent_id.eq(&intent_id),
                    top_ups::status.eq(&status),
                    top_ups::failure_reason.eq(None::<String>),
                    top_ups::updated_at.eq(diesel::dsl::now),
                ))
                .execute(conn)?;
            Ok::<_, Error>(
                top_ups::table
                    .find(top_up_id)
                    .select(TopUpRow::as_select())
                    .first(conn)?,
            )
        })
        .await?;
    tracing::info!(top_up.id = %row.id, tenant.id = %tenant_id, payment_intent = %intent.id, "top-up created");
    Ok(row.into_api(intent.client_secret))
}

/// The PaymentIntent of a top-up row, creating the tenant's customer first.
async fn create_intent(
    db: &Db,
    api: &StripeApi,
    row: &TopUpRow,
) -> Result<super::client::PaymentIntentView, Error> {
    let customer_id = customer(db, api, row.tenant_id).await?;
    api.create_payment_intent(&NewPaymentIntent {
        top_up_id: row.id,
        tenant_id: row.tenant_id,
        customer_id: &customer_id,
        amount_minor: row.amount_minor,
        currency: &row.currency,
    })
    .await
}

/// What the renter's top-up listing says about a create that failed: the
/// answer the caller got, never the transport detail behind it.
fn failure_reason(error: &Error) -> String {
    match error {
        Error::PaymentProvider(_) => crate::error::PAYMENT_PROVIDER_UNAVAILABLE.to_owned(),
        Error::Validation(m) | Error::NotConfigured(m) => m.clone(),
        _ => "the top-up could not be created; try again with the same idempotencyKey".to_owned(),
    }
}

/// Ends a top-up whose PaymentIntent could not be created as `failed` (not
/// `creating`, which would say Stripe is still being asked). Never over a
/// row that meanwhile got its PaymentIntent (a concurrent retry, or the
/// webhook). Best effort: the caller gets the original error either way.
async fn mark_failed(db: &Db, top_up_id: Uuid, error: &Error) {
    let reason = failure_reason(error);
    let marked = db
        .run(move |conn| {
            Ok::<_, Error>(
                diesel::update(top_ups::table.find(top_up_id))
                    .filter(top_ups::payment_intent_id.is_null())
                    .set((
                        top_ups::status.eq(FAILED),
                        top_ups::failure_reason.eq(Some(&reason)),
                        top_ups::updated_at.eq(diesel::dsl::now),
                    ))
                    .execute(conn)?,
            )
        })
        .await;
    crate::metrics::top_up_failed();
    match marked {
        Ok(_) => tracing::warn!(top_up.id = %top_up_id, %error, "top-up failed"),
        Err(e) => {
            tracing::error!(top_up.id = %top_up_id, %error, db_error = %e, "top-up failed and could not be marked")
        }
    }
}

/// The tenant's Stripe customer, created on its first top-up. Concurrent
/// first top-ups send the same Stripe idempotency key and so get the same
/// customer; the row is written once.
async fn customer(db: &Db, api: &StripeApi, tenant_id: TenantId) -> Result<String, Error> {
    let known = db
        .run(move |conn| {
            Ok::<_, Error>(
                stripe_customers::table
                    .find(tenant_id)
                    .select(stripe_customers::customer_id)
                    .first::<String>(conn)
                    .optional()?,
            )
        })
        .await?;
    if let Some(id) = known {
        return Ok(id);
    }
    let created = api.create_customer(tenant_id).await?;
    db.run(move |conn| {
        diesel::insert_into(stripe_customers::table)
            .values((
                stripe_customers::tenant_id.eq(tenant_id),
                stripe_customers::customer_id.eq(&created),
            ))
            .on_conflict_do_nothing()
            .execute(conn)?;
        Ok::<_, Error>(
            stripe_customers::table
                .find(tenant_id)
                .select(stripe_customers::customer_id)
                .first::<String>(conn)?,
        )
    })
    .await
}

/// The tenant's latest top-ups, newest first, without client secrets.
pub async fn list(db: &Db, tenant_id: TenantId) -> Result<Vec<api::TopUp>, Error> {
    db.run(move |conn| {
        let rows = top_ups::table
            .filter(top_ups::tenant_id.eq(tenant_id))
            .order((top_ups::created_at.desc(), top_ups::id.desc()))
            .limit(LIST_LIMIT)
            .select(TopUpRow::as_select())
            .load(conn)?;
        Ok(rows.into_iter().map(|r| r.into_api(None)).collect())
    })
    .await
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use rust_decimal_macros::dec;

    use super::*;

    fn limits() -> StripeSettings {
        StripeSettings {
            webhook_secrets: vec![],
            tolerance_seconds: 300,
            min_amount: dec!(5),
            max_amount: dec!(10000),
        }
    }

    #[test]
    fn amounts_outside_the_limits_or_too_precise_are_refused_naming_the_field() {
        assert_eq!(check_amount(dec!(25.00), "USD", &limits()).unwrap(), 2500);
        for bad in [dec!(4.99), dec!(10000.01), dec!(0), dec!(-5), dec!(10.001)] {
            let error = check_amount(bad, "USD", &limits()).unwrap_err();
            assert!(error.to_string().starts_with("amount:"), "{bad}: {error}");
            assert_eq!(error.code(), contracts::ErrorCode::Validation);
        }
    }
}
