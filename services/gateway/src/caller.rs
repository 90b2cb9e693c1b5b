//! Who is calling, settled before a request runs: its credential checked
//! (an invalid one is refused as a whole, never run as anonymous), failed
//! credentials and failed logins counted against the client address and the
//! account, and the number of expensive requests one caller runs at once.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use actix_web::HttpResponse;
use actix_web::http::header::RETRY_AFTER;
use contracts::ErrorCode;
use prometheus::IntCounterVec;
use sha2::{Digest, Sha256};

use crate::auth::{Credential, JwtKeys, RequestAuth};
use crate::clients::Clients;
use crate::error::GatewayError;
use crate::rate_limit::{RateLimiter, retry_after_seconds};

/// Invalid credentials one client address may send per minute before it is
/// answered 429: enough for a client whose token just expired to notice and
/// log in again, far too few to guess a key or a JWT.
const BAD_CREDENTIALS_PER_MINUTE: u32 = 30;

/// Failed logins per account, and per client address, per window. Every
/// login, right or wrong, is refused while either budget is spent:
/// otherwise a guesser would simply watch for the success.
const LOGIN_FAILURES_PER_ACCOUNT: u32 = 10;
const LOGIN_FAILURES_PER_ADDRESS: u32 = 30;
const LOGIN_WINDOW: Duration = Duration::from_secs(15 * 60);

/// Callers refused or counted here, by kind: `invalid_credential`,
/// `invalid_credential_throttled`, `login_failure`, `login_throttled`,
/// `concurrency_limited`.
static REFUSALS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    platform::metrics::register_counter(
        "gpumarket_gateway_caller_refusals_total",
        "Requests refused or failed for who sent them: invalid credentials, \
         failed logins, and the throttles and concurrency limit they hit",
        &["kind"],
    )
});

pub fn count_refusal(kind: &str) {
    REFUSALS.with_label_values(&[kind]).inc();
}

/// The request's client address, as request data for the login throttle.
#[derive(Debug, Clone)]
pub struct ClientAddress(pub String);

/// Who a request counts against for concurrency: its tenant when it is
/// authenticated, else its client address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallerKey(pub [u8; 32]);

impl CallerKey {
    pub fn tenant(tenant: uuid::Uuid) -> Self {
        let mut hash = Sha256::new();
        hash.update(b"tenant:");
        hash.update(tenant.as_bytes());
        Self(hash.finalize().into())
    }

    pub fn address(address: &str) -> Self {
        Self(RateLimiter::address_key(Some(address)))
    }
}

/// Failed logins, per account and per address (schema data).
pub struct LoginThrottle {
    account: RateLimiter,
    address: RateLimiter,
}

impl Default for LoginThrottle {
    fn default() -> Self {
        Self {
            account: RateLimiter::per_window(LOGIN_FAILURES_PER_ACCOUNT, LOGIN_WINDOW),
            address: RateLimiter::per_window(LOGIN_FAILURES_PER_ADDRESS, LOGIN_WINDOW),
        }
    }
}

impl LoginThrottle {
    /// RATE_LIMITED when the account or the address has no failure left.
    pub fn check(&self, email: &str, address: &str) -> Result<(), GatewayError> {
        let account = self.account.peek(RateLimiter::account_key(email));
        let address = self.address.peek(RateLimiter::address_key(Some(address)));
        match (account, address) {
            (Ok(()), Ok(())) => Ok(()),
            (Err(a), Err(b)) => Err(login_limited(a.max(b))),
            (Err(wait), _) | (_, Err(wait)) => Err(login_limited(wait)),
        }
    }

    /// Counts one failed login against both.
    pub fn failed(&self, email: &str, address: &str) {
        tracing::info!(address, "failed login");
        count_refusal("login_failure");
        // A spent bucket only means the next check refuses.
        let _ = self.account.check(RateLimiter::account_key(email));
        let _ = self.address.check(RateLimiter::address_key(Some(address)));
    }
}

fn login_limited(wait: Duration) -> GatewayError {
    count_refusal("login_throttled");
    GatewayError::RateLimited {
        what: "too many failed logins",
        retry_after_seconds: retry_after_seconds(wait),
    }
}

/// How many expensive requests each caller has running
/// (`crate::graphql::extensions::limits`).
#[derive(Default)]
pub struct ConcurrencyGate {
    running: Mutex<HashMap<CallerKey, usize>>,
}

/// One expensive request running; dropping it lets the next one in.
pub struct GatePass {
    gate: Arc<ConcurrencyGate>,
    key: CallerKey,
}

impl ConcurrencyGate {
    /// A pass if `key` has fewer than `max` running, else None.
    pub fn enter(self: &Arc<Self>, key: CallerKey, max: usize) -> Option<GatePass> {
        let mut running = self
            .running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = running.entry(key).or_default();
        if *count >= max {
            return None;
        }
        *count += 1;
        Some(GatePass {
            gate: self.clone(),
            key,
        })
    }
}

impl Drop for GatePass {
    fn drop(&mut self) {
        let mut running = self
            .gate
            .running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Emptied entries go, so the map holds only callers running now.
        if let Some(count) = running.get_mut(&self.key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                running.remove(&self.key);
            }
        }
    }
}

/// Invalid credentials per client address.
pub struct BadCredentials {
    limiter: RateLimiter,
}

impl Default for BadCredentials {
    fn default() -> Self {
        Self {
            limiter: RateLimiter::new(BAD_CREDENTIALS_PER_MINUTE, BAD_CREDENTIALS_PER_MINUTE),
        }
    }
}

/// The request's caller, its credential checked now: anonymous when it sent
/// none; an HTTP answer (401, or 429 once its address sent too many bad
/// ones) when the credential is invalid.
pub async fn identify(
    header: Option<&str>,
    address: &str,
    keys: &JwtKeys,
    clients: &Clients,
    bad: &BadCredentials,
) -> Result<(RequestAuth, CallerKey), HttpResponse> {
    let credential = Credential::from_header(header);
    if matches!(credential, Credential::None) {
        return Ok((RequestAuth::new(credential), CallerKey::address(address)));
    }
    let address_key = RateLimiter::address_key(Some(address));
    // An address that spent its budget gets no more key lookups (each one a
    // call to quota) until it has some back.
    if matches!(credential, Credential::ApiKey(_))
        && let Err(wait) = bad.limiter.peek(address_key)
    {
        return Err(too_many_bad_credentials(wait));
    }
    let auth = RequestAuth::new(credential);
    match auth.resolve(keys, clients).await {
        Ok(principal) => {
            let key = CallerKey::tenant(principal.tenant_id.into());
            Ok((auth, key))
        }
        Err(GatewayError::Unauthenticated(message)) => {
            tracing::info!(address, %message, "invalid credential");
            count_refusal("invalid_credential");
            if let Err(wait) = bad.limiter.check(address_key) {
                return Err(too_many_bad_credentials(wait));
            }
            Err(unauthenticated(&message))
        }
        // Quota could not say (it is down): the fields that need the
        // principal report that as they run; public ones do not need it.
        Err(_) => Ok((auth, CallerKey::address(address))),
    }
}

fn unauthenticated(message: &str) -> HttpResponse {
    HttpResponse::Unauthorized()
        .insert_header(("WWW-Authenticate", "Bearer"))
        .json(serde_json::json!({
            "errors": [{
                "message": message,
                "extensions": { "code": ErrorCode::Unauthenticated.as_str() },
            }],
        }))
}

fn too_many_bad_credentials(wait: Duration) -> HttpResponse {
    count_refusal("invalid_credential_throttled");
    rate_limited_response("too many invalid credentials from this address", wait)
}

/// The 429 answer, GraphQL-shaped so a client reads `extensions.code` as for
/// any other error.
pub fn rate_limited_response(what: &str, wait: Duration) -> HttpResponse {
    let seconds = retry_after_seconds(wait);
    HttpResponse::TooManyRequests()
        .insert_header((RETRY_AFTER, seconds.to_string()))
        .json(serde_json::json!({
            "errors": [{
                "message": format!("{what}; retry in {seconds} s"),
                "extensions": {
                    "code": ErrorCode::RateLimited.as_str(),
                    "retryAfterSeconds": seconds,
                },
            }],
        }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn an_account_is_throttled_after_its_failures_whatever_the_address() {
        let throttle = LoginThrottle::default();
        for i in 0..LOGIN_FAILURES_PER_ACCOUNT {
            throttle
                .check("ada@example.com", &format!("10.0.0.{i}"))
                .unwrap();
            throttle.failed("ada@example.com", &format!("10.0.0.{i}"));
        }
        let refused = throttle.check("ADA@example.com", "10.9.9.9").unwrap_err();
        assert_eq!(refused.code(), ErrorCode::RateLimited);
        // Another account from a fresh address is not.
        throttle.check("bob@example.com", "10.9.9.9").unwrap();
    }

    #[test]
    fn an_address_is_throttled_after_its_failures_whatever_the_account() {
        let throttle = LoginThrottle::default();
        for i in 0..LOGIN_FAILURES_PER_ADDRESS {
            throttle.failed(&format!("u{i}@example.com"), "10.0.0.1");
        }
        let refused = throttle.check("new@example.com", "10.0.0.1").unwrap_err();
        assert!(matches!(
            refused,
            GatewayError::RateLimited { retry_after_seconds, .. } if retry_after_seconds >= 1
        ));
        throttle.check("new@example.com", "10.0.0.2").unwrap();
    }

    #[test]
    fn the_gate_lets_in_at_most_max_per_caller() {
        let gate = Arc::new(ConcurrencyGate::default());
        let a = CallerKey::address("10.0.0.1");
        let b = CallerKey::address("10.0.0.2");
        let passes: Vec<_> = (0..4).map(|_| gate.enter(a, 4).unwrap()).collect();
        assert!(gate.enter(a, 4).is_none());
        let other = gate.enter(b, 4).unwrap();
        drop(passes);
        assert!(gate.enter(a, 4).is_some());
        drop(other);
        assert!(gate.running.lock().unwrap().is_empty());
    }
}
