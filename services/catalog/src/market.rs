//! Market-wide settings the catalog's queries need.

/// The settlement currency and how long a machine may be silent before it
/// counts as offline.
#[derive(Debug, Clone)]
pub struct Market {
    pub currency: String,
    pub heartbeat_grace_seconds: i64,
}

/// `12.4` → 12040 (NVML's encoding: major × 1000 + minor × 10).
pub fn cuda_code(version: &str) -> Option<i32> {
    let (major, minor) = version.trim().split_once('.')?;
    let major: i32 = major.parse().ok()?;
    let minor: i32 = minor.parse().ok()?;
    if !(1..=99).contains(&major) || !(0..=9).contains(&minor) {
        return None;
    }
    Some(major * 1000 + minor * 10)
}

/// 12040 → `12.4`.
pub fn cuda_version(code: i32) -> String {
    format!("{}.{}", code / 1000, (code % 1000) / 10)
}

/// The verified predicate lives with the criteria it encodes.
pub use crate::reliability::VERIFIED_SQL;

impl Market {
    /// The SQL predicate for a machine heard from within the grace period.
    pub fn online_sql(&self) -> String {
        crate::reliability::online_sql(self.heartbeat_grace_seconds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_versions_round_trip() {
        assert_eq!(cuda_code("12.4"), Some(12040));
        assert_eq!(cuda_code("11.8"), Some(11080));
        assert_eq!(cuda_version(12040), "12.4");
        assert_eq!(cuda_code("12"), None);
        assert_eq!(cuda_code("12.x"), None);
        assert_eq!(cuda_code("12.10"), None);
    }
}
