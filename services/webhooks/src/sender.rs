//! The sender: claims due deliveries, signs and posts them, logs each
//! attempt and schedules the next. It wakes on the commit that made a
//! delivery due and polls slowly besides, so a lost notification only
//! delays a delivery.

use contracts::ids::TenantId;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use contracts::webhooks::EventType;
use platform::{Config, Db};
use tokio::sync::{Notify, Semaphore};
use tracing::Instrument;

use crate::deliveries::{self, After, Due, Outcome};
use crate::egress::{self, Policy};
use crate::signature::{SigningSecret, signature_header};
use crate::{Error, Settings};

/// The most of a response body read; the log keeps its first 1 KiB.
const READ_LIMIT: usize = 64 * 1024;
const HEAD: usize = 1024;

/// Runs the sender until the process ends.
pub async fn run(config: Arc<Config>, settings: Arc<Settings>, db: Db) -> Result<(), Error> {
    let policy = Policy {
        allow_local: settings.allow_local,
    };
    let client = egress::client(policy, settings.request_timeout)
        .map_err(|e| Error::Config(format!("the delivery client: {e}")))?;
    let wake = Arc::new(Notify::new());
    if config.listen_notifications {
        tokio::spawn(platform::notify::listen(
            platform::notify::Listener {
                url: config.database_url_for(crate::SCHEMA),
                channel: deliveries::CHANNEL.into(),
                check: Duration::from_millis(config.notification_check_ms),
            },
            wake.clone(),
        ));
    }
    let slots = Arc::new(Semaphore::new(settings.concurrency));
    // A sender holds a delivery for its whole request and a margin.
    let lease = settings.request_timeout + Duration::from_secs(5);
    loop {
        let free = slots.available_permits().max(1) as i64;
        let due = db
            .tx(move |conn| deliveries::claim_due(conn, free, lease))
            .await;
        let due = match due {
            Ok(due) => due,
            Err(error) => {
                tracing::warn!(%error, "webhook sender cannot claim deliveries");
                tokio::time::sleep(settings.poll).await;
                continue;
            }
        };
        let claimed = due.len();
        for d in due {
            let Ok(permit) = slots.clone().acquire_owned().await else {
                return Ok(());
            };
            let (db, settings, client) = (db.clone(), settings.clone(), client.clone());
            let span = tracing::info_span!(
                "webhook_delivery",
                delivery.id = %d.id,
                endpoint.id = %d.endpoint_id,
                tenant.id = %d.tenant_id,
                event.kind = %d.event_type,
                attempt = d.attempts + 1
            );
            tokio::spawn(
                async move {
                    let _permit = permit;
                    if let Err(error) = deliver(&db, &settings, &client, policy, d).await {
                        tracing::warn!(%error, "webhook delivery not recorded; it is sent again after its lease");
                    }
                }
                .instrument(span),
            );
        }
        if claimed == 0 {
            tokio::select! {
                _ = wake.notified() => {}
                _ = tokio::time::sleep(settings.poll) => {}
            }
        }
    }
}

/// One attempt of one delivery, logged.
async fn deliver(
    db: &Db,
    settings: &Settings,
    client: &reqwest::Client,
    policy: Policy,
    due: Due,
) -> Result<(), Error> {
    let outcome = if !due.enabled {
        Outcome {
            started_at: Utc::now(),
            status_code: None,
            latency: Duration::ZERO,
            response_head: String::new(),
            error: Some("endpoint disabled".into()),
        }
    } else {
        attempt(client, policy, &due).await
    };
    crate::metrics::attempt(outcome.status_code, outcome.succeeded(), outcome.latency);
    let schedule = if due.enabled {
        settings.schedule.clone()
    } else {
        Vec::new()
    };
    let after = {
        let outcome = outcome.clone();
        let due_id = due.id;
        let endpoint_id = due.endpoint_id;
        let tenant_id = due.tenant_id;
        db.tx(move |conn| -> Result<After, Error> {
            let after = deliveries::record(conn, &due, &outcome, &schedule)?;
            if after == After::Failed && due.enabled {
                give_up(conn, due_id, endpoint_id, tenant_id.into(), &outcome)?;
            }
            Ok(after)
        })
        .await?
    };
    tracing::info!(status = ?outcome.status_code, error = ?outcome.error, ?after, "webhook attempt");
    Ok(())
}

/// A delivery ran out of retries: when nothing reached the endpoint since
/// that delivery was made (about three days of failures), the endpoint is
/// disabled and the tenant's other endpoints are told.
fn give_up(
    conn: &mut diesel::PgConnection,
    delivery_id: uuid::Uuid,
    endpoint_id: uuid::Uuid,
    tenant_id: uuid::Uuid,
    outcome: &Outcome,
) -> Result<(), Error> {
    let Some(since) = deliveries::created_at(conn, delivery_id)? else {
        return Ok(());
    };
    if deliveries::succeeded_since(conn, endpoint_id, since)? {
        return Ok(());
    }
    let last = outcome
        .error
        .clone()
        .or_else(|| outcome.status_code.map(|s| format!("HTTP {s}")))
        .unwrap_or_default();
    let reason = format!(
        "every delivery failed since {}; last: {last}",
        since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    );
    if deliveries::disable(conn, endpoint_id, &reason)? {
        tracing::warn!(endpoint.id = %endpoint_id, %reason, "webhook endpoint disabled");
        crate::metrics::disabled();
        // The endpoint's own number (webhook ordering), taken under its row
        // lock, which `disable` holds.
        let sequence = platform::sequence::next(
            conn,
            crate::SCHEMA,
            &contracts::events::resource::endpoint(endpoint_id),
        )?;
        deliveries::fan_out(
            conn,
            TenantId(tenant_id),
            EventType::EndpointDisabled,
            Utc::now(),
            &serde_json::json!({
                "endpoint_id": endpoint_id,
                "tenant_id": tenant_id,
                "reason": reason,
                "sequence": sequence,
            }),
            None,
            Some(endpoint_id),
        )?;
    }
    Ok(())
}

/// Signs and posts the delivery; never fails, an error is the outcome.
async fn attempt(client: &reqwest::Client, policy: Policy, due: &Due) -> Outcome {
    let started_at = Utc::now();
    let clock = Instant::now();
    let failed = |error: String, clock: Instant| Outcome {
        started_at,
        status_code: None,
        latency: clock.elapsed(),
        response_head: String::new(),
        error: Some(error),
    };
    // The URL was checked when it was saved; the policy may have changed
    // since, and an address literal never reaches the guarded resolver.
    let url = match egress::check_form(&due.url, policy) {
        Ok(url) => url,
        Err(refusal) => return failed(refusal.to_string(), clock),
    };
    if let Some(ip) = egress::literal_ip(&url)
        && !policy.allows(ip)
    {
        return failed(egress::Refusal::Forbidden(ip).to_string(), clock);
    }
    let body = match serde_json::to_vec(&due.payload) {
        Ok(body) => body,
        Err(e) => return failed(e.to_string(), clock),
    };
    let secrets: Vec<SigningSecret> = std::iter::once(&due.secret)
        .chain(due.previous_secret.as_ref())
        .filter_map(|s| SigningSecret::parse(s))
        .collect();
    let id = deliveries::webhook_id(due.message_id);
    let timestamp = started_at.timestamp();
    let signature = signature_header(&secrets.iter().collect::<Vec<_>>(), &id, timestamp, &body);
    let sent = client
        .post(url)
        .header("content-type", "application/json")
        .header("webhook-id", &id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .body(body)
        .send()
        .await;
    let response = match sent {
        Ok(response) => response,
        Err(error) => return failed(describe(&error), clock),
    };
    let status = response.status().as_u16();
    let mut head = Vec::new();
    let mut read = 0usize;
    let mut response = response;
    let mut error = None;
    loop {
        match response.chunk().await {
            Ok(None) => break,
            Ok(Some(bytes)) => {
                if head.len() < HEAD {
                    head.extend_from_slice(&bytes[..bytes.len().min(HEAD - head.len())]);
                }
                read += bytes.len();
                if read >= READ_LIMIT {
                    break;
                }
            }
            Err(e) => {
                error = Some(describe(&e));
                break;
            }
        }
    }
    Outcome {
        started_at,
        status_code: Some(status),
        latency: clock.elapsed(),
        response_head: String::from_utf8_lossy(&head).into_owned(),
        error,
    }
}

/// A client error with its cause (a refused address says so).
fn describe(error: &reqwest::Error) -> String {
    let mut text = if error.is_timeout() {
        "timed out".to_owned()
    } else if error.is_connect() {
        "could not connect".to_owned()
    } else {
        "request failed".to_owned()
    };
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
