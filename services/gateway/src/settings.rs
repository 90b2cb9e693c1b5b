//! The gateway's own settings, read once per process
//! ([`platform::settings`]): its signing keys, rate limits, and what it
//! shows the web front ends.

use platform::PlatformError;
use platform::settings::{SecretString, ServiceSettings, optional, parsed, placeholder, var};

/// The development signing key, published in this repository: anyone can
/// sign an operator's JWT with it. Production refuses it.
pub const DEV_JWT_SECRET: &str = "insecure-development-jwt-secret-change-me";

#[derive(Debug, Clone)]
pub struct GatewaySettings {
    /// HMAC keys for JWTs as `kid:secret` pairs separated by commas; the
    /// first signs, all verify (rotation). `GPUMARKET_JWT_KEYS`.
    pub jwt_keys: Vec<(String, SecretString)>,
    /// `GPUMARKET_JWT_TTL_SECONDS`.
    pub jwt_ttl_seconds: i64,
    /// The token bucket per API key, user token or (anonymous) client
    /// address: sustained requests per minute (0 turns it off) and how many
    /// may come at once. `GPUMARKET_RATE_LIMIT_PER_MINUTE`,
    /// `GPUMARKET_RATE_LIMIT_BURST`.
    pub rate_limit_per_minute: u32,
    pub rate_limit_burst: u32,
    /// The built web front end (`make web`), served at `/portal` and
    /// `/billing`; relative to the working directory. `GPUMARKET_WEB_DIR`.
    pub web_dir: String,
    /// The publishable key (`pk_test_...`, `pk_live_...`) the web front end
    /// gives Stripe.js, shown by the public `platform` query; unset, the
    /// billing page says top-ups are not configured.
    /// `GPUMARKET_STRIPE_PUBLISHABLE_KEY`.
    pub stripe_publishable_key: Option<String>,
    /// The address people open the web front ends at, without a trailing
    /// slash; Stripe's hosted onboarding sends hosts back under it, so a
    /// client cannot choose where. `GPUMARKET_PUBLIC_URL`.
    pub public_url: String,
    /// A renter's runway below this many seconds is shown as low; billing
    /// reads the same variable for its warnings, so the two agree.
    /// `GPUMARKET_RUNWAY_WARNING_SECONDS`.
    pub runway_warning_seconds: i64,
}

impl ServiceSettings for GatewaySettings {
    fn from_env(_production: bool) -> Result<Self, PlatformError> {
        Ok(Self {
            jwt_keys: parse_jwt_keys(&var(
                "GPUMARKET_JWT_KEYS",
                &format!("dev-1:{DEV_JWT_SECRET}"),
            ))?,
            jwt_ttl_seconds: parsed("GPUMARKET_JWT_TTL_SECONDS", 3600)?,
            rate_limit_per_minute: parsed("GPUMARKET_RATE_LIMIT_PER_MINUTE", 1200)?,
            rate_limit_burst: parsed("GPUMARKET_RATE_LIMIT_BURST", 240)?,
            web_dir: var("GPUMARKET_WEB_DIR", "web/dist"),
            stripe_publishable_key: publishable_key(optional("GPUMARKET_STRIPE_PUBLISHABLE_KEY"))?,
            public_url: var("GPUMARKET_PUBLIC_URL", "http://127.0.0.1:8080")
                .trim_end_matches('/')
                .to_owned(),
            runway_warning_seconds: parsed("GPUMARKET_RUNWAY_WARNING_SECONDS", 3600)?,
        })
    }
}

impl GatewaySettings {
    /// The gateway's secrets that still have their development value, a
    /// template's placeholder, or are too short: production refuses them.
    pub fn development_secrets(&self) -> Vec<&'static str> {
        let weak = |key: &SecretString| {
            let key = key.expose();
            key == DEV_JWT_SECRET || key.len() < 32 || placeholder(key)
        };
        // The development key is refused even as a second (verifying) key.
        if self.jwt_keys.iter().any(|(_, key)| weak(key)) {
            vec!["GPUMARKET_JWT_KEYS (the development key, or a key under 32 characters)"]
        } else {
            Vec::new()
        }
    }
}

fn parse_jwt_keys(raw: &str) -> Result<Vec<(String, SecretString)>, PlatformError> {
    let keys: Vec<(String, SecretString)> = raw
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|pair| {
            pair.split_once(':')
                .map(|(kid, secret)| (kid.trim().to_owned(), secret.trim().into()))
                .ok_or_else(|| {
                    PlatformError::Config("GPUMARKET_JWT_KEYS: expected kid:secret".into())
                })
        })
        .collect::<Result<_, _>>()?;
    if keys.is_empty() {
        return Err(PlatformError::Config("GPUMARKET_JWT_KEYS is empty".into()));
    }
    Ok(keys)
}

/// `GPUMARKET_STRIPE_PUBLISHABLE_KEY`, which the gateway shows to anyone:
/// anything but a publishable key (a secret `sk_` or restricted `rk_` key
/// pasted into the wrong variable) is refused rather than published.
fn publishable_key(raw: Option<String>) -> Result<Option<String>, PlatformError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let key = raw.trim();
    if key.is_empty() {
        return Ok(None);
    }
    if !key.starts_with("pk_") {
        return Err(PlatformError::Config(
            "GPUMARKET_STRIPE_PUBLISHABLE_KEY: not a publishable key (pk_...); it is shown publicly"
                .into(),
        ));
    }
    Ok(Some(key.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_publishable_stripe_key_is_published() {
        assert_eq!(publishable_key(None).unwrap(), None);
        assert_eq!(publishable_key(Some("  ".into())).unwrap(), None);
        assert_eq!(
            publishable_key(Some(" pk_test_123 ".into())).unwrap(),
            Some("pk_test_123".into())
        );
        for secret in ["sk_live_123", "rk_test_123", "whsec_123"] {
            assert!(publishable_key(Some(secret.into())).is_err(), "{secret}");
        }
    }

    #[test]
    fn jwt_keys_parse_in_order_and_never_print() {
        let keys = parse_jwt_keys("a:one-5c5c-secret, b:two").unwrap();
        assert_eq!(keys[0].0, "a");
        assert_eq!(keys[0].1.expose(), "one-5c5c-secret");
        assert_eq!(keys[1].1.expose(), "two");
        assert!(!format!("{keys:?}").contains("-secret"));
        assert!(parse_jwt_keys("nokid").is_err());
        assert!(parse_jwt_keys(" , ").is_err());
    }

    #[test]
    fn production_refuses_weak_or_development_jwt_keys() {
        let mut settings = GatewaySettings::from_env(false).unwrap();
        settings.jwt_keys = vec![("dev-1".into(), DEV_JWT_SECRET.into())];
        assert_eq!(settings.development_secrets().len(), 1);
        // Even as a second, verifying key.
        settings.jwt_keys = vec![
            ("k2".into(), "x".repeat(40).into()),
            ("dev-1".into(), DEV_JWT_SECRET.into()),
        ];
        assert_eq!(settings.development_secrets().len(), 1);
        settings.jwt_keys = vec![("k2".into(), "x".repeat(40).into())];
        assert!(settings.development_secrets().is_empty());
        // The Kubernetes template's placeholders are not secrets either.
        settings.jwt_keys = vec![(
            "REPLACE-ME-kid-1".into(),
            "REPLACE-ME-at-least-32-random-bytes".into(),
        )];
        assert_eq!(settings.development_secrets().len(), 1);
    }
}
