//! The SSH gateway: renters log in to their instance's container with plain
//! OpenSSH, without an sshd in the image; sessions run through the engine's
//! exec API.
//!
//! - The SSH user is the instance id; only public keys authorised for the
//!   instance ([`crate::access::Access`]) log in, and only while the
//!   instance's container `gpm-<instance>` runs.
//! - `shell` (with or without a PTY), `exec`, `subsystem sftp` (when the
//!   image has OpenSSH's sftp-server; `scp -O` works when it has `scp`) and
//!   `direct-tcpip` to the container's own ports (`ssh -L`). No remote or
//!   agent forwarding, no X11.
//! - Revoking an instance's access (stop, destroy) closes its open
//!   connections at once. A terminal's (or sftp-server's) process that
//!   outlives its channel gets SIGHUP, as under sshd; a plain command runs
//!   on.
//! - Terminals read the exec's raw stream from the engine's unix socket
//!   when [`SshConfig::engine_socket`] is set (recommended; through bollard
//!   a terminal loses output that starts with a byte 0-2, and its first
//!   size comes late).
//!
//! [`Gateway::start`] binds and serves; the [`GatewayHandle`] tells the port
//! and stops it.

mod config;
mod forward;
mod hijack;
pub mod host_key;
mod input;
mod server;
mod session;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use bollard::Docker;
use russh::Disconnect;
use russh::keys::HashAlg;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

pub use config::SshConfig;
pub use forward::is_own_container;
pub use session::SFTP_SERVERS;

use crate::access::Access;
use server::{Connection, Shared};

/// How long a shutdown waits for connections to close after telling them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum SshError {
    #[error("host key {path}: {reason}")]
    HostKey { path: PathBuf, reason: String },
    #[error("listening on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("ssh: {0}")]
    Ssh(#[from] russh::Error),
    #[error("container engine: {0}")]
    Engine(String),
    #[error("the container engine did not answer in time")]
    EngineTimeout,
    #[error("the renter's input was not read for {} s", input::STALL_LIMIT.as_secs())]
    InputStalled,
}

impl From<bollard::errors::Error> for SshError {
    fn from(error: bollard::errors::Error) -> Self {
        SshError::Engine(error.to_string())
    }
}

/// Starts gateways.
pub struct Gateway;

impl Gateway {
    /// Loads (or makes) the host key, binds `config.listen` and serves in
    /// the background until [`GatewayHandle::shutdown`].
    pub async fn start(
        config: SshConfig,
        docker: Docker,
        access: Arc<Access>,
    ) -> Result<GatewayHandle, SshError> {
        let host_key = host_key::load_or_generate(&config.host_key_path)?;
        let fingerprint = host_key
            .public_key()
            .fingerprint(HashAlg::Sha256)
            .to_string();
        let public_key = host_key.public_key().to_openssh().unwrap_or_default();
        let russh_config = config.russh(host_key);
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| SshError::Listen {
                    addr: config.listen,
                    source,
                })?;
        let local_addr = listener.local_addr().map_err(|source| SshError::Listen {
            addr: config.listen,
            source,
        })?;
        tracing::info!(%local_addr, host_key = %fingerprint, "SSH gateway listening");
        let (stop_tx, stop_rx) = watch::channel(false);
        let shared = Arc::new(Shared::new(docker, access, config));
        let task = tokio::spawn(serve(listener, shared, russh_config, stop_rx));
        Ok(GatewayHandle {
            local_addr,
            host_key_fingerprint: fingerprint,
            host_public_key: public_key,
            stop: stop_tx,
            task: Some(task),
        })
    }
}

/// A running gateway. Dropping it stops the gateway too (without waiting).
pub struct GatewayHandle {
    local_addr: SocketAddr,
    host_key_fingerprint: String,
    host_public_key: String,
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl GatewayHandle {
    /// The address it listens on (the port, when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// `SHA256:...`, as `ssh-keygen -lf` and OpenSSH's prompt show it.
    pub fn host_key_fingerprint(&self) -> &str {
        &self.host_key_fingerprint
    }

    /// The host key's public half (`ssh-ed25519 AAAA...`), for a
    /// `known_hosts` line.
    pub fn host_public_key(&self) -> &str {
        &self.host_public_key
    }

    /// Stops listening, disconnects every connection and waits (a few
    /// seconds at most) for them to end.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for GatewayHandle {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    russh_config: Arc<russh::server::Config>,
    mut stop: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(shared.config.max_connections));
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        tokio::select! {
            _ = stop.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((socket, peer)) => {
                    let Ok(slot) = slots.clone().try_acquire_owned() else {
                        tracing::warn!(%peer, "SSH connection refused: too many connections");
                        drop(socket);
                        continue;
                    };
                    let shared = shared.clone();
                    let russh_config = russh_config.clone();
                    let stop = stop.clone();
                    connections.spawn(async move {
                        connection(shared, russh_config, socket, peer, stop).await;
                        drop(slot);
                    });
                }
                Err(error) => {
                    // Out of file descriptors, most likely: wait rather
                    // than spin.
                    tracing::warn!(%error, "accepting an SSH connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
    drop(listener);
    // Each connection saw the stop too and is disconnecting.
    if tokio::time::timeout(SHUTDOWN_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await
    .is_err()
    {
        connections.abort_all();
    }
    tracing::info!("SSH gateway stopped");
}

async fn connection(
    shared: Arc<Shared>,
    russh_config: Arc<russh::server::Config>,
    socket: TcpStream,
    peer: SocketAddr,
    mut stop: watch::Receiver<bool>,
) {
    let _ = socket.set_nodelay(true);
    let auth_timeout = shared.config.auth_timeout;
    let authenticated = Arc::new(AtomicBool::new(false));
    let backlog = Arc::new(input::Backlog::default());
    let handler = Connection::new(shared, Some(peer), authenticated.clone(), backlog.clone());
    let socket = input::Throttled::new(socket, backlog);
    // The client's version line is read before run_stream returns: bound it
    // too, or a silent client would hold a connection slot.
    let running = match tokio::time::timeout(
        auth_timeout,
        russh::server::run_stream(russh_config, socket, handler),
    )
    .await
    {
        Ok(Ok(running)) => running,
        Ok(Err(error)) => {
            tracing::debug!(%peer, %error, "SSH connection setup failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "SSH client sent no version line in time");
            return;
        }
    };
    let handle = running.handle();
    let mut running = running;
    let auth_deadline = tokio::time::sleep(auth_timeout);
    tokio::pin!(auth_deadline);
    let mut deadline_passed = false;
    loop {
        tokio::select! {
            result = &mut running => {
                if let Err(error) = result {
                    tracing::debug!(%peer, %error, "SSH connection ended with an error");
                }
                return;
            }
            () = &mut auth_deadline, if !deadline_passed => {
                deadline_passed = true;
                if !authenticated.load(std::sync::atomic::Ordering::SeqCst) {
                    tracing::info!(%peer, "SSH login timed out");
                    let _ = handle
                        .disconnect(Disconnect::ByApplication, "login timed out".into(), String::new())
                        .await;
                }
            }
            _ = stop.changed() => {
                let _ = handle
                    .disconnect(Disconnect::ByApplication, "the gateway is shutting down".into(), String::new())
                    .await;
                let _ = tokio::time::timeout(SHUTDOWN_GRACE, &mut running).await;
                return;
            }
        }
    }
}
