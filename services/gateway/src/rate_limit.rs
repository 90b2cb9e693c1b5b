//! A token bucket per caller: an API key, a user token, or for anonymous
//! requests the client's address. It runs before the body is parsed or the
//! credential is checked, so a flood costs a hash and a map lookup.
//!
//! Callers are keyed by a hash of their `Authorization` header: a secret is
//! never kept in memory longer than the request. A caller that sends a new
//! made-up token each time gets a new bucket here, so each failed
//! credential is also charged to its client address (`crate::caller`): that
//! budget spent, the address gets 429 instead of 401. The same buckets,
//! with other rates, throttle failed logins per account and per address.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// Past this many callers, buckets that have refilled to full (idle ones,
/// indistinguishable from new) are dropped so the map cannot grow without
/// bound.
const PRUNE_ABOVE: usize = 10_000;

struct Bucket {
    tokens: f64,
    at: Instant,
}

pub struct RateLimiter {
    per_second: f64,
    burst: f64,
    buckets: Mutex<HashMap<[u8; 32], Bucket>>,
}

impl RateLimiter {
    /// `per_minute` 0 turns the limit off; a burst below 1 is taken as 1.
    pub fn new(per_minute: u32, burst: u32) -> Self {
        Self {
            per_second: f64::from(per_minute) / 60.0,
            burst: f64::from(burst.max(1)),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// `count` tokens that come back evenly over `window`, all available at
    /// once: "at most `count` per `window`, then one every `window/count`".
    pub fn per_window(count: u32, window: Duration) -> Self {
        let count = f64::from(count.max(1));
        Self {
            per_second: count / window.as_secs_f64().max(1.0),
            burst: count,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// The bucket key of a client address alone, whatever credential the
    /// request carries.
    pub fn address_key(peer: Option<&str>) -> [u8; 32] {
        Self::key(None, peer)
    }

    /// The bucket key of one account, named by its (case-folded) email.
    pub fn account_key(email: &str) -> [u8; 32] {
        let mut hash = Sha256::new();
        hash.update(b"account:");
        hash.update(email.trim().to_lowercase().as_bytes());
        hash.finalize().into()
    }

    /// The bucket key of a request: its credential when it has one, else
    /// its client address.
    pub fn key(authorization: Option<&[u8]>, peer: Option<&str>) -> [u8; 32] {
        let mut hash = Sha256::new();
        match authorization {
            Some(credential) if !credential.is_empty() => {
                hash.update(b"credential:");
                hash.update(token_of(credential));
            }
            _ => {
                hash.update(b"address:");
                hash.update(peer.unwrap_or("unknown").as_bytes());
            }
        }
        hash.finalize().into()
    }

    /// Takes one token for `key`: `Ok` to go on, or `Err` with how long
    /// until a token is back.
    pub fn check(&self, key: [u8; 32]) -> Result<(), Duration> {
        self.check_at(key, Instant::now())
    }

    /// Whether `key` has a token left, without taking it: `Err` with how
    /// long until it has one.
    pub fn peek(&self, key: [u8; 32]) -> Result<(), Duration> {
        self.take_at(key, Instant::now(), false)
    }

    fn check_at(&self, key: [u8; 32], now: Instant) -> Result<(), Duration> {
        self.take_at(key, now, true)
    }

    fn take_at(&self, key: [u8; 32], now: Instant, take: bool) -> Result<(), Duration> {
        if self.per_second <= 0.0 {
            return Ok(());
        }
        // A panic while holding the lock leaves only counters behind; they
        // are still usable.
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if buckets.len() > PRUNE_ABOVE {
            let (rate, burst) = (self.per_second, self.burst);
            buckets.retain(|_, b| {
                b.tokens + now.saturating_duration_since(b.at).as_secs_f64() * rate < burst
            });
        }
        let bucket = buckets.entry(key).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        let refilled = now.saturating_duration_since(bucket.at).as_secs_f64() * self.per_second;
        bucket.tokens = (bucket.tokens + refilled).min(self.burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            if take {
                bucket.tokens -= 1.0;
            }
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                (1.0 - bucket.tokens) / self.per_second,
            ))
        }
    }
}

/// Whole seconds for `Retry-After`, rounded up so a client that waits that
/// long finds a token.
pub fn retry_after_seconds(wait: Duration) -> u64 {
    let secs = wait.as_secs();
    if wait.subsec_nanos() > 0 {
        secs + 1
    } else {
        secs.max(1)
    }
}

/// The token an `Authorization` value carries, as the credential parser
/// reads it (the scheme in any case, spaces around): one bucket per token,
/// so `Bearer  <key>` or `BEARER <key>` is not a fresh bucket for the same key.
fn token_of(header: &[u8]) -> &[u8] {
    let trimmed = header.trim_ascii();
    match trimmed.get(..7) {
        Some(scheme) if scheme.eq_ignore_ascii_case(b"bearer ") => trimmed[7..].trim_ascii(),
        _ => trimmed,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn one_bucket_per_token_whatever_the_spelling_of_the_header() {
        let key = |h: &str| RateLimiter::key(Some(h.as_bytes()), Some("10.0.0.1"));
        let canonical = key("Bearer gpm_abc");
        for spelling in ["bearer gpm_abc", "BEARER   gpm_abc", "  Bearer gpm_abc  "] {
            assert_eq!(key(spelling), canonical, "{spelling:?}");
        }
        assert_ne!(key("Bearer gpm_abd"), canonical);
    }

    #[test]
    fn burst_then_refill_per_key() {
        let limiter = RateLimiter::new(60, 3);
        let a = RateLimiter::key(Some(b"Bearer a"), None);
        let b = RateLimiter::key(Some(b"Bearer b"), None);
        let start = Instant::now();
        for _ in 0..3 {
            limiter.check_at(a, start).unwrap();
        }
        let wait = limiter.check_at(a, start).unwrap_err();
        assert_eq!(retry_after_seconds(wait), 1);
        // Another caller has its own bucket.
        limiter.check_at(b, start).unwrap();
        // One token a second comes back.
        limiter
            .check_at(a, start + Duration::from_millis(1001))
            .unwrap();
        assert!(
            limiter
                .check_at(a, start + Duration::from_millis(1002))
                .is_err()
        );
    }

    #[test]
    fn peeking_takes_nothing_and_a_window_refills_evenly() {
        let limiter = RateLimiter::per_window(2, Duration::from_secs(60));
        let key = RateLimiter::account_key(" Ada@Example.com");
        assert_eq!(key, RateLimiter::account_key("ada@example.com"));
        let start = Instant::now();
        for _ in 0..5 {
            limiter.take_at(key, start, false).unwrap();
        }
        limiter.check_at(key, start).unwrap();
        limiter.check_at(key, start).unwrap();
        let wait = limiter.take_at(key, start, false).unwrap_err();
        // One of the two comes back every 30 s.
        assert_eq!(retry_after_seconds(wait), 30);
        limiter
            .take_at(key, start + Duration::from_secs(30), false)
            .unwrap();
    }

    #[test]
    fn zero_turns_it_off() {
        let limiter = RateLimiter::new(0, 1);
        let key = RateLimiter::key(None, Some("127.0.0.1"));
        for _ in 0..1000 {
            limiter.check(key).unwrap();
        }
    }

    #[test]
    fn anonymous_callers_are_keyed_by_address() {
        assert_eq!(
            RateLimiter::key(None, Some("10.0.0.1")),
            RateLimiter::key(Some(b""), Some("10.0.0.1"))
        );
        assert_ne!(
            RateLimiter::key(None, Some("10.0.0.1")),
            RateLimiter::key(None, Some("10.0.0.2"))
        );
    }
}
