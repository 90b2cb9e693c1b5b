//! Standard Webhooks signatures (<https://www.standardwebhooks.com/>):
//! `whsec_`-prefixed secrets, and the `v1` signature, an HMAC-SHA256 keyed
//! with the secret's bytes over `{webhook-id}.{webhook-timestamp}.{body}`,
//! in base64. During a rotation's overlap both secrets sign, and the
//! `webhook-signature` header carries both, separated by a space.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

const PREFIX: &str = "whsec_";
/// Key bytes of a new secret (the specification allows 24 to 64).
const KEY_BYTES: usize = 32;

/// A signing secret. Its `Debug` prints no key material, so it cannot leak
/// through a log line or an error.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningSecret(String);

impl std::fmt::Debug for SigningSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningSecret(whsec_…)")
    }
}

impl SigningSecret {
    /// A new random secret.
    pub fn generate() -> Self {
        let mut key = [0u8; KEY_BYTES];
        rand::thread_rng().fill_bytes(&mut key);
        Self(format!("{PREFIX}{}", STANDARD.encode(key)))
    }

    /// A stored secret; None when it is not a `whsec_` secret of base64.
    pub fn parse(raw: &str) -> Option<Self> {
        let key = raw.strip_prefix(PREFIX)?;
        STANDARD.decode(key).ok().filter(|k| !k.is_empty())?;
        Some(Self(raw.to_owned()))
    }

    /// The text stored and shown once to the endpoint's owner.
    pub fn expose(&self) -> &str {
        &self.0
    }

    fn key(&self) -> Vec<u8> {
        // `parse` and `generate` only make secrets whose key decodes.
        STANDARD
            .decode(self.0.trim_start_matches(PREFIX))
            .unwrap_or_default()
    }

    /// `v1,<base64 signature>` of one message.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut mac = match Hmac::<Sha256>::new_from_slice(&self.key()) {
            Ok(mac) => mac,
            // HMAC takes keys of any length; this arm is never taken.
            Err(_) => return String::new(),
        };
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }
}

/// The `webhook-signature` header: one `v1` signature per secret.
pub fn signature_header(
    secrets: &[&SigningSecret],
    id: &str,
    timestamp: i64,
    body: &[u8],
) -> String {
    secrets
        .iter()
        .map(|s| s.sign(id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The specification's own example (the reference libraries' tests use
    /// the same secret, id, timestamp and body).
    #[test]
    fn signs_the_reference_example() {
        let secret = SigningSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(
            secret.sign(
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1_614_265_330,
                br#"{"test": 2432232314}"#
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn a_secret_never_prints() {
        let secret = SigningSecret::generate();
        assert!(!format!("{secret:?}").contains(&secret.expose()[6..]));
        assert!(secret.expose().starts_with("whsec_"));
        assert_eq!(SigningSecret::parse(secret.expose()), Some(secret));
        assert_eq!(SigningSecret::parse("whsec_"), None);
        assert_eq!(SigningSecret::parse("not-a-secret"), None);
    }

    #[test]
    fn both_secrets_sign_during_an_overlap() {
        let (new, old) = (SigningSecret::generate(), SigningSecret::generate());
        let header = signature_header(&[&new, &old], "msg_1", 1, b"{}");
        let parts: Vec<&str> = header.split(' ').collect();
        assert_eq!(
            parts,
            [new.sign("msg_1", 1, b"{}"), old.sign("msg_1", 1, b"{}")]
        );
    }
}
