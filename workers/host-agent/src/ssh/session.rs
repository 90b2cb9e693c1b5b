//! One SSH session channel bridged to one process in the instance's
//! container, through the engine's exec API: the renter's shell, command or
//! sftp-server. Output goes back on the channel (stdout as data, stderr as
//! extended data when there is no TTY), the renter's input goes to the
//! process's stdin (EOF included), and the process's exit code becomes the
//! channel's `exit-status`, so `ssh host 'exit 3'; echo $?` prints 3.

use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, ResizeExecOptions, StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use futures_util::StreamExt;
use russh::ChannelWriteHalf;
use russh::server::Msg;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use uuid::Uuid;

use super::{SshError, hijack, input};

/// Where an image keeps OpenSSH's sftp-server, in the order tried.
pub const SFTP_SERVERS: [&str; 4] = [
    "/usr/lib/openssh/sftp-server",
    "/usr/libexec/openssh/sftp-server",
    "/usr/lib/sftp-server",
    "/usr/libexec/sftp-server",
];

/// The terminal a `pty-req` asked for.
#[derive(Debug, Clone)]
pub struct PtyRequest {
    pub term: String,
    pub cols: u32,
    pub rows: u32,
}

/// What a session channel runs.
#[derive(Debug, Clone)]
pub enum Program {
    /// `shell`: bash when the image has it, else sh, as a login shell.
    Shell,
    /// `exec "cmd"`: `/bin/sh -c cmd`.
    Command(String),
    /// `subsystem sftp`: the image's sftp-server at this path.
    Sftp(String),
}

impl Program {
    fn argv(&self) -> Vec<String> {
        match self {
            Program::Shell => vec![
                "/bin/sh".into(),
                "-c".into(),
                "[ -x /bin/bash ] && exec /bin/bash -l; exec /bin/sh -l".into(),
            ],
            Program::Command(cmd) => vec!["/bin/sh".into(), "-c".into(), cmd.clone()],
            Program::Sftp(path) => vec![path.clone()],
        }
    }

    /// For the log: what kind of program, never the command itself.
    pub fn kind(&self) -> &'static str {
        match self {
            Program::Shell => "shell",
            Program::Command(_) => "exec",
            Program::Sftp(_) => "sftp",
        }
    }
}

/// Aborts its task when dropped: a channel's tasks end with the channel or
/// the connection, never outlive them.
pub struct TaskGuard(tokio::task::AbortHandle);

impl TaskGuard {
    pub fn spawn<F>(future: F) -> Self
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        Self(tokio::spawn(future).abort_handle())
    }
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A process running for a session channel.
pub struct Running {
    pub exec_id: String,
    /// Renter input for the process; dropping it is the renter's EOF.
    /// Unbounded: [`input::Backlog`] bounds what a connection holds.
    pub stdin: Option<mpsc::UnboundedSender<input::Chunk>>,
    pub tty: bool,
    /// Whether the channel's end hangs the process up (see [`hang_up`]).
    hang_up: bool,
    /// Set when the process's output ended (it exited).
    ended: Arc<AtomicBool>,
    docker: Docker,
    container: String,
    _output: TaskGuard,
}

impl Drop for Running {
    /// The channel ended (closed by the renter, the connection dropped or
    /// access revoked) while the process still runs.
    fn drop(&mut self) {
        if !self.hang_up || self.ended.load(Ordering::SeqCst) {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let docker = self.docker.clone();
            let container = std::mem::take(&mut self.container);
            let exec_id = std::mem::take(&mut self.exec_id);
            runtime.spawn(async move { hang_up(&docker, &container, &exec_id).await });
        }
    }
}

/// Sends SIGHUP to a session's process (and its process group) that
/// outlived its channel, as the kernel does when an sshd session's terminal
/// goes away: the engine keeps an exec's terminal open after the client is
/// gone, so without this every dropped connection would leave a shell
/// behind. The engine reports the host's pid; the container's own is in
/// the host's `/proc/<pid>/status` (`NSpid`), read here because the agent
/// runs on the host. Best effort: failures are only logged.
async fn hang_up(docker: &Docker, container: &str, exec_id: &str) {
    let Ok(state) = docker.inspect_exec(exec_id).await else {
        return;
    };
    let Some(host_pid) = state.pid.filter(|p| *p > 0) else {
        return;
    };
    if state.running != Some(true) {
        return;
    }
    let Some(pid) = std::fs::read_to_string(format!("/proc/{host_pid}/status"))
        .ok()
        .and_then(|status| container_pid(&status))
    else {
        tracing::debug!(
            host_pid,
            "no container pid for a session process to hang up"
        );
        return;
    };
    let kill = async {
        let exec = docker
            .create_exec(
                container,
                CreateExecOptions {
                    cmd: Some(vec![
                        "/bin/sh".to_string(),
                        "-c".to_string(),
                        format!("kill -HUP -{pid} {pid} 2>/dev/null"),
                    ]),
                    ..Default::default()
                },
            )
            .await?;
        docker
            .start_exec(
                &exec.id,
                Some(StartExecOptions {
                    detach: true,
                    ..Default::default()
                }),
            )
            .await
    };
    match kill.await {
        Ok(_) => tracing::debug!(pid, "hung up a session's process"),
        Err(error) => tracing::debug!(%error, "hanging up a session's process failed"),
    }
}

/// The pid in the innermost pid namespace, from `/proc/<pid>/status`.
fn container_pid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("NSpid:"))
        .and_then(|pids| pids.split_whitespace().last())
        .and_then(|pid| pid.parse().ok())
        .filter(|pid| *pid > 1)
}

/// Finds the image's sftp-server (the first of [`SFTP_SERVERS`] that is
/// executable), or None.
pub async fn find_sftp_server(
    docker: &Docker,
    container: &str,
    timeout: Duration,
) -> Result<Option<String>, SshError> {
    let script = format!(
        "for p in {}; do if [ -x \"$p\" ]; then echo \"$p\"; exit 0; fi; done; exit 1",
        SFTP_SERVERS.join(" ")
    );
    let probe = async {
        let exec = docker
            .create_exec(
                container,
                CreateExecOptions {
                    attach_stdout: Some(true),
                    attach_stderr: Some(false),
                    cmd: Some(vec!["/bin/sh".to_string(), "-c".to_string(), script]),
                    ..Default::default()
                },
            )
            .await?;
        let mut out = Vec::new();
        if let StartExecResults::Attached { mut output, .. } =
            docker.start_exec(&exec.id, None).await?
        {
            while let Some(chunk) = output.next().await {
                match chunk? {
                    LogOutput::StdOut { message } | LogOutput::Console { message } => {
                        out.extend_from_slice(&message)
                    }
                    _ => {}
                }
                if out.len() > 4096 {
                    break;
                }
            }
        }
        Ok::<_, bollard::errors::Error>(out)
    };
    let out = tokio::time::timeout(timeout, probe)
        .await
        .map_err(|_| SshError::EngineTimeout)??;
    let found = String::from_utf8_lossy(&out).trim().to_string();
    Ok(SFTP_SERVERS
        .iter()
        .find(|p| **p == found)
        .map(|p| (*p).to_string()))
}

/// The container engine, as the sessions use it.
pub struct Engine<'a> {
    pub docker: &'a Docker,
    /// Its unix socket, for TTY sessions' raw stream ([`super::hijack`]).
    pub socket: Option<&'a Path>,
    /// Longest wait for one engine call while a session starts.
    pub timeout: Duration,
}

/// Starts `program` in `container` and bridges it to the channel whose
/// write half is `channel`. Returns once the process runs; the bridging
/// goes on in a task that ends the channel (exit-status, EOF, close) when
/// the process ends.
pub async fn start(
    engine: &Engine<'_>,
    container: &str,
    instance: Uuid,
    program: &Program,
    pty: Option<&PtyRequest>,
    channel: ChannelWriteHalf<Msg>,
) -> Result<Running, SshError> {
    let docker = engine.docker;
    let timeout = engine.timeout;
    let tty = pty.is_some();
    let env = pty.map(|p| vec![format!("TERM={}", p.term)]);
    let mut config: ExecConfig = CreateExecOptions {
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(tty),
        env,
        cmd: Some(program.argv()),
        ..Default::default()
    }
    .into();
    config.console_size = pty
        .filter(|p| p.cols > 0 && p.rows > 0)
        .map(|p| vec![p.rows as usize, p.cols as usize]);
    let create = docker.create_exec(container, config);
    let exec_id = tokio::time::timeout(timeout, create)
        .await
        .map_err(|_| SshError::EngineTimeout)??
        .id;
    let clamp = |v: u32| u16::try_from(v).unwrap_or(u16::MAX);
    let (rows, cols) = pty.map_or((0, 0), |p| (clamp(p.rows), clamp(p.cols)));
    let (output, input): (Output, Input) = match engine.socket.filter(|_| tty) {
        Some(socket) => {
            let attached =
                tokio::time::timeout(timeout, hijack::start_tty(socket, &exec_id, rows, cols))
                    .await
                    .map_err(|_| SshError::EngineTimeout)?
                    .map_err(|e| SshError::Engine(e.to_string()))?;
            let (read, write) = attached.stream.into_split();
            (raw_output(attached.early, read), Box::pin(write))
        }
        None => {
            let options = StartExecOptions {
                detach: false,
                tty,
                output_capacity: None,
            };
            let results = tokio::time::timeout(timeout, docker.start_exec(&exec_id, Some(options)))
                .await
                .map_err(|_| SshError::EngineTimeout)??;
            let StartExecResults::Attached { output, input } = results else {
                return Err(SshError::Engine("the exec started detached".into()));
            };
            (Box::pin(output.map(Chunk::from)), input)
        }
    };
    // A client without a terminal of its own (`ssh -tt` from a script)
    // asks for 0x0: leave the engine's default then, as sshd does.
    if let Some(pty) = pty.filter(|p| p.cols > 0 && p.rows > 0) {
        resize(docker, &exec_id, pty.cols, pty.rows).await;
    }

    let (stdin_tx, stdin_rx) = mpsc::unbounded_channel();
    let stdin_task = TaskGuard::spawn(feed_stdin(input, stdin_rx, tty));
    let ended = Arc::new(AtomicBool::new(false));
    let exec = ExecRef {
        docker: docker.clone(),
        id: exec_id.clone(),
        instance,
        timeout,
    };
    let output_task = TaskGuard::spawn(pump_output(
        exec,
        output,
        channel,
        stdin_task,
        ended.clone(),
    ));
    Ok(Running {
        exec_id,
        stdin: Some(stdin_tx),
        tty,
        // A terminal's processes get SIGHUP when it goes away; sftp-server
        // would wait forever for requests. A plain command goes on, as
        // under sshd (`nohup` is not needed for it).
        hang_up: tty || matches!(program, Program::Sftp(_)),
        ended,
        docker: docker.clone(),
        container: container.to_string(),
        _output: output_task,
    })
}

/// A piece of a process's output.
enum Chunk {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    /// The stream broke (logged, then treated as its end).
    Broken(String),
    /// Nothing for the renter (the engine's echo of stdin).
    Nothing,
}

impl From<Result<LogOutput, bollard::errors::Error>> for Chunk {
    fn from(item: Result<LogOutput, bollard::errors::Error>) -> Self {
        match item {
            Ok(LogOutput::StdOut { message }) | Ok(LogOutput::Console { message }) => {
                Chunk::Stdout(message.to_vec())
            }
            Ok(LogOutput::StdErr { message }) => Chunk::Stderr(message.to_vec()),
            Ok(LogOutput::StdIn { .. }) => Chunk::Nothing,
            Err(error) => Chunk::Broken(error.to_string()),
        }
    }
}

type Output = Pin<Box<dyn futures_util::Stream<Item = Chunk> + Send>>;
type Input = Pin<Box<dyn tokio::io::AsyncWrite + Send>>;

/// A TTY's raw bytes as output chunks: first what came with the engine's
/// response head, then what the socket brings.
fn raw_output(early: Vec<u8>, read: tokio::net::unix::OwnedReadHalf) -> Output {
    let early = (!early.is_empty()).then_some(Chunk::Stdout(early));
    let rest = futures_util::stream::unfold(read, |mut read| async move {
        let mut buf = vec![0u8; 32 * 1024];
        match read.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Chunk::Stdout(buf), read))
            }
            Err(error) => Some((Chunk::Broken(error.to_string()), read)),
        }
    });
    Box::pin(futures_util::stream::iter(early).chain(rest))
}

/// Tells the engine the terminal's new size. Failures are only logged: a
/// missed resize leaves a wrongly wrapped screen, not a broken session.
pub async fn resize(docker: &Docker, exec_id: &str, cols: u32, rows: u32) {
    let clamp = |v: u32| u16::try_from(v).unwrap_or(u16::MAX).max(1);
    let options = ResizeExecOptions {
        width: clamp(cols),
        height: clamp(rows),
    };
    if let Err(error) = docker.resize_exec(exec_id, options).await {
        tracing::debug!(%error, "resizing the exec's terminal failed");
    }
}

async fn feed_stdin(mut input: Input, mut rx: mpsc::UnboundedReceiver<input::Chunk>, tty: bool) {
    while let Some(chunk) = rx.recv().await {
        if input.write_all(chunk.bytes()).await.is_err() || input.flush().await.is_err() {
            return;
        }
    }
    // The renter's EOF. Without a TTY it closes the process's stdin (`echo
    // abc | ssh host cat` ends). With one, sshd keeps the terminal open too:
    // the shell ends on `exit` or ^D, not when the client's stdin ends. The
    // write half stays open until the process ends, for the same reason.
    if !tty {
        let _ = input.shutdown().await;
    }
    std::future::pending::<()>().await;
}

/// The exec a channel runs, for the end of its output.
struct ExecRef {
    docker: Docker,
    id: String,
    instance: Uuid,
    timeout: Duration,
}

async fn pump_output(
    exec: ExecRef,
    mut output: Output,
    channel: ChannelWriteHalf<Msg>,
    stdin_task: TaskGuard,
    ended: Arc<AtomicBool>,
) {
    let instance = exec.instance;
    let mut stdout = channel.make_writer();
    let mut stderr = channel.make_writer_ext(Some(1));
    while let Some(chunk) = output.next().await {
        let written = match chunk {
            Chunk::Stdout(bytes) => stdout.write_all(&bytes).await,
            Chunk::Stderr(bytes) => stderr.write_all(&bytes).await,
            Chunk::Nothing => Ok(()),
            Chunk::Broken(error) => {
                tracing::debug!(%instance, %error, "the exec's output stream broke");
                break;
            }
        };
        if written.is_err() {
            // The channel is gone (the renter closed it): nobody to tell.
            return;
        }
    }
    ended.store(true, Ordering::SeqCst);
    drop(stdin_task);
    let code = exit_code(&exec.docker, &exec.id, exec.timeout).await;
    tracing::debug!(%instance, ?code, "session process ended");
    let _ = channel.eof().await;
    if let Some(code) = code {
        let _ = channel
            .exit_status(u32::try_from(code).unwrap_or(255))
            .await;
    }
    let _ = channel.close().await;
}

/// The exec's exit code, once the engine reports it ended. The output
/// stream ends as the process does, but the engine may take a moment to
/// record the exit.
async fn exit_code(docker: &Docker, exec_id: &str, timeout: Duration) -> Option<i64> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match docker.inspect_exec(exec_id).await {
            Ok(state) if state.running != Some(true) => return state.exit_code,
            Ok(_) => {}
            Err(error) => {
                tracing::debug!(%error, "inspecting the exec failed");
                return None;
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_container_pid_is_the_innermost_one() {
        let status = "Name:\tsh\nTgid:\t4242\nNSpid:\t4242\t7\nNSpgid:\t4242\t7\n";
        assert_eq!(container_pid(status), Some(7));
        // Not in a pid namespace of its own: nothing to hang up safely
        // from inside a container.
        assert_eq!(container_pid("NSpid:\t1\n"), None);
        assert_eq!(container_pid("Name:\tsh\n"), None);
    }
}
