//! The SSH gateway against a real container engine (a private Podman
//! service from `deploy/local/podman-engine.sh`) and the real OpenSSH
//! client: what a renter types is what these tests run.
//!
//! Each test starts its own Podman service, container `gpm-<uuid>` from the
//! offline test image, access directory and gateway, and removes them again.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig, ResourcesUlimits};
use bollard::query_parameters::{CreateContainerOptions, RemoveContainerOptions};
use gpumarket_host_agent::access::Access;
use gpumarket_host_agent::names;
use gpumarket_host_agent::ssh::{Gateway, GatewayHandle, SshConfig};
use uuid::Uuid;

const IMAGE: &str = "localhost/gpumarket-test:latest";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn engine_script(args: &[&str]) -> String {
    let out = Command::new("bash")
        .arg(workspace().join("deploy/local/podman-engine.sh"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "podman-engine.sh {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A private Podman service, a running test container and a key for it;
/// all removed on drop.
struct Fixture {
    dir: PathBuf,
    socket: PathBuf,
    docker: Docker,
    instance: Uuid,
    access: Arc<Access>,
    key: PathBuf,
    other_key: PathBuf,
}

impl Fixture {
    async fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("gpm-ssh-test-{}", Uuid::now_v7()));
        std::fs::create_dir_all(&dir).unwrap();
        engine_script(&["image"]);
        let socket = engine_script(&["up", dir.join("engine").to_str().unwrap()]);
        let docker = Docker::connect_with_unix(
            &socket,
            120,
            &bollard::ClientVersion {
                major_version: 1,
                minor_version: 41,
            },
        )
        .unwrap();
        let instance = Uuid::now_v7();
        let fixture = Self {
            access: Arc::new(Access::open(dir.join("access")).unwrap()),
            key: keygen(&dir, "renter"),
            other_key: keygen(&dir, "stranger"),
            dir,
            socket: PathBuf::from(&socket),
            docker,
            instance,
        };
        fixture.create_container(None).await;
        let public = std::fs::read_to_string(fixture.key.with_extension("pub")).unwrap();
        fixture.access.authorize(instance, &public).unwrap();
        fixture
    }

    /// The test container; `binds` are read-only host paths to mount.
    async fn create_container(&self, binds: Option<Vec<String>>) {
        let name = names::container(self.instance);
        let ulimit = |name: &str| ResourcesUlimits {
            name: Some(name.into()),
            soft: Some(4096),
            hard: Some(4096),
        };
        self.docker
            .create_container(
                Some(CreateContainerOptions {
                    name: Some(name.clone()),
                    ..Default::default()
                }),
                ContainerCreateBody {
                    image: Some(IMAGE.into()),
                    labels: Some(
                        [(names::LABEL_INSTANCE.to_string(), self.instance.to_string())].into(),
                    ),
                    host_config: Some(HostConfig {
                        ulimits: Some(vec![ulimit("nofile"), ulimit("nproc")]),
                        binds,
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        self.docker.start_container(&name, None).await.unwrap();
    }

    async fn gateway(&self) -> GatewayHandle {
        self.gateway_with(|_| {}).await
    }

    async fn gateway_with(&self, tweak: impl FnOnce(&mut SshConfig)) -> GatewayHandle {
        let mut config = SshConfig::new(
            "127.0.0.1:0".parse().unwrap(),
            self.dir.join("host_key/ssh_host_ed25519_key"),
        );
        // Refusals are what several tests wait for.
        config.auth_rejection_time = Duration::from_millis(200);
        config.engine_socket = Some(self.socket.clone());
        tweak(&mut config);
        Gateway::start(config, self.docker.clone(), self.access.clone())
            .await
            .unwrap()
    }

    /// `ssh` with the options a script would use, as `user`, with `key`.
    fn ssh(&self, gateway: &GatewayHandle, user: &str, key: &Path) -> Command {
        let mut ssh = Command::new("ssh");
        ssh.args(["-p", &gateway.local_addr().port().to_string()])
            .arg("-i")
            .arg(key)
            .args([
                "-o",
                "StrictHostKeyChecking=no",
                "-o",
                "UserKnownHostsFile=/dev/null",
                "-o",
                "BatchMode=yes",
                "-o",
                "IdentitiesOnly=yes",
                "-o",
                "LogLevel=ERROR",
                "-o",
                "ConnectTimeout=10",
            ])
            .arg(format!("{user}@127.0.0.1"));
        ssh
    }

    fn renter(&self, gateway: &GatewayHandle) -> Command {
        self.ssh(gateway, &self.instance.to_string(), &self.key)
    }

    async fn cleanup(self) {
        let _ = self
            .docker
            .remove_container(
                &names::container(self.instance),
                Some(RemoveContainerOptions {
                    force: true,
                    ..Default::default()
                }),
            )
            .await;
        // Drop stops the engine and removes the directory.
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // A failed test skips `cleanup`: remove the container here too.
        let _ = Command::new("podman")
            .args(["--runtime", "runc", "rm", "-f", "-t", "0"])
            .arg(names::container(self.instance))
            .output();
        let _ = engine_script(&["down", self.dir.join("engine").to_str().unwrap()]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn keygen(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success());
    path
}

/// Runs `command` off the async runtime (the gateway serves on it).
async fn run(mut command: Command, stdin: &[u8]) -> Output {
    let stdin = stdin.to_vec();
    tokio::task::spawn_blocking(move || {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut pipe = child.stdin.take().unwrap();
        let writer = std::thread::spawn(move || {
            let _ = pipe.write_all(&stdin);
        });
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap();
        out
    })
    .await
    .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_prints_its_output_and_exits_with_its_code() {
    let fx = Fixture::new().await;
    let gateway = fx.gateway().await;

    let mut ssh = fx.renter(&gateway);
    ssh.arg("echo hi; echo oops >&2; exit 3");
    let out = run(ssh, b"").await;
    assert_eq!(text(&out.stdout), "hi\n");
    assert_eq!(text(&out.stderr), "oops\n", "stderr stays separate");
    assert_eq!(out.status.code(), Some(3));

    // The renter's stdin reaches the command, EOF included.
    let mut ssh = fx.renter(&gateway);
    ssh.arg("cat");
    let out = run(ssh, b"abc\n").await;
    assert_eq!(text(&out.stdout), "abc\n");
    assert_eq!(out.status.code(), Some(0));

    // A few MiB each way get through whole (flow control on both sides).
    let input = vec![b'x'; 3 << 20];
    let mut ssh = fx.renter(&gateway);
    ssh.arg("wc -c");
    let out = run(ssh, &input).await;
    assert_eq!(text(&out.stdout).trim(), (3 << 20).to_string());
    let mut ssh = fx.renter(&gateway);
    ssh.arg("head -c 5000000 /dev/zero");
    let out = run(ssh, b"").await;
    assert_eq!(out.stdout.len(), 5_000_000);
    assert_eq!(out.status.code(), Some(0));
    // Both ways at once through one process: the renter sends faster than
    // cat's output can go back, so the gateway must slow the input without
    // stopping the output (this deadlocked once).
    let input: Vec<u8> = (0..40_000_000u32).map(|i| (i % 251) as u8).collect();
    let mut ssh = fx.renter(&gateway);
    ssh.arg("cat");
    let out = tokio::time::timeout(Duration::from_secs(120), run(ssh, &input))
        .await
        .expect("cat through the gateway stalled");
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout == input, "{} bytes came back", out.stdout.len());

    gateway.shutdown().await;
    fx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strangers_and_unknown_instances_are_refused() {
    let fx = Fixture::new().await;
    let gateway = fx.gateway().await;
    let refused = |out: &Output| {
        assert_eq!(out.status.code(), Some(255), "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("Permission denied"),
            "{}",
            text(&out.stderr)
        );
        assert!(out.stdout.is_empty());
    };

    // Another key.
    let mut ssh = fx.ssh(&gateway, &fx.instance.to_string(), &fx.other_key);
    ssh.arg("echo in");
    refused(&run(ssh, b"").await);
    // The right key, another instance.
    let mut ssh = fx.ssh(&gateway, &Uuid::now_v7().to_string(), &fx.key);
    ssh.arg("echo in");
    refused(&run(ssh, b"").await);
    // Not an instance at all.
    let mut ssh = fx.ssh(&gateway, "root", &fx.key);
    ssh.arg("echo in");
    refused(&run(ssh, b"").await);
    // No password logins, even when asked for.
    let mut ssh = fx.renter(&gateway);
    ssh.args([
        "-o",
        "PreferredAuthentications=password,keyboard-interactive",
        "echo in",
    ]);
    refused(&run(ssh, b"").await);
    // An authorised key for an instance whose container is gone.
    let orphan = Uuid::now_v7();
    let public = std::fs::read_to_string(fx.key.with_extension("pub")).unwrap();
    fx.access.authorize(orphan, &public).unwrap();
    let mut ssh = fx.ssh(&gateway, &orphan.to_string(), &fx.key);
    ssh.arg("echo in");
    refused(&run(ssh, b"").await);
    // No remote forwarding.
    let mut ssh = fx.renter(&gateway);
    ssh.args([
        "-o",
        "ExitOnForwardFailure=yes",
        "-R",
        "0:127.0.0.1:9",
        "echo in",
    ]);
    let out = run(ssh, b"").await;
    assert_eq!(out.status.code(), Some(255));
    assert!(text(&out.stderr).contains("remote port forwarding failed"));
    assert!(out.stdout.is_empty());
    // No sftp-server in the test image: the subsystem is refused.
    let mut ssh = fx.renter(&gateway);
    ssh.args(["-s", "sftp"]);
    let out = run(ssh, b"").await;
    assert_eq!(out.status.code(), Some(255));
    assert!(text(&out.stderr).contains("subsystem request failed"));

    gateway.shutdown().await;
    fx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_session_runs_a_shell() {
    let fx = Fixture::new().await;
    let gateway = fx.gateway().await;

    let mut ssh = fx.renter(&gateway);
    ssh.arg("-tt");
    let out = run(
        ssh,
        b"tty\necho \"term=$TERM\"\necho pty-$((6*7))\nexit 5\n",
    )
    .await;
    let stdout = text(&out.stdout);
    assert!(stdout.contains("/dev/pts/"), "{stdout}");
    assert!(stdout.contains("pty-42"), "{stdout}");
    assert!(stdout.contains("term="), "{stdout}");
    assert_eq!(out.status.code(), Some(5), "{stdout}");

    // A command with a terminal too; every byte of the terminal's output
    // arrives, including those that look like the engine's stream headers.
    let mut ssh = fx.renter(&gateway);
    ssh.args([
        "-tt",
        "printf '\\001abc'; sleep 0.2; printf '\\000\\002xyz'; sleep 0.2; tty; exit 7",
    ]);
    let out = run(ssh, b"").await;
    assert!(
        out.stdout.starts_with(b"\x01abc\x00\x02xyz/dev/pts/"),
        "{:?}",
        text(&out.stdout)
    );
    assert_eq!(out.status.code(), Some(7));
    gateway.shutdown().await;

    // Without the engine's socket, terminals go through bollard (whose
    // decoder would have lost the bytes above) and still work.
    let gateway = fx.gateway_with(|config| config.engine_socket = None).await;
    let mut ssh = fx.renter(&gateway);
    ssh.arg("-tt");
    let out = run(ssh, b"echo pty-$((6*7))\nexit 5\n").await;
    assert!(text(&out.stdout).contains("pty-42"));
    assert_eq!(out.status.code(), Some(5));
    gateway.shutdown().await;
    fx.cleanup().await;
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Sends an HTTP request through `port` and returns what came back (empty
/// when the connection was closed without an answer), retrying while the
/// forward is not listening yet.
fn http_get(port: u16) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(mut stream) = TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], port))) {
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let _ = stream.write_all(b"GET /index.html HTTP/1.0\r\n\r\n");
            let mut answer = Vec::new();
            let _ = stream.read_to_end(&mut answer);
            return text(&answer);
        }
        assert!(Instant::now() < deadline, "the forward never listened");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn kill(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_forward_reaches_the_container_and_nothing_else() {
    let fx = Fixture::new().await;
    let gateway = fx.gateway().await;

    // busybox httpd in the container (it backgrounds itself).
    let mut ssh = fx.renter(&gateway);
    ssh.arg(
        "mkdir -p /www && echo forwarded-answer > /www/index.html && httpd -p 8080 -h /www \
         && (nc -l -p 9000 -e cat </dev/null >/dev/null 2>&1 &)",
    );
    let out = run(ssh, b"").await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // A service of the agent's host, which a renter must not reach.
    let host_service = TcpListener::bind("127.0.0.2:0").unwrap();
    let host_port = host_service.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in host_service.incoming().flatten() {
            let _ = stream.write_all(b"host-secret");
        }
    });
    let container_port = free_port();
    let elsewhere_port = free_port();
    let by_name_port = free_port();
    let echo_port = free_port();
    let mut ssh = fx.renter(&gateway);
    ssh.args(["-N", "-L"])
        .arg(format!("{container_port}:localhost:8080"))
        .arg("-L")
        .arg(format!("{elsewhere_port}:127.0.0.2:{host_port}"))
        .arg("-L")
        .arg(format!(
            "{by_name_port}:{}:8080",
            names::container(fx.instance)
        ))
        .arg("-L")
        .arg(format!("{echo_port}:127.0.0.1:9000"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let forward = ssh.spawn().unwrap();

    let answer = tokio::task::spawn_blocking(move || http_get(container_port))
        .await
        .unwrap();
    assert!(answer.contains("forwarded-answer"), "{answer}");
    // Many at once, as a browser on a forwarded notebook does.
    let answers = tokio::task::spawn_blocking(move || {
        let threads: Vec<_> = (0..24)
            .map(|_| std::thread::spawn(move || http_get(container_port)))
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    assert!(answers.iter().all(|a| a.contains("forwarded-answer")));
    // Another host: the channel is refused, the local connection closed.
    let answer = tokio::task::spawn_blocking(move || http_get(elsewhere_port))
        .await
        .unwrap();
    assert_eq!(answer, "");
    // The container's own name is the container too.
    let answer = tokio::task::spawn_blocking(move || http_get(by_name_port))
        .await
        .unwrap();
    assert!(answer.contains("forwarded-answer"), "{answer}");
    // An echo service both ways at once: 20 MB up while it comes back.
    let sent: Vec<u8> = (0..20_000_000u32).map(|i| (i % 253) as u8).collect();
    let expected = sent.clone();
    let echoed = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(15);
        let stream = loop {
            match TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], echo_port))) {
                Ok(stream) => break stream,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100))
                }
                Err(e) => panic!("{e}"),
            }
        };
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mut writer = stream.try_clone().unwrap();
        let send = std::thread::spawn(move || {
            writer.write_all(&sent).unwrap();
            writer.shutdown(std::net::Shutdown::Write).unwrap();
        });
        let mut back = Vec::new();
        (&stream)
            .read_to_end(&mut back)
            .expect("the echo through the forward stalled");
        send.join().unwrap();
        back
    })
    .await
    .unwrap();
    assert!(echoed == expected, "{} bytes came back", echoed.len());
    kill(forward);

    gateway.shutdown().await;
    fx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_access_ends_open_sessions_and_refuses_new_ones() {
    let fx = Fixture::new().await;
    let gateway = fx.gateway().await;

    let mut ssh = fx.renter(&gateway);
    ssh.arg("echo started; sleep 60")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut session = ssh.spawn().unwrap();
    let stdout = session.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        line
    })
    .await
    .unwrap();
    assert_eq!(line, "started\n");

    let revoked = Instant::now();
    fx.access.revoke(fx.instance).unwrap();
    let status = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(status) = session.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() > deadline {
                kill(session);
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .unwrap()
    .expect("the session outlived its access by 5 s");
    assert!(!status.success());
    assert!(revoked.elapsed() < Duration::from_secs(5));

    let mut ssh = fx.renter(&gateway);
    ssh.arg("echo in");
    let out = run(ssh, b"").await;
    assert_eq!(out.status.code(), Some(255));
    assert!(out.stdout.is_empty());

    gateway.shutdown().await;
    fx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_key_survives_a_restart() {
    let fx = Fixture::new().await;
    let known_hosts = fx.dir.join("known_hosts");
    let login = |gateway: &GatewayHandle, checking: &str| {
        let mut ssh = Command::new("ssh");
        ssh.args(["-p", &gateway.local_addr().port().to_string()])
            .arg("-i")
            .arg(&fx.key)
            .args(["-o", &format!("StrictHostKeyChecking={checking}")])
            .arg("-o")
            .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
            .args([
                "-o",
                "HostKeyAlias=gpm-test-gateway",
                "-o",
                "BatchMode=yes",
                "-o",
                "IdentitiesOnly=yes",
                "-o",
                "LogLevel=ERROR",
            ])
            .arg(format!("{}@127.0.0.1", fx.instance))
            .arg("echo same-host");
        ssh
    };

    let gateway = fx.gateway().await;
    let first = gateway.host_key_fingerprint().to_string();
    let out = run(login(&gateway, "accept-new"), b"").await;
    assert_eq!(text(&out.stdout), "same-host\n", "{}", text(&out.stderr));
    gateway.shutdown().await;

    let gateway = fx.gateway().await;
    assert_eq!(gateway.host_key_fingerprint(), first);
    // OpenSSH itself checks it against what it saw the first time.
    let out = run(login(&gateway, "yes"), b"").await;
    assert_eq!(text(&out.stdout), "same-host\n", "{}", text(&out.stderr));
    gateway.shutdown().await;

    fx.cleanup().await;
}

/// The container's processes (`ps` output) as the renter sees them.
async fn processes(fx: &Fixture, gateway: &GatewayHandle) -> String {
    let mut ssh = fx.renter(gateway);
    ssh.arg("ps -o pid,args");
    text(&run(ssh, b"").await.stdout)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_terminal_session_leaves_no_shell_behind() {
    let fx = Fixture::new().await;
    let gateway = fx.gateway().await;

    let mut ssh = fx.renter(&gateway);
    ssh.args(["-tt", "exec sleep 301"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let client = ssh.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !processes(&fx, &gateway).await.contains("sleep 301") {
        assert!(Instant::now() < deadline, "the session never started");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The renter's laptop goes away without a word.
    kill(client);
    let deadline = Instant::now() + Duration::from_secs(10);
    while processes(&fx, &gateway).await.contains("sleep 301") {
        assert!(
            Instant::now() < deadline,
            "the session's process outlived its terminal"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    gateway.shutdown().await;
    fx.cleanup().await;
}

/// OpenSSH's sftp-server on this machine: `GPM_TEST_SFTP_SERVER`, or
/// Debian's `openssh-sftp-server` package.
fn host_sftp_server() -> Option<PathBuf> {
    std::env::var_os("GPM_TEST_SFTP_SERVER")
        .map(PathBuf::from)
        .or_else(|| Some(PathBuf::from("/usr/lib/openssh/sftp-server")))
        .filter(|p| p.exists())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sftp_works_when_the_image_has_an_sftp_server() {
    let Some(sftp_server) = host_sftp_server() else {
        eprintln!("skipped: no sftp-server here (install openssh-sftp-server)");
        return;
    };
    let fx = Fixture::new().await;
    // The busybox image has no C library: lend it the host's, and the
    // host's sftp-server where images of other distributions keep it.
    fx.docker
        .remove_container(
            &names::container(fx.instance),
            Some(RemoveContainerOptions {
                force: true,
                ..Default::default()
            }),
        )
        .await
        .unwrap();
    fx.create_container(Some(vec![
        "/usr/lib:/lib:ro".into(),
        "/usr/lib64:/lib64:ro".into(),
        format!(
            "{}:/usr/libexec/openssh/sftp-server:ro",
            sftp_server.display()
        ),
    ]))
    .await;
    let gateway = fx.gateway().await;

    let upload = fx.dir.join("upload.bin");
    let download = fx.dir.join("download.bin");
    let content: Vec<u8> = (0..(1 << 20) + 17)
        .map(|i: u32| (i * 7 % 251) as u8)
        .collect();
    std::fs::write(&upload, &content).unwrap();
    let mut sftp = Command::new("sftp");
    sftp.args(["-P", &gateway.local_addr().port().to_string()])
        .arg("-i")
        .arg(&fx.key)
        .args([
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "LogLevel=ERROR",
            "-b",
            "-",
        ])
        .arg(format!("{}@127.0.0.1", fx.instance));
    let batch = format!(
        "put {} /tmp/up.bin\nget /tmp/up.bin {}\n",
        upload.display(),
        download.display()
    );
    let out = run(sftp, batch.as_bytes()).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(std::fs::read(&download).unwrap() == content);

    gateway.shutdown().await;
    fx.cleanup().await;
}

/// What a raw TCP client gets from the gateway before it hangs up: the
/// version line, or nothing when the connection is refused.
fn greeting_then_close(stream: &mut TcpStream) -> (String, Duration) {
    let started = Instant::now();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut seen = Vec::new();
    let _ = stream.read_to_end(&mut seen);
    (text(&seen), started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_and_sessions_are_capped_and_silent_clients_dropped() {
    let fx = Fixture::new().await;
    let gateway = fx
        .gateway_with(|config| {
            config.max_sessions_per_instance = 1;
            config.max_connections = 2;
            config.auth_timeout = Duration::from_secs(1);
        })
        .await;
    let addr = gateway.local_addr();

    // Two silent clients fill the gateway; a third is closed at once.
    let silent: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (seen, _) = tokio::task::spawn_blocking(move || {
        greeting_then_close(&mut TcpStream::connect(addr).unwrap())
    })
    .await
    .unwrap();
    assert_eq!(seen, "", "a connection over the cap is closed unanswered");
    // The silent ones are dropped once the login time is up.
    for mut stream in silent {
        let (seen, waited) = tokio::task::spawn_blocking(move || greeting_then_close(&mut stream))
            .await
            .unwrap();
        assert!(seen.starts_with("SSH-2.0-"), "{seen}");
        assert!(waited < Duration::from_secs(5), "{waited:?}");
    }

    // One session per instance here: a second login waits for the first
    // to end.
    let mut ssh = fx.renter(&gateway);
    ssh.arg("echo started; sleep 60")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut first = ssh.spawn().unwrap();
    let stdout = first.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        line
    })
    .await
    .unwrap();
    assert_eq!(line, "started\n");
    let mut ssh = fx.renter(&gateway);
    ssh.arg("echo second");
    let out = run(ssh, b"").await;
    assert_eq!(out.status.code(), Some(255), "{}", text(&out.stderr));
    kill(first);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut ssh = fx.renter(&gateway);
        ssh.arg("echo second");
        let out = run(ssh, b"").await;
        if out.status.code() == Some(0) {
            assert_eq!(text(&out.stdout), "second\n");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the first session's place was never freed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    gateway.shutdown().await;
    fx.cleanup().await;
}

/// Stops its tmux server when dropped, a failed test's too.
struct TmuxServer(PathBuf);

impl Drop for TmuxServer {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(&self.0)
            .arg("kill-server")
            .output();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_terminal_follows_the_renters_window_size() {
    let fx = Fixture::new().await;
    let gateway = fx.gateway().await;
    // tmux gives ssh a real terminal of a known size, and resizes it.
    let tmux_socket = fx.dir.join("tmux.sock");
    let out_file = fx.dir.join("sizes.txt");
    let tmux = |args: &[&str]| {
        let out = Command::new("tmux")
            .arg("-S")
            .arg(&tmux_socket)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "tmux {args:?}: {}", text(&out.stderr));
    };
    let ssh = fx.renter(&gateway);
    let mut line: Vec<String> = std::iter::once(ssh.get_program())
        .chain(ssh.get_args())
        .map(|a| format!("'{}'", a.to_str().unwrap()))
        .collect();
    line.push("-tt".into());
    line.push("'stty size; sleep 3; stty size'".into());
    let script = format!("{} > {}", line.join(" "), out_file.display());
    tmux(&["new-session", "-d", "-x", "100", "-y", "30", &script]);
    let tmux_server = TmuxServer(tmux_socket.clone());

    let sizes = || std::fs::read_to_string(&out_file).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sizes().contains('\n') {
        assert!(Instant::now() < deadline, "no first size: {:?}", sizes());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(sizes().starts_with("30 100"), "{:?}", sizes());
    tmux(&["resize-window", "-x", "120", "-y", "40"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while sizes().lines().count() < 2 {
        assert!(Instant::now() < deadline, "no second size: {:?}", sizes());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(sizes().lines().nth(1).map(str::trim), Some("40 120"));
    drop(tmux_server);

    gateway.shutdown().await;
    fx.cleanup().await;
}
