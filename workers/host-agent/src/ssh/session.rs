//! One SSH session channel bridged to one process in the instance's
//! container, through the engine's exec API: the renter's shell, command or
//! sftp-server. Output goes back on the channel (stdout as data, stderr as
//! extended data when there is no TTY), the renter's input goes to the
//! process's stdin (EOF included), and the process's exit code becomes the
//! channel's `exit-status`, so `ssh host 'exit 3'; echo $?` prints 3.

use std::time::Duration;

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, ResizeExecOptions, StartExecOptions, StartExecResults};
use futures_util::StreamExt;
use russh::ChannelWriteHalf;
use russh::server::Msg;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use uuid::Uuid;

use super::SshError;

/// Where an image keeps OpenSSH's sftp-server, in the order tried.
pub const SFTP_SERVERS: [&str; 4] = [
    "/usr/lib/openssh/sftp-server",
    "/usr/libexec/openssh/sftp-server",
    "/usr/lib/sftp-server",
    "/usr/libexec/sftp-server",
];

/// Chunks of renter input queued for a process that is not reading its
/// stdin; past this the connection waits (TCP backpressure) instead of
/// buffering without bound.
const STDIN_QUEUE: usize = 64;

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
    pub stdin: Option<mpsc::Sender<Vec<u8>>>,
    pub tty: bool,
    _output: TaskGuard,
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

/// Starts `program` in `container` and bridges it to the channel whose
/// write half is `channel`. Returns once the process runs; the bridging
/// goes on in a task that ends the channel (exit-status, EOF, close) when
/// the process ends.
pub async fn start(
    docker: &Docker,
    container: &str,
    instance: Uuid,
    program: &Program,
    pty: Option<&PtyRequest>,
    channel: ChannelWriteHalf<Msg>,
    timeout: Duration,
) -> Result<Running, SshError> {
    let tty = pty.is_some();
    let env = pty.map(|p| vec![format!("TERM={}", p.term)]);
    let started = async {
        let exec = docker
            .create_exec(
                container,
                CreateExecOptions {
                    attach_stdin: Some(true),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    tty: Some(tty),
                    env,
                    cmd: Some(program.argv()),
                    ..Default::default()
                },
            )
            .await?;
        let results = docker
            .start_exec(
                &exec.id,
                Some(StartExecOptions {
                    detach: false,
                    tty,
                    output_capacity: None,
                }),
            )
            .await?;
        Ok::<_, bollard::errors::Error>((exec.id, results))
    };
    let (exec_id, results) = tokio::time::timeout(timeout, started)
        .await
        .map_err(|_| SshError::EngineTimeout)??;
    let StartExecResults::Attached { output, input } = results else {
        return Err(SshError::Engine("the exec started detached".into()));
    };
    if let Some(pty) = pty {
        resize(docker, &exec_id, pty.cols, pty.rows).await;
    }

    let (stdin_tx, stdin_rx) = mpsc::channel(STDIN_QUEUE);
    let stdin_task = TaskGuard::spawn(feed_stdin(input, stdin_rx, tty));
    let output_task = TaskGuard::spawn(pump_output(
        docker.clone(),
        exec_id.clone(),
        instance,
        output,
        channel,
        stdin_task,
        timeout,
    ));
    Ok(Running {
        exec_id,
        stdin: Some(stdin_tx),
        tty,
        _output: output_task,
    })
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

async fn feed_stdin(
    mut input: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    mut rx: mpsc::Receiver<Vec<u8>>,
    tty: bool,
) {
    while let Some(chunk) = rx.recv().await {
        if input.write_all(&chunk).await.is_err() || input.flush().await.is_err() {
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

type Output = std::pin::Pin<
    Box<dyn futures_util::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>,
>;

async fn pump_output(
    docker: Docker,
    exec_id: String,
    instance: Uuid,
    mut output: Output,
    channel: ChannelWriteHalf<Msg>,
    stdin_task: TaskGuard,
    timeout: Duration,
) {
    let mut stdout = channel.make_writer();
    let mut stderr = channel.make_writer_ext(Some(1));
    while let Some(chunk) = output.next().await {
        let written = match chunk {
            Ok(LogOutput::StdOut { message }) | Ok(LogOutput::Console { message }) => {
                stdout.write_all(&message).await
            }
            Ok(LogOutput::StdErr { message }) => stderr.write_all(&message).await,
            Ok(LogOutput::StdIn { .. }) => Ok(()),
            Err(error) => {
                tracing::debug!(%instance, %error, "the exec's output stream broke");
                break;
            }
        };
        if written.is_err() {
            // The channel is gone (the renter closed it): nobody to tell.
            return;
        }
    }
    drop(stdin_task);
    let code = exit_code(&docker, &exec_id, timeout).await;
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
