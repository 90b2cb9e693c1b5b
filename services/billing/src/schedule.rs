//! The invoicing schedule: when a period has ended, every renter's invoice
//! and every host's statement for it are finalized without an operator
//! (`runInvoices` and `runStatements` remain for reruns and other ends). The run is idempotent and races safely with
//! other replicas (one invoice per tenant and period end, gapless numbers),
//! so each replica simply runs it whenever the period end it last ran for
//! is behind.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use contracts::api;
use platform::{Config, Db};
use tracing::Instrument;

use crate::invoices::{self, InvoicePeriod};
use crate::statements;
use crate::{Error, Settings};

/// The period end a run at `now` invoices, when it is newer than the last
/// one run for: the start of the current period (the end of the last
/// complete one).
pub fn due(
    period: InvoicePeriod,
    now: DateTime<Utc>,
    last_run_for: Option<DateTime<Utc>>,
) -> Option<DateTime<Utc>> {
    let end = period.start_of(now);
    match last_run_for {
        Some(last) if last >= end => None,
        _ => Some(end),
    }
}

/// Checks every `GPUMARKET_INVOICE_SCHEDULE_SECS` (0: never) and runs the
/// invoicing (invoices and statements) of a period that ended. At start-up it runs for the last
/// ended period (a no-op when it is done), so a restart across a period end
/// misses nothing.
pub async fn run_invoice_schedule(config: Arc<Config>, db: Db) -> Result<(), Error> {
    let billing = config.settings::<crate::BillingSettings>()?;
    if billing.invoice_schedule_secs == 0 {
        return Ok(());
    }
    let settings = Settings::from_config(&config)?;
    let period = InvoicePeriod::parse(&billing.invoice_period)?;
    let mut ticker = tokio::time::interval(Duration::from_secs(billing.invoice_schedule_secs));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_run_for = None;
    loop {
        ticker.tick().await;
        let Some(end) = due(period, Utc::now(), last_run_for) else {
            continue;
        };
        match run_period(&db, &settings, period, end)
            .instrument(tracing::info_span!("invoice_schedule", period_end = %end))
            .await
        {
            Ok((invoices, statements)) => {
                tracing::info!(period_end = %end, invoices, statements, "scheduled invoicing run done");
                last_run_for = Some(end);
            }
            // Tried again at the next check.
            Err(error) => {
                tracing::warn!(period_end = %end, %error, "scheduled invoicing run failed")
            }
        }
    }
}

/// Renters' invoices, then hosts' statements, for the period ending at
/// `end`; how many of each the run finalized (or found finalized).
async fn run_period(
    db: &Db,
    settings: &Settings,
    period: InvoicePeriod,
    end: DateTime<Utc>,
) -> Result<(usize, usize), Error> {
    let invoiced = invoices::run_invoices(
        db,
        settings,
        period,
        api::RunInvoicesRequest {
            period_end: Some(end),
            tenant_id: None,
        },
    )
    .await?;
    let stated = statements::run_statements(
        db,
        settings,
        period,
        api::RunStatementsRequest {
            period_end: Some(end),
            host_tenant_id: None,
        },
    )
    .await?;
    Ok((invoiced.invoices.len(), stated.statements.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(y: i32, m: u32, d: u32, h: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, m, d, h, 0, 0)
            .single()
            .expect("time")
    }

    #[test]
    fn a_period_is_due_once_after_it_ends() {
        let p = InvoicePeriod::Monthly;
        let dec1 = at(2026, 12, 1, 0);
        assert_eq!(due(p, at(2026, 12, 3, 9), None), Some(dec1));
        assert_eq!(due(p, at(2026, 12, 31, 23), Some(dec1)), None);
        assert_eq!(
            due(p, at(2027, 1, 1, 0), Some(dec1)),
            Some(at(2027, 1, 1, 0))
        );
    }
}
