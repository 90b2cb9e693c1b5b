//! Each service's own group of settings, and the plumbing to read one.
//!
//! A service's crate defines its group (a struct implementing
//! [`ServiceSettings`], read from its own `GPUMARKET_*` variables) and
//! nothing about it lives here: [`Config`](crate::Config) carries only what
//! every process shares (database, broker, exchanges, bind address, ports,
//! the service token, the currency, the run mode). A group is read from the
//! environment the first time a process asks for it
//! ([`Config::settings`](crate::Config::settings)); a test or a caller may
//! set one beforehand ([`Config::set_settings`](crate::Config::set_settings),
//! [`Config::update_settings`](crate::Config::update_settings)).
//!
//! Secrets in a group are [`SecretString`]s, which never print.

use std::any::{Any, TypeId};
use std::collections::BTreeMap;
use std::env;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::PlatformError;

/// One service's group of settings.
pub trait ServiceSettings: Any + Clone + Send + Sync + fmt::Debug {
    /// Reads the group from its variables; every default works on a
    /// developer machine, and `production` may refuse some of them.
    fn from_env(production: bool) -> Result<Self, PlatformError>;
}

/// A secret value: its `Debug` and `Display` print `[redacted]`, so a
/// configuration can be logged whole. [`SecretString::expose`] is the only
/// way to the value, which makes each use easy to find.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretString(String);

impl SecretString {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl From<&str> for SecretString {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

/// For the places that send the value on (an internal call's token header):
/// the conversion is as explicit as [`SecretString::expose`].
impl From<&SecretString> for String {
    fn from(secret: &SecretString) -> Self {
        secret.0.clone()
    }
}

impl From<SecretString> for String {
    fn from(secret: SecretString) -> Self {
        secret.0
    }
}

impl From<String> for SecretString {
    fn from(value: String) -> Self {
        Self(value)
    }
}

trait AnySettings: Any + Send + Sync + fmt::Debug {
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

impl<T: ServiceSettings> AnySettings for T {
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

/// The groups a process was given or has read, by type.
#[derive(Clone, Default)]
pub struct SettingsMap(BTreeMap<TypeId, Arc<dyn AnySettings>>);

impl fmt::Debug for SettingsMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.values()).finish()
    }
}

impl SettingsMap {
    pub(crate) fn get<T: ServiceSettings>(&self) -> Option<Arc<T>> {
        let found = self.0.get(&TypeId::of::<T>())?;
        Arc::clone(found).into_any().downcast::<T>().ok()
    }

    pub(crate) fn set<T: ServiceSettings>(&mut self, settings: T) {
        self.0.insert(TypeId::of::<T>(), Arc::new(settings));
    }
}

/// `name`'s value, or `default` when it is unset.
pub fn var(name: &str, default: &str) -> String {
    env::var(name).unwrap_or_else(|_| default.to_owned())
}

/// `name`'s value when it is set and not blank.
pub fn optional(name: &str) -> Option<String> {
    env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// `name` parsed, or `default` when it is unset; a value that does not
/// parse is a configuration error naming the variable.
pub fn parsed<T: FromStr>(name: &str, default: T) -> Result<T, PlatformError> {
    match env::var(name) {
        Ok(raw) => raw
            .trim()
            .parse()
            .map_err(|_| PlatformError::Config(format!("{name}: cannot parse {raw:?}"))),
        Err(_) => Ok(default),
    }
}

/// A value copied from a template without being filled in
/// (deploy/k8s/secret.template.yaml's `REPLACE-ME`, the old compose
/// defaults' `dev-only`): production refuses it like a development secret.
pub fn placeholder(value: &str) -> bool {
    let lower = value.to_ascii_lowercase();
    ["replace-me", "dev-only", "change-me"]
        .iter()
        .any(|marker| lower.contains(marker))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq)]
    struct Group {
        interval_ms: u64,
        key: SecretString,
    }

    impl ServiceSettings for Group {
        fn from_env(_production: bool) -> Result<Self, PlatformError> {
            Ok(Self {
                interval_ms: 10,
                key: SecretString::new("sk-3f9a-secret"),
            })
        }
    }

    #[test]
    fn a_group_is_found_by_type_and_its_secrets_never_print() {
        let mut map = SettingsMap::default();
        assert!(map.get::<Group>().is_none());
        let mut group = Group::from_env(false).unwrap();
        group.interval_ms = 20;
        map.set(group.clone());
        assert_eq!(*map.get::<Group>().unwrap(), group);
        let printed = format!("{map:?} {}", group.key);
        assert!(printed.contains("interval_ms: 20"), "{printed}");
        assert!(!printed.contains("-secret"), "{printed}");
        assert_eq!(group.key.expose(), "sk-3f9a-secret");
    }
}
