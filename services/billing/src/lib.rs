//! Billing owns money: a double-entry ledger (accounts, immutable postings
//! with client-chosen ids, balance enforced by the database), renters'
//! balances and hosts' earnings. Usage is rated here with the price snapshot
//! it carries: `round_half_even(seconds × price_per_hour / 3600, 9)`, split
//! into the host's share and the platform fee so that every posting balances
//! exactly. Renters are prepaid: they top up through Stripe (`stripe`).
//! Reserved blocks are paid up front into escrow and released to the host
//! as they run (`escrow`).

mod charges;
pub mod dashboards;
pub mod error;
pub mod escrow;
pub mod escrow_kinds;
mod events;
pub mod focus;
mod ingest;
pub mod invoices;
pub mod ledger;
pub mod marketplace;
mod metrics;
pub mod payouts;
mod rating;
mod routes;
pub mod schedule;
pub mod settings;
pub mod spend;
pub mod statements;
pub mod stripe;
mod usage;

use std::sync::Arc;

use platform::{Config, Db};
use rust_decimal::Decimal;

pub use error::Error;
pub use ingest::apply_batch;
pub use settings::BillingSettings;
pub use usage::apply_event;

pub const SCHEMA: &str = "billing";

/// Billing's settings, checked once at start-up.
#[derive(Clone)]
pub struct Settings {
    pub fee_rate: Decimal,
    pub currency: String,
    /// Where billing's events (a renter's balance exhausted) are published.
    pub events_exchange: String,
    /// Credit per second of a lost host's downtime, as a multiple of the
    /// rental's hourly rate.
    pub downtime_credit_multiple: Decimal,
}

impl Settings {
    pub fn from_config(config: &Config) -> Result<Self, Error> {
        let billing = config.settings::<BillingSettings>()?;
        let fee_rate: Decimal = billing.fee_rate.parse().map_err(|_| {
            Error::Validation(format!(
                "GPUMARKET_FEE_RATE: {:?} is not a decimal",
                billing.fee_rate
            ))
        })?;
        if fee_rate < Decimal::ZERO || fee_rate >= Decimal::ONE {
            return Err(Error::Validation(
                "GPUMARKET_FEE_RATE: must be in [0, 1)".into(),
            ));
        }
        Ok(Self {
            fee_rate,
            currency: config.currency.clone(),
            events_exchange: config.events_exchange.clone(),
            downtime_credit_multiple: parse_multiple(&billing.downtime_credit_multiple)?,
        })
    }
}

fn parse_multiple(raw: &str) -> Result<Decimal, Error> {
    match raw.parse::<Decimal>() {
        Ok(m) if m >= Decimal::ZERO && m <= Decimal::from(100) => Ok(m),
        _ => Err(Error::Validation(format!(
            "GPUMARKET_DOWNTIME_CREDIT_MULTIPLE: {raw:?} is not a decimal in [0, 100]"
        ))),
    }
}

/// Starts the billing service's HTTP API; returns the server and its port.
pub fn build(config: Arc<Config>, db: Db) -> Result<(actix_web::dev::Server, u16), Error> {
    let settings = actix_web::web::Data::new(Settings::from_config(&config)?);
    let stripe_settings = actix_web::web::Data::new(stripe::StripeSettings::from_config(&config)?);
    let stripe_api = actix_web::web::Data::new(stripe::client::StripeApi::from_config(&config)?);
    let invoice_period = actix_web::web::Data::new(invoices::InvoicePeriod::parse(
        &config.settings::<BillingSettings>()?.invoice_period,
    )?);
    let payout_settings = actix_web::web::Data::new(payouts::PayoutSettings::from_config(&config)?);
    let connect_api = actix_web::web::Data::new(stripe::connect::ConnectApi::from_config(&config)?);
    let escrow_terms = actix_web::web::Data::new(escrow::EscrowTerms::from_config(&config)?);
    let escrow_peers = actix_web::web::Data::new(escrow::EscrowPeers::from_config(&config));
    Ok(platform::http::serve_named(
        "billing",
        &config.bind_host,
        config.ports.get("billing"),
        db,
        config.service_token.clone(),
        move |cfg| {
            cfg.app_data(settings.clone())
                .app_data(stripe_settings.clone())
                .app_data(stripe_api.clone())
                .app_data(invoice_period.clone())
                .app_data(payout_settings.clone())
                .app_data(connect_api.clone())
                .app_data(escrow_terms.clone())
                .app_data(escrow_peers.clone());
            routes::configure(cfg);
        },
    )?)
}

/// Consumes usage events forever (idempotently, through the inbox), a
/// prefetched batch per transaction.
pub async fn run_consumer(config: Arc<Config>, db: Db) -> Result<(), Error> {
    let settings = Settings::from_config(&config)?;
    let queue = config.settings::<BillingSettings>()?.queue.clone();
    platform::consumer::run_inbox_batch(config, db, queue, SCHEMA, move |conn, envelopes| {
        apply_batch(conn, envelopes, &settings)
    })
    .await;
    Ok(())
}

/// Pays hosts on billing's schedule (`GPUMARKET_PAYOUT_INTERVAL_SECS`);
/// never returns.
pub async fn run_payout_loop(config: Arc<Config>, db: Db) {
    payouts::run_loop(config, db).await;
}

// ---------------------------------------------------------------- service

/// This service, as the registry (`src/services.rs`) runs it.
pub struct BillingService;
pub static SERVICE: BillingService = BillingService;

impl platform::service::Service for BillingService {
    fn name(&self) -> &'static str {
        "billing"
    }

    fn secrets(&self) -> &'static [platform::config::Secret] {
        use platform::config::Secret;
        // And its own Stripe secrets ([`BillingSettings::development_secrets`]).
        &[Secret::ServiceToken, Secret::RabbitmqManagement]
    }

    fn default_port(&self) -> u16 {
        8085
    }

    fn development_secrets(
        &self,
        config: &Config,
    ) -> Result<Vec<&'static str>, platform::service::StartError> {
        let mut found = config.development_secrets(self.secrets());
        if config.production {
            found.extend(config.settings::<BillingSettings>()?.development_secrets());
        }
        Ok(found)
    }

    fn publishes(&self) -> &'static [&'static str] {
        use contracts::events::*;
        &[
            BALANCE_EXHAUSTED,
            INVOICE_FINALIZED,
            INVOICE_PAID,
            PAYOUT_FAILED,
            PAYOUT_PAID,
            RUNWAY_LOW,
            SPEND_CAP_REACHED,
            STATEMENT_FINALIZED,
            TOP_UP_SUCCEEDED,
        ]
    }

    fn queues(
        &self,
        config: &Config,
    ) -> Result<Vec<platform::broker::QueueSpec>, platform::service::StartError> {
        let settings = config.settings::<BillingSettings>()?;
        Ok(vec![
            platform::broker::QueueSpec::new(&settings.queue)
                .bind(&config.events_exchange, "metering.usage.*")
                // Downtime credits for rentals whose host went silent.
                .bind(
                    &config.events_exchange,
                    contracts::events::INSTANCE_DOWNTIME,
                ),
        ])
    }

    fn server(
        &self,
        config: Arc<Config>,
    ) -> Result<(actix_web::dev::Server, u16), platform::service::StartError> {
        let db = platform::service::pool(&config, SCHEMA)?;
        Ok(build(config, db)?)
    }

    fn tasks(
        &self,
        config: Arc<Config>,
    ) -> Result<Vec<platform::service::Task>, platform::service::StartError> {
        #[allow(unused_imports)]
        use platform::service::{Task, TaskKind, pool};
        Ok(vec![
            // Exhausted balances, top-ups, invoices and payouts leave
            // through its outbox.
            Task::new(
                "billing outbox relay",
                TaskKind::Messaging,
                platform::outbox::run_relay(pool(&config, SCHEMA)?, config.clone(), SCHEMA),
            ),
            Task::fallible(
                "billing consumer",
                TaskKind::Messaging,
                run_consumer(config.clone(), pool(&config, SCHEMA)?),
            ),
            // Monthly caps and low-runway warnings (billing::spend).
            Task::fallible(
                "billing spend watch",
                TaskKind::Messaging,
                spend::run_watch(config.clone(), pool(&config, SCHEMA)?),
            ),
            Task::fallible(
                "billing invoice schedule",
                TaskKind::Messaging,
                schedule::run_invoice_schedule(config.clone(), pool(&config, SCHEMA)?),
            ),
            // Reserved blocks' escrow, released as the blocks run
            // (escrow::release): a schedule of its own, like payouts.
            Task::fallible(
                "billing escrow release",
                TaskKind::Always,
                escrow::release::run_loop(config.clone(), pool(&config, SCHEMA)?),
            ),
            // The payout schedule (its first run is one interval away).
            Task::new(
                "billing payout loop",
                TaskKind::Always,
                run_payout_loop(config.clone(), pool(&config, SCHEMA)?),
            ),
        ])
    }
}
