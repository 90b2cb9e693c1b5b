//! One SSH connection: who may log in (the user is the instance id, the key
//! must be authorised for it and the instance's container must run), the
//! renter's channels (session channels run through [`super::session`],
//! `direct-tcpip` through [`super::forward`]), and the end of the
//! connection when the instance's access is revoked. Everything else
//! (passwords, remote and agent forwarding, X11, other subsystems) is
//! refused.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bollard::Docker;
use russh::keys::HashAlg;
use russh::server::{Auth, ChannelOpenHandle, Msg, PublicKeyOffer, Session, VerifiedPublicKey};
use russh::{Channel, ChannelId, ChannelWriteHalf, Disconnect, Pty};
use tokio::sync::oneshot;
use uuid::Uuid;

use super::input::Backlog;
use super::session::{self, Program, PtyRequest, Running, TaskGuard};
use super::{SshConfig, SshError, forward};
use crate::access::{Access, SessionGuard};
use crate::names;

/// Session channels open at once on one connection (sshd's `MaxSessions`).
const MAX_SESSIONS: usize = 10;
/// Forwarded connections open at once on one connection: a browser on a
/// forwarded Jupyter opens a few at a time, each websocket one more.
const MAX_FORWARDS: usize = 64;
/// The longest user name written to the log.
const LOGGED_USER: usize = 64;

/// The instance a login names: its id, as `Connection.ssh_user` gives it
/// (hyphenated; either case).
fn instance_of(user: &str) -> Option<Uuid> {
    Uuid::try_parse(user)
        .ok()
        .filter(|id| id.hyphenated().to_string().eq_ignore_ascii_case(user))
}

/// What every connection shares.
pub struct Shared {
    pub docker: Docker,
    pub access: Arc<Access>,
    pub config: SshConfig,
    /// Open logins per instance.
    logins: Mutex<HashMap<Uuid, usize>>,
}

impl Shared {
    pub fn new(docker: Docker, access: Arc<Access>, config: SshConfig) -> Self {
        Self {
            docker,
            access,
            config,
            logins: Mutex::new(HashMap::new()),
        }
    }

    fn logins(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, usize>> {
        // The map holds plain counts; a panic elsewhere leaves them usable.
        self.logins
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One of an instance's [`SshConfig::max_sessions_per_instance`] places,
/// given back when the connection ends.
struct LoginSlot {
    shared: Arc<Shared>,
    instance: Uuid,
}

impl LoginSlot {
    fn take(shared: &Arc<Shared>, instance: Uuid) -> Option<Self> {
        let mut logins = shared.logins();
        let count = logins.entry(instance).or_insert(0);
        if *count >= shared.config.max_sessions_per_instance {
            return None;
        }
        *count += 1;
        Some(Self {
            shared: shared.clone(),
            instance,
        })
    }
}

impl Drop for LoginSlot {
    fn drop(&mut self) {
        let mut logins = self.shared.logins();
        if let Some(count) = logins.get_mut(&self.instance) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                logins.remove(&self.instance);
            }
        }
    }
}

struct Login {
    instance: Uuid,
    fingerprint: String,
    _slot: LoginSlot,
    /// Until `auth_succeeded` hands it to the revocation watcher.
    guard: Option<SessionGuard>,
}

enum ChannelState {
    /// Opened; waiting for `pty-req`, then `shell`, `exec` or `subsystem`.
    Pending {
        write: ChannelWriteHalf<Msg>,
        pty: Option<PtyRequest>,
    },
    Running(Running),
    /// A `direct-tcpip` relay.
    Forward {
        _relay: TaskGuard,
    },
}

/// The russh handler of one connection.
pub struct Connection {
    shared: Arc<Shared>,
    peer: Option<SocketAddr>,
    authenticated: Arc<AtomicBool>,
    login: Option<Login>,
    channels: HashMap<ChannelId, ChannelState>,
    /// Renter input not yet read by the connection's processes.
    input: Arc<Backlog>,
    /// Dropped with the connection, which ends the revocation watcher.
    _ended: Option<oneshot::Sender<()>>,
}

impl Connection {
    pub fn new(
        shared: Arc<Shared>,
        peer: Option<SocketAddr>,
        authenticated: Arc<AtomicBool>,
        input: Arc<Backlog>,
    ) -> Self {
        Self {
            shared,
            peer,
            authenticated,
            login: None,
            channels: HashMap::new(),
            input,
            _ended: None,
        }
    }

    fn count(&self, forwards: bool) -> usize {
        self.channels
            .values()
            .filter(|c| matches!(c, ChannelState::Forward { .. }) == forwards)
            .count()
    }

    fn instance(&self) -> Option<Uuid> {
        self.login.as_ref().map(|l| l.instance)
    }

    /// Why `user` with `key` may not log in now, if it may not.
    async fn refusal(&self, user: &str, key: &russh::keys::PublicKey) -> Option<&'static str> {
        let Some(instance) = instance_of(user) else {
            return Some("the user is not an instance id");
        };
        if !self.shared.access.allows(instance, key) {
            return Some("the key is not authorised for the instance");
        }
        let inspect = tokio::time::timeout(
            self.shared.config.engine_timeout,
            self.shared
                .docker
                .inspect_container(&names::container(instance), None),
        )
        .await;
        match inspect {
            Ok(Ok(c)) if c.state.as_ref().and_then(|s| s.running) == Some(true) => None,
            Ok(Ok(_)) => Some("the instance's container is not running"),
            Ok(Err(_)) => Some("the instance has no container"),
            Err(_) => Some("the container engine did not answer"),
        }
    }

    async fn start(
        &mut self,
        channel: ChannelId,
        program: Result<Program, &'static str>,
        session: &mut Session,
    ) -> Result<(), SshError> {
        let Some(instance) = self.instance() else {
            return Ok(session.channel_failure(channel)?);
        };
        let program = match program {
            Ok(program) => program,
            Err(reason) => {
                tracing::info!(%instance, reason, "session request refused");
                return Ok(session.channel_failure(channel)?);
            }
        };
        let Some(ChannelState::Pending { write, pty }) = self.channels.remove(&channel) else {
            // A second program on one channel, or an unknown channel.
            return Ok(session.channel_failure(channel)?);
        };
        let config = &self.shared.config;
        let engine = session::Engine {
            docker: &self.shared.docker,
            socket: config.engine_socket.as_deref(),
            timeout: config.engine_timeout,
        };
        match session::start(
            &engine,
            &names::container(instance),
            instance,
            &program,
            pty.as_ref(),
            write,
        )
        .await
        {
            Ok(running) => {
                tracing::info!(%instance, kind = program.kind(), tty = running.tty, "session started");
                self.channels
                    .insert(channel, ChannelState::Running(running));
                Ok(session.channel_success(channel)?)
            }
            Err(error) => {
                tracing::warn!(%instance, kind = program.kind(), %error, "starting the session failed");
                // The channel is of no further use; the client closes it.
                Ok(session.channel_failure(channel)?)
            }
        }
    }
}

impl russh::server::Handler for Connection {
    type Error = SshError;

    async fn auth_publickey_offered(
        &mut self,
        user: &str,
        offer: PublicKeyOffer<'_>,
    ) -> Result<Auth, SshError> {
        // Only the cheap checks here: this answers probes, not logins.
        let allowed = instance_of(user)
            .is_some_and(|instance| self.shared.access.allows(instance, offer.public_key));
        Ok(if allowed {
            Auth::Accept
        } else {
            Auth::reject()
        })
    }

    async fn auth_publickey(
        &mut self,
        user: &str,
        key: VerifiedPublicKey<'_>,
    ) -> Result<Auth, SshError> {
        let fingerprint = key.public_key.fingerprint(HashAlg::Sha256).to_string();
        let peer = self.peer.map(|p| p.to_string()).unwrap_or_default();
        if let Some(reason) = self.refusal(user, key.public_key).await {
            let user: String = user.chars().take(LOGGED_USER).collect();
            tracing::info!(user = %user.escape_debug(), %fingerprint, %peer, reason, "SSH login refused");
            return Ok(Auth::reject());
        }
        let Some(instance) = instance_of(user) else {
            return Ok(Auth::reject());
        };
        let Some(slot) = LoginSlot::take(&self.shared, instance) else {
            tracing::warn!(%instance, %fingerprint, %peer, "SSH login refused: too many sessions");
            return Ok(Auth::reject());
        };
        let Some(guard) = self.shared.access.session(instance) else {
            tracing::info!(%instance, %fingerprint, %peer, "SSH login refused: access revoked");
            return Ok(Auth::reject());
        };
        tracing::info!(%instance, %fingerprint, %peer, "SSH login");
        self.login = Some(Login {
            instance,
            fingerprint,
            _slot: slot,
            guard: Some(guard),
        });
        Ok(Auth::Accept)
    }

    async fn auth_succeeded(&mut self, session: &mut Session) -> Result<(), SshError> {
        self.authenticated.store(true, Ordering::SeqCst);
        let Some(login) = self.login.as_mut() else {
            return Ok(());
        };
        let Some(mut guard) = login.guard.take() else {
            return Ok(());
        };
        let (ended_tx, ended_rx) = oneshot::channel();
        self._ended = Some(ended_tx);
        let handle = session.handle();
        let instance = login.instance;
        let fingerprint = login.fingerprint.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = guard.closed() => {
                    tracing::info!(%instance, %fingerprint, "access revoked: closing the SSH connection");
                    let _ = handle
                        .disconnect(
                            Disconnect::ByApplication,
                            "access to the instance was revoked".into(),
                            String::new(),
                        )
                        .await;
                }
                _ = ended_rx => {}
            }
        });
        Ok(())
    }

    async fn channel_open_session(
        &mut self,
        channel: Channel<Msg>,
        reply: ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), SshError> {
        if self.login.is_none() || self.count(false) >= MAX_SESSIONS {
            reply
                .reject(russh::ChannelOpenFailure::ResourceShortage)
                .await;
            return Ok(());
        }
        // Session channels are driven by the handler's callbacks; their
        // read half is not needed (dropping it makes russh skip it rather
        // than queue messages for it).
        let (_read, write) = channel.split();
        self.channels
            .insert(write.id(), ChannelState::Pending { write, pty: None });
        reply.accept().await;
        Ok(())
    }

    async fn channel_open_direct_tcpip(
        &mut self,
        channel: Channel<Msg>,
        host_to_connect: &str,
        port_to_connect: u32,
        _originator_address: &str,
        _originator_port: u32,
        reply: ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), SshError> {
        let Some(instance) = self.instance() else {
            reply
                .reject(russh::ChannelOpenFailure::AdministrativelyProhibited)
                .await;
            return Ok(());
        };
        if self.count(true) >= MAX_FORWARDS {
            reply
                .reject(russh::ChannelOpenFailure::ResourceShortage)
                .await;
            return Ok(());
        }
        match forward::connect(
            &self.shared.docker,
            instance,
            host_to_connect,
            port_to_connect,
            self.shared.config.engine_timeout,
        )
        .await
        {
            Ok(stream) => {
                tracing::info!(%instance, port = port_to_connect, "port forward opened");
                let id = channel.id();
                reply.accept().await;
                let relay = TaskGuard::spawn(forward::relay(channel, stream, self.input.clone()));
                self.channels
                    .insert(id, ChannelState::Forward { _relay: relay });
            }
            Err(failure) => {
                tracing::info!(
                    %instance,
                    host = %host_to_connect.escape_debug(),
                    port = port_to_connect,
                    ?failure,
                    "port forward refused"
                );
                reply.reject(failure).await;
            }
        }
        Ok(())
    }

    async fn pty_request(
        &mut self,
        channel: ChannelId,
        term: &str,
        col_width: u32,
        row_height: u32,
        _pix_width: u32,
        _pix_height: u32,
        _modes: &[(Pty, u32)],
        session: &mut Session,
    ) -> Result<(), SshError> {
        match self.channels.get_mut(&channel) {
            Some(ChannelState::Pending { pty, .. }) => {
                // TERM goes into the process's environment: keep it a name.
                let term: String = term
                    .chars()
                    .filter(|c| c.is_ascii_alphanumeric() || "-_.+".contains(*c))
                    .take(64)
                    .collect();
                *pty = Some(PtyRequest {
                    term: if term.is_empty() {
                        "xterm".into()
                    } else {
                        term
                    },
                    cols: col_width,
                    rows: row_height,
                });
                Ok(session.channel_success(channel)?)
            }
            _ => Ok(session.channel_failure(channel)?),
        }
    }

    async fn env_request(
        &mut self,
        channel: ChannelId,
        _variable_name: &str,
        _variable_value: &str,
        session: &mut Session,
    ) -> Result<(), SshError> {
        // As sshd without AcceptEnv: the container's environment is the
        // renter's own, set when it was created.
        Ok(session.channel_failure(channel)?)
    }

    async fn shell_request(
        &mut self,
        channel: ChannelId,
        session: &mut Session,
    ) -> Result<(), SshError> {
        self.start(channel, Ok(Program::Shell), session).await
    }

    async fn exec_request(
        &mut self,
        channel: ChannelId,
        data: &[u8],
        session: &mut Session,
    ) -> Result<(), SshError> {
        let program = std::str::from_utf8(data)
            .map(|cmd| Program::Command(cmd.to_string()))
            .map_err(|_| "the command is not UTF-8");
        self.start(channel, program, session).await
    }

    async fn subsystem_request(
        &mut self,
        channel: ChannelId,
        name: &str,
        session: &mut Session,
    ) -> Result<(), SshError> {
        let Some(instance) = self.instance() else {
            return Ok(session.channel_failure(channel)?);
        };
        if name != "sftp" {
            return self.start(channel, Err("unknown subsystem"), session).await;
        }
        let found = session::find_sftp_server(
            &self.shared.docker,
            &names::container(instance),
            self.shared.config.engine_timeout,
        )
        .await;
        let program = match found {
            Ok(Some(path)) => Ok(Program::Sftp(path)),
            Ok(None) => Err("the image has no sftp-server"),
            Err(error) => {
                tracing::warn!(%instance, %error, "looking for sftp-server failed");
                Err("looking for sftp-server failed")
            }
        };
        self.start(channel, program, session).await
    }

    async fn window_change_request(
        &mut self,
        channel: ChannelId,
        col_width: u32,
        row_height: u32,
        _pix_width: u32,
        _pix_height: u32,
        _session: &mut Session,
    ) -> Result<(), SshError> {
        match self.channels.get_mut(&channel) {
            Some(ChannelState::Running(running))
                if running.tty && col_width > 0 && row_height > 0 =>
            {
                // Off the connection's loop: a slow engine must not stall
                // the renter's keystrokes.
                let docker = self.shared.docker.clone();
                let exec_id = running.exec_id.clone();
                tokio::spawn(async move {
                    session::resize(&docker, &exec_id, col_width, row_height).await
                });
            }
            Some(ChannelState::Pending { pty: Some(pty), .. }) => {
                pty.cols = col_width;
                pty.rows = row_height;
            }
            _ => {}
        }
        Ok(())
    }

    async fn x11_request(
        &mut self,
        channel: ChannelId,
        _single_connection: bool,
        _x11_auth_protocol: &str,
        _x11_auth_cookie: &str,
        _x11_screen_number: u32,
        session: &mut Session,
    ) -> Result<(), SshError> {
        Ok(session.channel_failure(channel)?)
    }

    async fn data(
        &mut self,
        channel: ChannelId,
        data: &[u8],
        _session: &mut Session,
    ) -> Result<(), SshError> {
        if let Some(ChannelState::Running(Running {
            stdin: Some(stdin), ..
        })) = self.channels.get(&channel)
        {
            if self.input.admit().await.is_err() {
                tracing::warn!(
                    instance = ?self.instance(),
                    held = self.input.bytes(),
                    "closing an SSH connection whose input is not being read"
                );
                return Err(SshError::InputStalled);
            }
            // A process that has ended drops the data.
            let _ = stdin.send(self.input.hold(data));
        }
        Ok(())
    }

    async fn channel_eof(
        &mut self,
        channel: ChannelId,
        _session: &mut Session,
    ) -> Result<(), SshError> {
        if let Some(ChannelState::Running(running)) = self.channels.get_mut(&channel) {
            running.stdin = None;
        }
        Ok(())
    }

    async fn channel_close(
        &mut self,
        channel: ChannelId,
        _session: &mut Session,
    ) -> Result<(), SshError> {
        // Ends the channel's tasks; a process still running in the
        // container loses its terminal or pipes.
        self.channels.remove(&channel);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_is_the_instance_id_as_written() {
        let id = Uuid::now_v7();
        assert_eq!(instance_of(&id.to_string()), Some(id));
        assert_eq!(instance_of(&id.to_string().to_uppercase()), Some(id));
        assert_eq!(instance_of(&id.simple().to_string()), None);
        assert_eq!(instance_of(&id.urn().to_string()), None);
        assert_eq!(instance_of("root"), None);
        assert_eq!(instance_of(""), None);
    }
}
