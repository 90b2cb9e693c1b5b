//! The gateway's host key: an ed25519 key in OpenSSH format, generated on
//! the first start (mode 0600) and reused afterwards, so a renter's
//! `known_hosts` entry stays valid across agent restarts.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use russh::keys::ssh_key::LineEnding;
use russh::keys::ssh_key::private::Ed25519Keypair;
use russh::keys::{HashAlg, PrivateKey};

use super::SshError;

/// Reads the host key at `path`, or makes one there when there is none.
pub fn load_or_generate(path: &Path) -> Result<PrivateKey, SshError> {
    let io = |source| SshError::HostKey {
        path: path.to_owned(),
        reason: format!("{source}"),
    };
    match std::fs::read_to_string(path) {
        Ok(text) => {
            return PrivateKey::from_openssh(text.trim_start()).map_err(|e| SshError::HostKey {
                path: path.to_owned(),
                reason: e.to_string(),
            });
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let key = PrivateKey::from(Ed25519Keypair::from_seed(&rand::random::<[u8; 32]>()));
    let text = key
        .to_openssh(LineEnding::LF)
        .map_err(|e| SshError::HostKey {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
    // Written under a temporary name and renamed, so a crash mid-write
    // leaves no half key that the next start would refuse.
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io)?;
    file.write_all(text.as_bytes()).map_err(io)?;
    file.sync_all().map_err(io)?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(io)?;
    tracing::info!(
        path = %path.display(),
        fingerprint = %key.public_key().fingerprint(HashAlg::Sha256),
        "generated the SSH gateway's host key"
    );
    Ok(key)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_generated_key_is_private_to_its_owner_and_reused() {
        let dir = std::env::temp_dir().join(format!("gpm-hostkey-{}", uuid::Uuid::now_v7()));
        let path = dir.join("keys/ssh_host_ed25519_key");
        let first = load_or_generate(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let second = load_or_generate(&path).unwrap();
        assert_eq!(first.public_key(), second.public_key());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_damaged_key_file_is_an_error_not_a_new_key() {
        let dir = std::env::temp_dir().join(format!("gpm-hostkey-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("key");
        std::fs::write(&path, "garbage").unwrap();
        assert!(matches!(
            load_or_generate(&path),
            Err(SshError::HostKey { .. })
        ));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
