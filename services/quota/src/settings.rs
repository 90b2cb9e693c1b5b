//! Quota's own settings, read once per process ([`platform::settings`]).

use platform::PlatformError;
use platform::settings::{ServiceSettings, parsed};

#[derive(Debug, Clone)]
pub struct QuotaSettings {
    /// GPUs a new tenant may hold at once until an operator changes it.
    /// `GPUMARKET_DEFAULT_MAX_GPUS`.
    pub default_max_gpus: i32,
}

impl ServiceSettings for QuotaSettings {
    fn from_env(_production: bool) -> Result<Self, PlatformError> {
        let default_max_gpus = parsed("GPUMARKET_DEFAULT_MAX_GPUS", 16)?;
        if default_max_gpus < 0 {
            return Err(PlatformError::Config(
                "GPUMARKET_DEFAULT_MAX_GPUS: must not be negative".into(),
            ));
        }
        Ok(Self { default_max_gpus })
    }
}
