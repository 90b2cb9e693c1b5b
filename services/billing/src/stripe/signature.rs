//! Verifying the `Stripe-Signature` header exactly as Stripe signs:
//! `t=<unix seconds>,v1=<hex HMAC-SHA256>[,v1=...][,v0=...]`, where each v1
//! is the HMAC-SHA256, keyed with an endpoint secret (the whole `whsec_...`
//! string), of `"{t}.{raw body}"`. The body must be the bytes received, not
//! a re-serialisation.
//!
//! Rotation: while Stripe rolls an endpoint secret it signs with the old and
//! the new one (two v1 entries), and this side may be configured with both.
//! Any v1 that matches any configured secret passes. Replay: the signed
//! timestamp must lie within the tolerance of now (either side, so a clock
//! far ahead is refused too); a replay inside the window is absorbed by the
//! event inbox, not here.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::Error;

pub const HEADER: &str = "Stripe-Signature";

type HmacSha256 = Hmac<Sha256>;

/// The signed timestamp when `header` carries a v1 signature of `payload`
/// by one of `secrets`, made within `tolerance_seconds` of `now`.
pub fn verify(
    header: Option<&str>,
    payload: &[u8],
    secrets: &[String],
    tolerance_seconds: i64,
    now: i64,
) -> Result<i64, Error> {
    let reject = |why: &str| Error::WebhookRejected(format!("Stripe-Signature: {why}"));
    let header = header.ok_or_else(|| reject("missing"))?;
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        let (key, value) = part
            .trim()
            .split_once('=')
            .ok_or_else(|| reject("malformed (expected t=...,v1=...)"))?;
        match key {
            "t" => {
                if timestamp.is_some() {
                    return Err(reject("more than one timestamp"));
                }
                timestamp = Some(
                    value
                        .parse::<i64>()
                        .map_err(|_| reject("timestamp is not a number"))?,
                );
            }
            // A v1 that is not hex cannot match; keep looking at the others.
            "v1" => {
                if let Ok(bytes) = hex::decode(value) {
                    signatures.push(bytes);
                }
            }
            // v0 (test-mode legacy) and schemes Stripe may add are not ours to check.
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or_else(|| reject("no timestamp"))?;
    if signatures.is_empty() {
        return Err(reject("no v1 signature"));
    }
    let matched = secrets.iter().any(|secret| {
        let Ok(mut mac) = HmacSha256::new_from_slice(secret.as_bytes()) else {
            return false;
        };
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(payload);
        // `verify_slice` compares in constant time.
        signatures
            .iter()
            .any(|signature| mac.clone().verify_slice(signature).is_ok())
    });
    if !matched {
        return Err(reject("no signature matches a configured secret"));
    }
    // Checked after the signature, so "stale" is only ever said of a
    // genuine but old (or replayed) delivery.
    if now.abs_diff(timestamp) > tolerance_seconds.unsigned_abs() {
        return Err(reject(&format!(
            "timestamp {timestamp} is outside the {tolerance_seconds} s tolerance"
        )));
    }
    Ok(timestamp)
}

/// The v1 signature Stripe would send for `payload` at `timestamp` under
/// `secret` (hex). For tests and tools; verification does not use it.
pub fn sign(secret: &str, timestamp: i64, payload: &[u8]) -> String {
    let mut mac = match HmacSha256::new_from_slice(secret.as_bytes()) {
        Ok(mac) => mac,
        // HMAC takes keys of any length.
        Err(_) => return String::new(),
    };
    mac.update(format!("{timestamp}.").as_bytes());
    mac.update(payload);
    hex::encode(mac.finalize().into_bytes())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;
    const BODY: &[u8] = br#"{"id":"evt_1","type":"payment_intent.succeeded"}"#;

    fn secrets(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    fn header(t: i64, signatures: &[String]) -> String {
        let mut h = format!("t={t}");
        for s in signatures {
            h.push_str(&format!(",v1={s}"));
        }
        h
    }

    fn check(h: &str, body: &[u8], configured: &[&str]) -> Result<i64, Error> {
        verify(Some(h), body, &secrets(configured), 300, NOW)
    }

    fn reason(result: Result<i64, Error>) -> String {
        match result {
            Err(Error::WebhookRejected(message)) => message,
            other => panic!("expected a rejection, got {other:?}"),
        }
    }

    #[test]
    fn a_valid_signature_passes() {
        let h = header(NOW, &[sign("whsec_a", NOW, BODY)]);
        assert_eq!(check(&h, BODY, &["whsec_a"]).unwrap(), NOW);
    }

    #[test]
    fn the_signature_matches_an_independent_hmac() {
        // What is signed is "{t}.{body}", and the MAC is the standard one:
        // checked against the published HMAC-SHA256 value for "key" and
        // "The quick brown fox jumps over the lazy dog".
        assert_eq!(sign("key", 1, b"x"), {
            let mut mac = HmacSha256::new_from_slice(b"key").unwrap();
            mac.update(b"1.x");
            hex::encode(mac.finalize().into_bytes())
        });
        let mut mac = HmacSha256::new_from_slice(b"key").unwrap();
        mac.update(b"The quick brown fox jumps over the lazy dog");
        assert_eq!(
            hex::encode(mac.finalize().into_bytes()),
            "f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8"
        );
    }

    #[test]
    fn a_wrong_secret_is_rejected() {
        let h = header(NOW, &[sign("whsec_other", NOW, BODY)]);
        assert!(reason(check(&h, BODY, &["whsec_a"])).contains("no signature matches"));
    }

    #[test]
    fn a_tampered_body_is_rejected() {
        let h = header(NOW, &[sign("whsec_a", NOW, BODY)]);
        let tampered = br#"{"id":"evt_1","type":"payment_intent.succeeded" }"#;
        assert!(reason(check(&h, tampered, &["whsec_a"])).contains("no signature matches"));
    }

    #[test]
    fn a_tampered_timestamp_is_rejected() {
        // The signature covers the timestamp: moving it breaks the signature.
        let h = header(NOW + 1, &[sign("whsec_a", NOW, BODY)]);
        assert!(reason(check(&h, BODY, &["whsec_a"])).contains("no signature matches"));
    }

    #[test]
    fn stale_and_future_timestamps_beyond_the_tolerance_are_rejected() {
        for t in [NOW - 301, NOW + 301, 0] {
            let h = header(t, &[sign("whsec_a", t, BODY)]);
            assert!(
                reason(check(&h, BODY, &["whsec_a"])).contains("tolerance"),
                "t={t}"
            );
        }
        for t in [NOW - 300, NOW + 300] {
            let h = header(t, &[sign("whsec_a", t, BODY)]);
            assert_eq!(check(&h, BODY, &["whsec_a"]).unwrap(), t);
        }
    }

    #[test]
    fn one_matching_signature_among_several_passes() {
        let h = header(
            NOW,
            &[
                sign("whsec_old", NOW, BODY),
                "00".repeat(32),
                sign("whsec_a", NOW, BODY),
            ],
        );
        assert!(check(&h, BODY, &["whsec_a"]).is_ok());
        // ... with v0 and unknown schemes ignored.
        let h = format!("v0=abc,t={NOW},x9=1,v1={}", sign("whsec_a", NOW, BODY));
        assert!(check(&h, BODY, &["whsec_a"]).is_ok());
    }

    #[test]
    fn two_configured_secrets_during_rotation() {
        let configured = ["whsec_new", "whsec_old"];
        // Stripe still signing with the old secret only.
        let h = header(NOW, &[sign("whsec_old", NOW, BODY)]);
        assert!(check(&h, BODY, &configured).is_ok());
        // Signing with both while it rolls.
        let h = header(
            NOW,
            &[sign("whsec_new", NOW, BODY), sign("whsec_old", NOW, BODY)],
        );
        assert!(check(&h, BODY, &configured).is_ok());
        // After the roll, the old secret is dropped from configuration.
        let h = header(NOW, &[sign("whsec_old", NOW, BODY)]);
        assert!(check(&h, BODY, &["whsec_new"]).is_err());
        // No secret configured: nothing passes.
        let h = header(NOW, &[sign("whsec_new", NOW, BODY)]);
        assert!(check(&h, BODY, &[]).is_err());
    }

    #[test]
    fn malformed_headers_are_rejected() {
        let good = sign("whsec_a", NOW, BODY);
        assert!(reason(verify(None, BODY, &secrets(&["whsec_a"]), 300, NOW)).contains("missing"));
        for (h, why) in [
            ("".to_owned(), "malformed"),
            ("garbage".to_owned(), "malformed"),
            (format!("v1={good}"), "no timestamp"),
            (format!("t=abc,v1={good}"), "not a number"),
            (format!("t={NOW}"), "no v1"),
            (format!("t={NOW},v1=zz-not-hex"), "no v1"),
            (format!("t={NOW},t={NOW},v1={good}"), "more than one"),
        ] {
            let message = reason(check(&h, BODY, &["whsec_a"]));
            assert!(message.contains(why), "{h:?}: {message}");
        }
    }
}
