//! Who may log in to which instance: the renter's public keys per instance,
//! kept in the agent's state directory (one file per instance, so a
//! restarted agent still knows them) and in memory for the SSH gateway.
//!
//! `authorize_ssh` writes them ([`Access::authorize`]); `revoke_ssh` and a
//! stop remove them ([`Access::revoke`]), which also ends every open session
//! of the instance: each session holds a [`SessionGuard`] whose
//! [`SessionGuard::closed`] resolves the moment the instance's access is
//! revoked.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use russh::keys::PublicKey;
use tokio::sync::watch;
use uuid::Uuid;

/// Keys accepted per instance, at most (a renter's team, not a directory).
pub const MAX_KEYS: usize = 32;
/// Longest key line accepted (an RSA 16384 key is about 2.8 KB).
pub const MAX_KEY_LINE: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error("no valid SSH public key was given")]
    NoKeys,
    #[error("at most {MAX_KEYS} SSH public keys per instance")]
    TooManyKeys,
    #[error("SSH public key on line {line}: {reason}")]
    BadKey { line: usize, reason: String },
    #[error("state directory {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

#[derive(Default)]
struct State {
    keys: HashMap<Uuid, Vec<PublicKey>>,
    /// One sender per instance with sessions open; dropping it (on revoke)
    /// wakes every session's [`SessionGuard::closed`].
    sessions: HashMap<Uuid, watch::Sender<()>>,
}

/// The instances' authorised keys.
pub struct Access {
    dir: PathBuf,
    state: Mutex<State>,
}

/// Parses `authorized_keys`-style text: one key per line, blank lines and
/// `#` comments skipped. Options before the key type are not accepted.
pub fn parse_keys(text: &str) -> Result<Vec<PublicKey>, AccessError> {
    let mut keys = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.len() > MAX_KEY_LINE {
            return Err(AccessError::BadKey {
                line: n + 1,
                reason: format!("longer than {MAX_KEY_LINE} bytes"),
            });
        }
        let key = PublicKey::from_openssh(line).map_err(|e| AccessError::BadKey {
            line: n + 1,
            reason: e.to_string(),
        })?;
        keys.push(key);
        if keys.len() > MAX_KEYS {
            return Err(AccessError::TooManyKeys);
        }
    }
    if keys.is_empty() {
        return Err(AccessError::NoKeys);
    }
    Ok(keys)
}

impl Access {
    /// Opens (creating it) the directory that keeps the keys, and loads what
    /// an earlier run of the agent authorised.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self, AccessError> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|source| AccessError::Io {
            path: dir.clone(),
            source,
        })?;
        let mut state = State::default();
        let entries = std::fs::read_dir(&dir).map_err(|source| AccessError::Io {
            path: dir.clone(),
            source,
        })?;
        for entry in entries.flatten() {
            let path = entry.path();
            let Some(instance) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".keys"))
                .and_then(|n| Uuid::parse_str(n).ok())
            else {
                continue;
            };
            match std::fs::read_to_string(&path)
                .map_err(|e| e.to_string())
                .and_then(|text| parse_keys(&text).map_err(|e| e.to_string()))
            {
                Ok(keys) => {
                    state.keys.insert(instance, keys);
                }
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "unreadable key file ignored")
                }
            }
        }
        Ok(Self {
            dir,
            state: Mutex::new(state),
        })
    }

    fn file(&self, instance: Uuid) -> PathBuf {
        self.dir.join(format!("{instance}.keys"))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind; go on.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Lets the holders of `keys` (authorized_keys text) log in to
    /// `instance`, replacing what was authorised before. Idempotent.
    pub fn authorize(&self, instance: Uuid, keys: &str) -> Result<usize, AccessError> {
        let parsed = parse_keys(keys)?;
        let text: String = parsed
            .iter()
            .filter_map(|k| k.to_openssh().ok())
            .map(|line| line + "\n")
            .collect();
        write_atomically(&self.file(instance), text.as_bytes())?;
        let count = parsed.len();
        self.lock().keys.insert(instance, parsed);
        Ok(count)
    }

    /// Nobody may log in to `instance` any more, and its open sessions end.
    /// Idempotent.
    pub fn revoke(&self, instance: Uuid) -> Result<(), AccessError> {
        let path = self.file(instance);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(AccessError::Io { path, source }),
        }
        let mut state = self.lock();
        state.keys.remove(&instance);
        // Dropping the sender ends every session's `closed()`.
        state.sessions.remove(&instance);
        Ok(())
    }

    /// Whether `key` may log in to `instance` (compares the key material,
    /// not the comment).
    pub fn allows(&self, instance: Uuid, key: &PublicKey) -> bool {
        self.lock()
            .keys
            .get(&instance)
            .is_some_and(|keys| keys.iter().any(|k| k.key_data() == key.key_data()))
    }

    /// Whether anything is authorised for `instance` (what `validate_clean`
    /// checks, with the key file).
    pub fn has_any(&self, instance: Uuid) -> bool {
        self.lock().keys.contains_key(&instance) || self.file(instance).exists()
    }

    /// A guard for one session of `instance`, or None when the instance has
    /// no access (revoked in between).
    pub fn session(&self, instance: Uuid) -> Option<SessionGuard> {
        let mut state = self.lock();
        if !state.keys.contains_key(&instance) {
            return None;
        }
        let sender = state
            .sessions
            .entry(instance)
            .or_insert_with(|| watch::channel(()).0);
        Some(SessionGuard {
            receiver: sender.subscribe(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Held by one SSH session of an instance.
pub struct SessionGuard {
    receiver: watch::Receiver<()>,
}

impl SessionGuard {
    /// Resolves when the instance's access is revoked (stop, destroy).
    pub async fn closed(&mut self) {
        while self.receiver.changed().await.is_ok() {}
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), AccessError> {
    let io = |source| AccessError::Io {
        path: path.to_owned(),
        source,
    };
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEezKSUQRzSEtELYumN2ElvQTzmNK/fPvLzfV5tmBVGu renter@laptop";

    #[tokio::test]
    async fn revoking_refuses_the_key_and_ends_open_sessions() {
        let dir = std::env::temp_dir().join(format!("gpm-access-{}", Uuid::now_v7()));
        let access = Access::open(&dir).unwrap();
        let instance = Uuid::now_v7();
        assert_eq!(access.authorize(instance, KEY).unwrap(), 1);
        let key = PublicKey::from_openssh(KEY).unwrap();
        assert!(access.allows(instance, &key));
        assert!(!access.allows(Uuid::now_v7(), &key));
        // A restarted agent knows the keys.
        assert!(Access::open(&dir).unwrap().allows(instance, &key));
        let mut guard = access.session(instance).unwrap();
        access.revoke(instance).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(1), guard.closed())
            .await
            .unwrap();
        assert!(!access.allows(instance, &key));
        assert!(!access.has_any(instance));
        assert!(access.session(instance).is_none());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn bad_keys_are_refused_with_the_line() {
        assert!(matches!(parse_keys("\n# none\n"), Err(AccessError::NoKeys)));
        assert!(matches!(
            parse_keys(&format!("{KEY}\nssh-ed25519 garbage")),
            Err(AccessError::BadKey { line: 2, .. })
        ));
    }
}
