//! What the gateway is told at start: where it listens, where its host key
//! lives, and the limits that keep one renter (or a scanner) from using up
//! the agent. Turned into russh's server configuration here, so the rest of
//! the gateway never sees russh's knobs.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use russh::MethodKind;
use russh::keys::PrivateKey;

/// The gateway's settings. [`SshConfig::new`] gives the defaults below.
#[derive(Debug, Clone)]
pub struct SshConfig {
    /// Where to listen (port 0 picks a free port; see
    /// [`super::GatewayHandle::local_addr`]).
    pub listen: SocketAddr,
    /// The ed25519 host key in OpenSSH format. Generated (mode 0600) on the
    /// first start and reused afterwards, so renters' `known_hosts` stay
    /// valid across agent restarts.
    pub host_key_path: PathBuf,
    /// Open connections per instance, at most (default 16). A further login
    /// is refused.
    pub max_sessions_per_instance: usize,
    /// Open connections in all, authenticated or not (default 256). Further
    /// TCP connections are closed at once.
    pub max_connections: usize,
    /// Time from the TCP connect to a successful login (default 30 s).
    pub auth_timeout: Duration,
    /// Every refused login attempt takes this long (default 1 s), so keys
    /// and users cannot be probed quickly.
    pub auth_rejection_time: Duration,
    /// Refused signed login attempts per connection (default 6).
    pub max_auth_attempts: usize,
    /// A connection with no traffic either way for this long is closed
    /// (default 30 min).
    pub inactivity_timeout: Duration,
    /// Keepalive probes to silent clients (default every 60 s; a client that
    /// misses 3 in a row is disconnected).
    pub keepalive_interval: Duration,
    /// The engine's unix socket (the one `docker` talks to), when it is
    /// one. Terminal sessions then read the terminal's raw bytes from it
    /// (see `hijack.rs`); without it they go through bollard, whose decoder
    /// loses output that starts with a byte 0, 1 or 2 (default None).
    pub engine_socket: Option<PathBuf>,
    /// Longest wait for the container engine to answer one call while a
    /// login or a channel is being set up (default 10 s).
    pub engine_timeout: Duration,
}

impl SshConfig {
    pub fn new(listen: SocketAddr, host_key_path: impl Into<PathBuf>) -> Self {
        Self {
            listen,
            host_key_path: host_key_path.into(),
            max_sessions_per_instance: 16,
            max_connections: 256,
            auth_timeout: Duration::from_secs(30),
            auth_rejection_time: Duration::from_secs(1),
            max_auth_attempts: 6,
            inactivity_timeout: Duration::from_secs(30 * 60),
            keepalive_interval: Duration::from_secs(60),
            engine_socket: None,
            engine_timeout: Duration::from_secs(10),
        }
    }

    /// russh's server configuration: public-key authentication only.
    pub(crate) fn russh(&self, host_key: PrivateKey) -> Arc<russh::server::Config> {
        Arc::new(russh::server::Config {
            server_id: russh::SshId::Standard(
                concat!("SSH-2.0-gpumarket_", env!("CARGO_PKG_VERSION")).into(),
            ),
            methods: russh::MethodSet::from(&[MethodKind::PublicKey][..]),
            auth_rejection_time: self.auth_rejection_time,
            // OpenSSH always opens with a "none" request to learn the
            // methods; answering it at once costs nothing and saves every
            // login a second.
            auth_rejection_time_initial: Some(Duration::ZERO),
            keys: vec![host_key],
            max_auth_attempts: self.max_auth_attempts,
            inactivity_timeout: Some(self.inactivity_timeout),
            keepalive_interval: Some(self.keepalive_interval),
            keepalive_max: 3,
            nodelay: true,
            ..Default::default()
        })
    }
}
