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

/// The SQL predicate for a verified machine, over `catalog.machines` left
/// joined with `catalog.host_profiles`: the host is verified by an operator
/// and the machine meets the technical criteria of docs/host-agent.md.
pub const VERIFIED_SQL: &str = "coalesce(catalog.host_profiles.verification = 'verified' \
     AND catalog.machines.cuda_version_code >= 12000 \
     AND coalesce(catalog.machines.reliability, 0) >= 0.90 \
     AND catalog.machines.download_mbps >= 100 \
     AND catalog.machines.self_test_passed_at > now() - interval '7 days', false)";

impl Market {
    /// The SQL predicate for a machine heard from within the grace period.
    pub fn online_sql(&self) -> String {
        format!(
            "coalesce(catalog.machines.last_heartbeat_at > now() - interval '{} seconds', false)",
            self.heartbeat_grace_seconds.max(0)
        )
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
