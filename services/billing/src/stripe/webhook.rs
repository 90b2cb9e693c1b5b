//! `POST /webhooks/stripe`: Stripe's event deliveries. Public (Stripe holds
//! no service token); what makes a delivery believable is its signature.
//!
//! Order of work: verify the `Stripe-Signature` over the raw body bytes,
//! parse the event, then in one transaction record its id in the event inbox
//! and apply its effect. A forged, stale or malformed delivery is answered
//! 400 with nothing written. A redelivered event finds its id recorded and
//! changes nothing. `payment_intent.succeeded` posts a credit from payment
//! clearing to the renter's balance under the posting id
//! `top_up:<PaymentIntent id>`, so one PaymentIntent credits once even if
//! Stripe sent it under several event ids. Events billing does not act on
//! are recorded and answered 2xx, so Stripe stops resending them.

use std::collections::HashMap;

use actix_web::{HttpRequest, HttpResponse, web};
use diesel::prelude::*;
use platform::Db;
use schema::billing_stripe::{stripe_events, top_ups};
use serde::Deserialize;
use uuid::Uuid;

use super::minor_units;
use super::signature;
use super::{StripeSettings, topups};
use crate::ledger::{self, AccountKind, Posting};
use crate::{Error, Settings};

/// The parts of an event billing reads. Parsed loosely on purpose: Stripe
/// adds fields with every API version, and only these decide anything.
#[derive(Debug, Deserialize)]
struct Event {
    id: String,
    #[serde(rename = "type")]
    kind: String,
    data: EventData,
}

#[derive(Debug, Deserialize)]
struct EventData {
    object: serde_json::Value,
}

#[derive(Debug, Deserialize)]
struct PaymentIntentObject {
    id: String,
    #[serde(default)]
    amount_received: i64,
    currency: String,
    status: String,
    #[serde(default)]
    metadata: HashMap<String, String>,
}

/// What was done with a delivery (the 2xx answer's body, and a log field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Credited,
    /// The PaymentIntent had been credited under another event id.
    AlreadyCredited,
    StatusUpdated,
    /// The event id was seen before: nothing changed.
    Duplicate,
    /// Not an event billing acts on, or about a PaymentIntent that is not a
    /// top-up of ours.
    Ignored,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Credited => "credited",
            Outcome::AlreadyCredited => "already_credited",
            Outcome::StatusUpdated => "status_updated",
            Outcome::Duplicate => "duplicate",
            Outcome::Ignored => "ignored",
        }
    }
}

pub async fn receive(
    req: HttpRequest,
    body: web::Bytes,
    db: web::Data<Db>,
    settings: web::Data<Settings>,
    stripe: web::Data<StripeSettings>,
) -> Result<HttpResponse, Error> {
    let header = req
        .headers()
        .get(signature::HEADER)
        .map(|v| v.to_str().unwrap_or_default());
    let now = chrono::Utc::now().timestamp();
    let outcome = handle(&db, &settings, &stripe, header, &body, now)
        .await
        .inspect_err(|error| {
            if let Error::WebhookRejected(why) = error {
                tracing::warn!(%why, "Stripe webhook rejected");
            }
        })?;
    Ok(HttpResponse::Ok()
        .json(serde_json::json!({ "received": true, "outcome": outcome.as_str() })))
}

/// Verifies and applies one delivery; `now` is the verifier's clock (unix s).
pub async fn handle(
    db: &Db,
    settings: &Settings,
    stripe: &StripeSettings,
    header: Option<&str>,
    body: &[u8],
    now: i64,
) -> Result<Outcome, Error> {
    signature::verify(
        header,
        body,
        &stripe.webhook_secrets,
        stripe.tolerance_seconds,
        now,
    )?;
    let event: Event = serde_json::from_slice(body)
        .map_err(|e| Error::WebhookRejected(format!("not a Stripe event: {e}")))?;
    let intent = if event.kind.starts_with("payment_intent.") {
        Some(
            serde_json::from_value::<PaymentIntentObject>(event.data.object.clone()).map_err(
                |e| Error::WebhookRejected(format!("{}: not a PaymentIntent: {e}", event.kind)),
            )?,
        )
    } else {
        None
    };
    let settings = settings.clone();
    let (event_id, kind) = (event.id.clone(), event.kind.clone());
    let outcome = db
        .tx(move |conn| apply(conn, &event, intent.as_ref(), &settings))
        .await?;
    tracing::info!(stripe.event = %event_id, stripe.type = %kind, outcome = outcome.as_str(), "Stripe webhook");
    Ok(outcome)
}

fn apply(
    conn: &mut PgConnection,
    event: &Event,
    intent: Option<&PaymentIntentObject>,
    settings: &Settings,
) -> Result<Outcome, Error> {
    // The inbox row first: a concurrent delivery of the same event waits on
    // it and then finds it taken.
    let fresh = diesel::insert_into(stripe_events::table)
        .values((
            stripe_events::event_id.eq(&event.id),
            stripe_events::kind.eq(&event.kind),
            stripe_events::object_id.eq(intent.map(|i| i.id.as_str())),
            stripe_events::outcome.eq("pending"),
        ))
        .on_conflict_do_nothing()
        .execute(conn)?;
    if fresh == 0 {
        return Ok(Outcome::Duplicate);
    }
    let outcome = match (event.kind.as_str(), intent) {
        ("payment_intent.succeeded", Some(intent)) => credit(conn, intent, settings)?,
        (
            "payment_intent.processing"
            | "payment_intent.requires_action"
            | "payment_intent.payment_failed"
            | "payment_intent.canceled",
            Some(intent),
        ) => update_status(conn, intent)?,
        _ => Outcome::Ignored,
    };
    diesel::update(stripe_events::table.find(&event.id))
        .set(stripe_events::outcome.eq(outcome.as_str()))
        .execute(conn)?;
    Ok(outcome)
}

/// The top-up a PaymentIntent belongs to, locked: by its stored id, or, when
/// the webhook beat the create call's answer, by the metadata we put on it
/// (the tenant must agree too).
fn top_up_of(
    conn: &mut PgConnection,
    intent: &PaymentIntentObject,
) -> QueryResult<Option<topups::TopUpRow>> {
    let by_intent = top_ups::table
        .filter(top_ups::payment_intent_id.eq(&intent.id))
        .select(topups::TopUpRow::as_select())
        .for_update()
        .first(conn)
        .optional()?;
    if by_intent.is_some() {
        return Ok(by_intent);
    }
    let id = intent
        .metadata
        .get("top_up_id")
        .and_then(|v| Uuid::parse_str(v).ok());
    let tenant = intent
        .metadata
        .get("tenant_id")
        .and_then(|v| Uuid::parse_str(v).ok());
    let (Some(id), Some(tenant)) = (id, tenant) else {
        return Ok(None);
    };
    top_ups::table
        .find(id)
        .filter(top_ups::tenant_id.eq(tenant))
        .filter(top_ups::payment_intent_id.is_null())
        .select(topups::TopUpRow::as_select())
        .for_update()
        .first(conn)
        .optional()
}

fn credit(
    conn: &mut PgConnection,
    intent: &PaymentIntentObject,
    settings: &Settings,
) -> Result<Outcome, Error> {
    let currency = settings.currency.as_str();
    let Some(top_up) = top_up_of(conn, intent)? else {
        tracing::warn!(payment_intent = %intent.id, "succeeded PaymentIntent is not a top-up of ours");
        return Ok(Outcome::Ignored);
    };
    if !intent.currency.eq_ignore_ascii_case(currency) || intent.amount_received <= 0 {
        // Never credit a different currency as if it were ours; an operator
        // has to look at it.
        tracing::error!(
            payment_intent = %intent.id,
            currency = %intent.currency,
            amount_received = intent.amount_received,
            "succeeded PaymentIntent cannot be credited as a top-up"
        );
        return Ok(Outcome::Ignored);
    }
    // What Stripe collected is what the renter paid for.
    let amount = minor_units::from_minor(intent.amount_received, currency);
    if intent.amount_received != top_up.amount_minor {
        tracing::warn!(payment_intent = %intent.id, amount_received = intent.amount_received,
            requested = top_up.amount_minor, "top-up received a different amount than requested");
    }
    let renter = ledger::account(
        conn,
        AccountKind::RenterBalance,
        Some(top_up.tenant_id.into()),
        currency,
    )?;
    let clearing = ledger::account(conn, AccountKind::PaymentClearing, None, currency)?;
    let posting_id = format!("top_up:{}", intent.id);
    let description = format!("Stripe top-up {} ({})", top_up.id, intent.id);
    let posted = ledger::post(
        conn,
        &Posting {
            id: &posting_id,
            kind: "top_up",
            tenant_id: Some(top_up.tenant_id.into()),
            instance_id: None,
            fee_rate: None,
            description: &description,
            legs: &[(clearing, -amount), (renter, amount)],
        },
    )?;
    diesel::update(top_ups::table.find(top_up.id))
        .set((
            top_ups::payment_intent_id.eq(&intent.id),
            top_ups::status.eq("succeeded"),
            top_ups::failure_reason.eq(None::<String>),
            top_ups::succeeded_at.eq(Some(contracts::time::now())),
            top_ups::updated_at.eq(diesel::dsl::now),
        ))
        .execute(conn)?;
    if posted {
        crate::invoices::pay_open_invoices(conn, top_up.tenant_id, settings)?;
        let sequence = crate::spend::next_sequence(conn, top_up.tenant_id)?;
        crate::events::publish(
            conn,
            &settings.events_exchange,
            contracts::events::kinds::TOP_UP_SUCCEEDED,
            top_up.tenant_id,
            None,
            &contracts::events::TopUpSucceeded {
                tenant_id: top_up.tenant_id,
                top_up_id: top_up.id,
                amount,
                currency: currency.to_owned(),
                at: contracts::time::now(),
                sequence,
            },
        )?;
        tracing::info!(tenant.id = %top_up.tenant_id, top_up.id = %top_up.id, %amount, "top-up credited");
        Ok(Outcome::Credited)
    } else {
        Ok(Outcome::AlreadyCredited)
    }
}

fn update_status(conn: &mut PgConnection, intent: &PaymentIntentObject) -> Result<Outcome, Error> {
    let Some(top_up) = top_up_of(conn, intent)? else {
        return Ok(Outcome::Ignored);
    };
    // Events may arrive out of order: a credited top-up stays succeeded.
    if top_up.status == "succeeded" {
        return Ok(Outcome::Ignored);
    }
    diesel::update(top_ups::table.find(top_up.id))
        .set((
            top_ups::payment_intent_id.eq(&intent.id),
            top_ups::status.eq(&intent.status),
            top_ups::failure_reason.eq(None::<String>),
            top_ups::updated_at.eq(diesel::dsl::now),
        ))
        .execute(conn)?;
    Ok(Outcome::StatusUpdated)
}
