//! The container executor against a real engine: Podman's Docker-compatible
//! service on a socket of each test's own (`podman --runtime runc system
//! service`), the offline test image `localhost/gpumarket-test:latest`
//! (built by `deploy/local/podman-engine.sh image` when missing), and for
//! pulls a local `docker-registry`. Each test uses its own machine and
//! instance ids and removes everything labelled with its machine at the end,
//! passed or failed. The tests take turns (a lock file across test
//! processes): Podman services started side by side on one storage pick
//! bridge names and subnets from their own view of the networks, and two
//! instances could end up on one bridge, which is a test artefact (a host
//! runs one engine) that would make the isolation check meaningless.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use contracts::ids::{InstanceId, MachineId, TenantId};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::{
    ListContainersOptionsBuilder, ListNetworksOptionsBuilder, ListVolumesOptionsBuilder,
};
use chrono::Utc;
use gpumarket_host_agent::access::Access;
use gpumarket_host_agent::engine::container::exec;
use gpumarket_host_agent::engine::{ContainerExecutor, EngineConfig};
use gpumarket_host_agent::names;
use gpumarket_host_agent::protocol::{AgentCommand, InstanceRef, RentalSpec, StepDetail};
use gpumarket_host_agent::{Executor, Inventory, Progress};
use uuid::Uuid;

const IMAGE: &str = "localhost/gpumarket-test:latest";
const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEezKSUQRzSEtELYumN2ElvQTzmNK/fPvLzfV5tmBVGu renter@laptop";
const PROVISION: [&str; 8] = [
    "validate_host",
    "pull_image",
    "bind_gpus",
    "attach_network",
    "create_volume",
    "start_container",
    "authorize_ssh",
    "readiness_check",
];
const DEPROVISION: [&str; 6] = [
    "revoke_ssh",
    "stop_container",
    "unbind_gpus",
    "detach_network",
    "wipe_volume",
    "validate_clean",
];

fn podman() -> Command {
    let mut command = Command::new("podman");
    command.args(["--runtime", "runc"]);
    command
}

fn ensure_image() {
    let exists = podman()
        .args(["image", "exists", IMAGE])
        .status()
        .is_ok_and(|s| s.success());
    if !exists {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/local/podman-engine.sh");
        let status = Command::new("bash")
            .arg(script)
            .arg("image")
            .status()
            .unwrap();
        assert!(status.success(), "building the test image failed");
    }
}

/// One engine test at a time, across test processes (see the top).
fn take_turn() -> std::fs::File {
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(std::env::temp_dir().join("gpumarket-engine-tests.lock"))
        .unwrap();
    lock.lock().unwrap();
    lock
}

/// A private Podman service; stopped, its directory removed, on drop.
struct Engine {
    child: Child,
    dir: PathBuf,
    socket: PathBuf,
}

impl Engine {
    async fn start(env: &[(&str, &Path)]) -> Engine {
        ensure_image();
        let dir = std::env::temp_dir().join(format!("gpm-engine-{}", Uuid::now_v7()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("podman.sock");
        let log = std::fs::File::create(dir.join("podman.log")).unwrap();
        let mut command = podman();
        command
            .args(["system", "service", "--time=0"])
            .arg(format!("unix://{}", socket.display()))
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        for (name, value) in env {
            command.env(name, value);
        }
        let child = command.spawn().unwrap();
        let engine = Engine { child, dir, socket };
        for _ in 0..100 {
            if engine.socket.exists()
                && let Ok(docker) = engine.docker()
                && docker.ping().await.is_ok()
            {
                return engine;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "the podman service did not answer on {}",
            engine.socket.display()
        );
    }

    fn docker(&self) -> Result<Docker, bollard::errors::Error> {
        Docker::connect_with_unix(
            &self.socket.to_string_lossy(),
            120,
            bollard::API_DEFAULT_VERSION,
        )
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An executor on a simulated machine of `gpus` GPUs, with its own engine
/// and state; everything labelled with the machine is removed on drop.
struct Rig {
    exec: ContainerExecutor,
    access: Arc<Access>,
    machine: Uuid,
    state: PathBuf,
    docker: Docker,
    // Last: the engine stops after the sweep.
    _engine: Engine,
}

impl Rig {
    async fn new(gpus: u32, tweak: impl FnOnce(&mut EngineConfig)) -> Rig {
        Rig::with_engine(Engine::start(&[]).await, gpus, tweak).await
    }

    async fn with_engine(engine: Engine, gpus: u32, tweak: impl FnOnce(&mut EngineConfig)) -> Rig {
        let machine = Uuid::now_v7();
        let state = engine.dir.join("state");
        let access = Arc::new(Access::open(state.join("keys")).unwrap());
        let mut config = EngineConfig::new(&engine.socket, &state);
        config.public_host = "gpu-host.example".into();
        config.port_range = (41000, 41999);
        // The test image's shell ignores SIGTERM.
        config.stop_grace_seconds = 1;
        tweak(&mut config);
        let inventory = Inventory::simulated(gpus, "RTX 4090", 24, "12.4", "550.54.15");
        let exec =
            ContainerExecutor::connect(config, MachineId(machine), &inventory, access.clone())
                .await
                .unwrap();
        let docker = exec.docker().clone();
        Rig {
            exec,
            access,
            machine,
            state,
            docker,
            _engine: engine,
        }
    }

    fn spec(&self) -> RentalSpec {
        RentalSpec {
            gpu_indices: Vec::new(),
            mig: None,
            instance_id: InstanceId(Uuid::now_v7()),
            tenant_id: TenantId(Uuid::now_v7()),
            machine_id: MachineId(self.machine),
            gpu_count: 1,
            machine_gpu_count: 2,
            image: IMAGE.into(),
            ssh_public_key: Some(KEY.into()),
            command: None,
            env: [("SECRET_TOKEN".to_owned(), "hunter2".to_owned())].into(),
            ports: vec![8080],
            disk_gib: Some(1),
            attempt: 1,
        }
    }

    fn command(&self, action: &str, step: &str, job: serde_json::Value) -> AgentCommand {
        AgentCommand {
            command_id: Uuid::now_v7(),
            machine_id: MachineId(self.machine),
            action: action.into(),
            step: step.into(),
            job,
            issued_at: Utc::now(),
            deadline: Utc::now() + chrono::Duration::minutes(5),
        }
    }

    async fn provision(&self, spec: &RentalSpec, step: &str) -> Result<Option<StepDetail>, String> {
        let command = self.command("provision", step, serde_json::to_value(spec).unwrap());
        self.exec.execute(&command, Progress::none()).await
    }

    async fn instance(&self, action: &str, step: &str, instance: Uuid) -> Result<(), String> {
        let job = serde_json::to_value(InstanceRef {
            instance_id: InstanceId(instance),
            machine_id: MachineId(self.machine),
        })
        .unwrap();
        let command = self.command(action, step, job);
        self.exec
            .execute(&command, Progress::none())
            .await
            .map(|_| ())
    }

    /// All provisioning steps; the readiness check's detail.
    async fn provision_all(&self, spec: &RentalSpec) -> StepDetail {
        let mut detail = None;
        for step in PROVISION {
            detail = self
                .provision(spec, step)
                .await
                .unwrap_or_else(|e| panic!("{step}: {e}"));
        }
        detail.expect("the readiness check answers with the connection")
    }

    async fn deprovision_all(&self, instance: Uuid) {
        for step in DEPROVISION {
            self.instance("deprovision", step, instance)
                .await
                .unwrap_or_else(|e| panic!("{step}: {e}"));
        }
    }

    async fn sh(&self, instance: Uuid, script: &str) -> (i64, String) {
        exec(
            &self.docker,
            &names::container(instance),
            &["sh", "-c", script],
        )
        .await
        .unwrap()
    }

    /// Names of containers, networks and volumes labelled with `instance`.
    async fn labelled(&self, instance: Uuid) -> Vec<String> {
        let filters = HashMap::from([(
            "label",
            vec![format!("{}={instance}", names::LABEL_INSTANCE)],
        )]);
        let mut found = Vec::new();
        for c in self
            .docker
            .list_containers(Some(
                ListContainersOptionsBuilder::default()
                    .all(true)
                    .filters(&filters)
                    .build(),
            ))
            .await
            .unwrap()
        {
            found.push(format!("container {:?}", c.names));
        }
        for n in self
            .docker
            .list_networks(Some(
                ListNetworksOptionsBuilder::default()
                    .filters(&filters)
                    .build(),
            ))
            .await
            .unwrap()
        {
            found.push(format!("network {:?}", n.name));
        }
        for v in self
            .docker
            .list_volumes(Some(
                ListVolumesOptionsBuilder::default()
                    .filters(&filters)
                    .build(),
            ))
            .await
            .unwrap()
            .volumes
            .unwrap_or_default()
        {
            found.push(format!("volume {}", v.name));
        }
        found
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        // The CLI shares the service's storage (root): sweep by label.
        let label = format!("label={}={}", names::LABEL_MACHINE, self.machine);
        let list = |what: &[&str]| -> Vec<String> {
            let output = podman().args(what).args(["--filter", &label]).output();
            output
                .map(|o| {
                    String::from_utf8_lossy(&o.stdout)
                        .split_whitespace()
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        let containers = list(&["ps", "-aq"]);
        if !containers.is_empty() {
            let _ = podman()
                .args(["rm", "-f", "-t", "0"])
                .args(&containers)
                .stdout(Stdio::null())
                .status();
        }
        let networks = list(&["network", "ls", "-q"]);
        if !networks.is_empty() {
            let _ = podman()
                .args(["network", "rm", "-f"])
                .args(&networks)
                .stdout(Stdio::null())
                .status();
        }
        let volumes = list(&["volume", "ls", "-q"]);
        if !volumes.is_empty() {
            let _ = podman()
                .args(["volume", "rm", "-f"])
                .args(&volumes)
                .stdout(Stdio::null())
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.state);
        // The CLI's teardown drops netavark 1.4's isolation jump for every
        // network (see the engine's network module): put it back, as the
        // executor does, so tests running alongside stay isolated.
        let jump = ["FORWARD", "-j", "NETAVARK_ISOLATION_1"];
        let present = Command::new("iptables")
            .args(["-w", "-C"])
            .args(jump)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        let chain = Command::new("iptables")
            .args(["-w", "-n", "-L", "NETAVARK_ISOLATION_1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !present && chain {
            let _ = Command::new("iptables")
                .args(["-w", "-I"])
                .args(jump)
                .status();
        }
    }
}

/// A host listener that sends `bytes` to the first connection.
fn serve_bytes(bytes: usize) -> u16 {
    let listener = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        if let Ok((mut stream, _)) = listener.accept() {
            let _ = stream.write_all(&vec![b'x'; bytes]);
            let _ = stream.flush();
            let mut sink = [0u8; 1024];
            let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = stream.read(&mut sink);
        }
    });
    port
}

/// The instance's gateway (the host's side of its bridge). Read from the
/// container: a compatible-API read of the network would strip Podman's
/// `isolate` option (see the engine's libpod module).
async fn gateway(docker: &Docker, instance: Uuid) -> String {
    let container = docker
        .inspect_container(&names::container(instance), None)
        .await
        .unwrap();
    container
        .network_settings
        .unwrap()
        .networks
        .unwrap()
        .get(&names::network(instance))
        .unwrap()
        .gateway
        .clone()
        .unwrap()
}

async fn ip_of(docker: &Docker, instance: Uuid) -> String {
    let container = docker
        .inspect_container(&names::container(instance), None)
        .await
        .unwrap();
    container
        .network_settings
        .unwrap()
        .networks
        .unwrap()
        .get(&names::network(instance))
        .unwrap()
        .ip_address
        .clone()
        .unwrap()
}

#[tokio::test]
async fn a_rental_runs_stops_keeping_its_workspace_and_is_wiped_clean() {
    let _turn = take_turn();
    let rig = Rig::new(2, |_| {}).await;
    let spec = rig.spec();
    let instance = spec.instance_id;

    // Every step twice: the second finds what the first made.
    let mut details = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..2 {
        details.push(rig.provision_all(&spec).await);
        let c = rig
            .docker
            .inspect_container(&names::container(instance.into()), None)
            .await
            .unwrap();
        ids.push(c.id.unwrap());
    }
    assert_eq!(details[0], details[1]);
    assert_eq!(ids[0], ids[1], "a redelivered start keeps the container");
    let connection = details[0].connection.clone().unwrap();
    assert_eq!(connection.ssh_host, "gpu-host.example");
    assert_eq!(connection.ssh_port, 2222);
    assert_eq!(connection.ssh_user, instance.to_string());
    assert_eq!(connection.ports.len(), 1);
    assert_eq!(connection.ports[0].container_port, 8080);
    assert!((41000..=41999).contains(&connection.ports[0].host_port));
    assert_eq!(rig.exec.binding(instance.into()).unwrap(), Some(vec![0]));

    // Limits, security, labels, GPUs as created.
    let c = rig
        .docker
        .inspect_container(&names::container(instance.into()), None)
        .await
        .unwrap();
    let host = c.host_config.unwrap();
    assert_eq!(host.privileged, Some(false));
    assert!(
        host.security_opt
            .unwrap_or_default()
            .iter()
            .any(|o| o.starts_with("no-new-privileges"))
    );
    assert_eq!(host.pids_limit, Some(4096));
    let facts = rig.exec.facts();
    assert_eq!(host.memory, Some(facts.mem_total / 2));
    assert_eq!(host.nano_cpus, Some(facts.ncpu * 1_000_000_000 / 2));
    let ulimits: Vec<_> = host
        .ulimits
        .unwrap_or_default()
        .into_iter()
        .filter_map(|u| u.name.map(|n| n.to_ascii_lowercase()))
        .collect();
    assert!(ulimits.iter().any(|u| u.contains("nofile")), "{ulimits:?}");
    assert!(ulimits.iter().any(|u| u.contains("nproc")), "{ulimits:?}");
    let config = c.config.unwrap();
    let labels = config.labels.unwrap();
    assert_eq!(labels[names::LABEL_GPUS], "0");
    assert_eq!(labels[names::LABEL_MACHINE], rig.machine.to_string());
    assert!(
        config
            .env
            .unwrap_or_default()
            .contains(&"GPUMARKET_GPUS=0".to_owned())
    );
    assert!(rig.access.has_any(instance.into()));

    // Traffic: the container downloads 300 KB from the host.
    let before = rig.exec.traffic(MachineId(rig.machine)).await;
    let before = before
        .iter()
        .find(|c| c.instance_id == instance)
        .unwrap()
        .clone();
    let port = serve_bytes(300_000);
    let gw = gateway(&rig.docker, instance.into()).await;
    let (code, out) = rig
        .sh(instance.into(), &format!("nc -w 5 {gw} {port} | wc -c"))
        .await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.trim(), "300000");
    let after = rig.exec.traffic(MachineId(rig.machine)).await;
    let after = after.iter().find(|c| c.instance_id == instance).unwrap();
    assert!(
        after.rx_bytes >= before.rx_bytes + 300_000,
        "{before:?} -> {after:?}"
    );
    assert!(after.tx_bytes > before.tx_bytes, "{before:?} -> {after:?}");

    // The order's port is published on the host port.
    let (code, out) = rig
        .sh(
            instance.into(),
            "echo hello-from-8080 | nc -l -p 8080 >/dev/null 2>&1 & sleep 0.3",
        )
        .await;
    assert_eq!(code, 0, "{out}");
    let mut stream =
        std::net::TcpStream::connect(("127.0.0.1", connection.ports[0].host_port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut greeting = String::new();
    let _ = stream.read_to_string(&mut greeting);
    assert_eq!(greeting.trim(), "hello-from-8080");

    // A file in /workspace, measured.
    let (code, _) = rig
        .sh(
            instance.into(),
            "head -c 200000 /dev/zero > /workspace/kept && echo ok",
        )
        .await;
    assert_eq!(code, 0);
    assert!(rig.exec.disk_usage(instance.into()).await.unwrap() >= 200_000);

    // Stop, twice: container stopped and kept, volume kept, GPUs released,
    // keys revoked, nothing reported as exited.
    for _ in 0..2 {
        rig.instance("stop", "stop_instance", instance.into())
            .await
            .unwrap();
    }
    let c = rig
        .docker
        .inspect_container(&names::container(instance.into()), None)
        .await
        .unwrap();
    assert_eq!(c.state.unwrap().running, Some(false));
    rig.docker
        .inspect_volume(&names::volume(instance.into()))
        .await
        .unwrap();
    assert_eq!(rig.exec.binding(instance.into()).unwrap(), None);
    assert!(!rig.access.has_any(instance.into()));
    assert!(rig.exec.exited(MachineId(rig.machine)).await.is_empty());
    assert!(rig.exec.traffic(MachineId(rig.machine)).await.is_empty());

    // Provisioned again: the same file is there.
    let stop_decided = Utc::now();
    rig.provision_all(&spec).await;
    let (code, out) = rig.sh(instance.into(), "wc -c < /workspace/kept").await;
    assert_eq!((code, out.trim()), (0, "200000"));

    // A stop decided before that start, handled late, leaves it running.
    let mut late = rig.command(
        "stop",
        "stop_instance",
        serde_json::to_value(InstanceRef {
            instance_id: instance,
            machine_id: MachineId(rig.machine),
        })
        .unwrap(),
    );
    late.issued_at = stop_decided;
    rig.exec.execute(&late, Progress::none()).await.unwrap();
    assert!(rig.access.has_any(instance.into()));
    assert_eq!(rig.exec.binding(instance.into()).unwrap(), Some(vec![0]));
    let (code, _) = rig.sh(instance.into(), "true").await;
    assert_eq!(code, 0, "the late stop stopped the container");

    // Not clean while anything remains.
    let error = rig
        .instance("deprovision", "validate_clean", instance.into())
        .await
        .unwrap_err();
    assert!(
        error.contains(&format!("container {}", names::container(instance.into()))),
        "{error}"
    );
    assert!(
        error.contains("volume") && error.contains("GPU binding"),
        "{error}"
    );
    assert!(!error.contains("hunter2"));

    // Deprovision, every step twice.
    rig.deprovision_all(instance.into()).await;
    rig.deprovision_all(instance.into()).await;
    assert!(rig.labelled(instance.into()).await.is_empty());
    assert!(!rig.access.has_any(instance.into()));
    assert_eq!(rig.exec.binding(instance.into()).unwrap(), None);
}

#[tokio::test]
async fn a_command_that_exits_fails_readiness_with_its_output_and_is_reported() {
    let _turn = take_turn();
    let rig = Rig::new(1, |_| {}).await;
    let mut spec = rig.spec();
    spec.machine_gpu_count = 1;
    spec.attempt = 2;
    spec.command = Some(vec![
        "sh".into(),
        "-c".into(),
        "echo cannot find train.py; exit 3".into(),
    ]);
    let instance = spec.instance_id;
    for step in &PROVISION[..7] {
        rig.provision(&spec, step).await.unwrap();
    }
    // The command exits at once; give the engine a moment to notice.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let error = rig.provision(&spec, "readiness_check").await.unwrap_err();
    assert!(
        error.starts_with("the container exited with code 3: cannot find train.py"),
        "{error}"
    );
    let exited = rig.exec.exited(MachineId(rig.machine)).await;
    assert_eq!(exited.len(), 1, "{exited:?}");
    assert_eq!(exited[0].instance_id, instance);
    assert_eq!(exited[0].run, 2);
    assert_eq!(exited[0].exit_code, 3);
    assert!(!exited[0].oom_killed);
    assert!(exited[0].reason.contains("cannot find train.py"));
    assert!(exited[0].finished_at <= Utc::now());

    // A restarted agent (new executor, same state directory) still knows
    // the instance is wanted running, and its GPUs.
    let restarted = ContainerExecutor::connect(
        EngineConfig::new(&rig._engine.socket, &rig.state),
        MachineId(rig.machine),
        &Inventory::simulated(1, "RTX 4090", 24, "12.4", "550.54.15"),
        Arc::new(Access::open(rig.state.join("keys")).unwrap()),
    )
    .await
    .unwrap();
    assert_eq!(restarted.exited(MachineId(rig.machine)).await, exited);
    assert_eq!(restarted.binding(instance.into()).unwrap(), Some(vec![0]));
    drop(restarted);

    // Stopped on purpose: no longer reported.
    rig.instance("stop", "stop_instance", instance.into())
        .await
        .unwrap();
    assert!(rig.exec.exited(MachineId(rig.machine)).await.is_empty());
    rig.deprovision_all(instance.into()).await;
    assert!(rig.labelled(instance.into()).await.is_empty());
}

/// `a` cannot open a TCP connection to `b` by IP, while `b` can to itself.
async fn assert_isolated(rig: &Rig, a: Uuid, b: Uuid) {
    let ip_b = ip_of(&rig.docker, b).await;
    let listen = "nc -l -p 9000 >/dev/null 2>&1 </dev/null & sleep 0.3";
    let (code, out) = rig.sh(b, listen).await;
    assert_eq!(code, 0, "{out}");
    let (code, _) = rig.sh(b, &format!("echo hi | nc -w 2 {ip_b} 9000")).await;
    assert_eq!(code, 0, "the probe does not work: B cannot reach itself");
    rig.sh(b, listen).await;
    let (code, _) = rig.sh(a, &format!("echo hi | nc -w 2 {ip_b} 9000")).await;
    assert_ne!(code, 0, "instance A reached instance B at {ip_b}");
}

#[tokio::test]
async fn two_instances_cannot_reach_each_other() {
    let _turn = take_turn();
    let rig = Rig::new(2, |_| {}).await;
    let (a, b) = (rig.spec(), rig.spec());
    rig.provision_all(&a).await;
    rig.provision_all(&b).await;
    assert_ne!(
        rig.exec.binding(a.instance_id.into()).unwrap(),
        rig.exec.binding(b.instance_id.into()).unwrap()
    );
    let detail_a = rig.provision(&a, "readiness_check").await.unwrap().unwrap();
    let detail_b = rig.provision(&b, "readiness_check").await.unwrap().unwrap();
    assert_ne!(
        detail_a.connection.unwrap().ports[0].host_port,
        detail_b.connection.unwrap().ports[0].host_port
    );
    // A third instance wants both GPUs: none left.
    let mut greedy = rig.spec();
    greedy.gpu_count = 1;
    let error = rig.provision(&greedy, "bind_gpus").await.unwrap_err();
    assert!(error.contains("not enough free GPUs"), "{error}");

    assert_isolated(&rig, a.instance_id.into(), b.instance_id.into()).await;
    // Still after a stop and a start again (the engine re-reads the
    // networks when it starts their containers).
    for spec in [&a, &b] {
        rig.instance("stop", "stop_instance", spec.instance_id.into())
            .await
            .unwrap();
    }
    rig.provision_all(&a).await;
    rig.provision_all(&b).await;
    assert_isolated(&rig, a.instance_id.into(), b.instance_id.into()).await;
    // And after a third instance came and went (netavark 1.4's teardown
    // drops the jump to its isolation chain; the executor puts it back).
    let mut c = rig.spec();
    c.gpu_count = 0;
    rig.provision_all(&c).await;
    rig.deprovision_all(c.instance_id.into()).await;
    assert_isolated(&rig, a.instance_id.into(), b.instance_id.into()).await;

    for spec in [&a, &b] {
        rig.deprovision_all(spec.instance_id.into()).await;
        assert!(rig.labelled(spec.instance_id.into()).await.is_empty());
    }
}

/// A `docker-registry` on 127.0.0.1; killed on drop.
struct Registry {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl Registry {
    fn start() -> Registry {
        let dir = std::env::temp_dir().join(format!("gpm-registry-{}", Uuid::now_v7()));
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = dir.join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
                dir.join("data").display()
            ),
        )
        .unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Registry { child, dir, port }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test]
async fn images_are_pulled_from_allowed_registries_within_limits() {
    let _turn = take_turn();
    let registry = Registry::start();
    let host = format!("127.0.0.1:{}", registry.port);
    let conf = registry.dir.join("registries.conf");
    std::fs::write(
        &conf,
        format!("[[registry]]\nlocation = \"{host}\"\ninsecure = true\n"),
    )
    .unwrap();
    ensure_image();
    let pushed = format!("{host}/gpm/test:{}", Uuid::now_v7().simple());
    let status = podman()
        .args(["push", "--quiet", "--tls-verify=false", IMAGE, &pushed])
        .status()
        .unwrap();
    assert!(status.success(), "pushing to the local registry failed");

    let engine = Engine::start(&[("CONTAINERS_REGISTRIES_CONF", conf.as_path())]).await;
    let allowed = vec![host.clone()];
    let rig = Rig::with_engine(engine, 1, move |c| c.allowed_registries = allowed).await;
    let mut spec = rig.spec();
    spec.image = pushed.clone();
    let result = rig.provision(&spec, "pull_image").await;
    // Removed whatever happened: the image is the test's own.
    let cleanup = || {
        let _ = podman()
            .args(["rmi", "-f", &pushed])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    };
    if let Err(error) = &result {
        cleanup();
        panic!("pull: {error}");
    }
    assert!(rig.docker.inspect_image(&pushed).await.is_ok());
    // Present: not pulled again, still fine.
    assert!(rig.provision(&spec, "pull_image").await.is_ok());

    spec.image = format!("{host}/gpm/missing:1");
    let error = rig.provision(&spec, "pull_image").await.unwrap_err();
    assert!(error.contains("not found"), "{error}");

    spec.image = "docker.io/library/busybox:latest".into();
    let error = rig.provision(&spec, "pull_image").await.unwrap_err();
    assert_eq!(error, "registry docker.io is not allowed on this machine");
    drop(rig);

    // Too large: the present image is refused (and removed).
    let engine = Engine::start(&[("CONTAINERS_REGISTRIES_CONF", conf.as_path())]).await;
    let rig = Rig::with_engine(engine, 1, |c| c.max_image_bytes = 1000).await;
    let mut spec = rig.spec();
    spec.image = pushed.clone();
    let error = rig.provision(&spec, "pull_image").await.unwrap_err();
    cleanup();
    assert!(error.starts_with("image too large"), "{error}");
}

#[tokio::test]
async fn the_host_is_checked_before_anything_is_made() {
    let _turn = take_turn();
    let rig = Rig::new(2, |_| {}).await;
    let mut spec = rig.spec();
    assert!(rig.provision(&spec, "validate_host").await.is_ok());
    spec.disk_gib = Some(1_000_000);
    let error = rig.provision(&spec, "validate_host").await.unwrap_err();
    assert!(error.starts_with("not enough free disk"), "{error}");
    // No SSH key: a clear reason, nothing authorised.
    spec.ssh_public_key = None;
    let error = rig.provision(&spec, "authorize_ssh").await.unwrap_err();
    assert_eq!(error, "the order has no SSH public key");
    assert!(!rig.access.has_any(spec.instance_id.into()));
    // A command for another machine is refused.
    spec.machine_id = MachineId(Uuid::now_v7());
    assert!(rig.provision(&spec, "bind_gpus").await.is_err());
    assert!(rig.labelled(spec.instance_id.into()).await.is_empty());

    // A job that does not decode is refused without quoting it (env
    // values are secrets).
    let mut job = serde_json::to_value(rig.spec()).unwrap();
    job["env"] = serde_json::json!({ "TOKEN": 31337 });
    let command = rig.command("provision", "bind_gpus", job);
    let error = rig
        .exec
        .execute(&command, Progress::none())
        .await
        .unwrap_err();
    assert!(
        error.starts_with("the command's job could not be read"),
        "{error}"
    );
    assert!(!error.contains("31337"), "{error}");
    // A stop carries out nothing but stop_instance.
    let error = rig
        .instance("stop", "wipe_volume", Uuid::now_v7())
        .await
        .unwrap_err();
    assert!(error.contains("unknown step"), "{error}");

    // Real GPUs need the engine's NVIDIA runtime (Podman here has none).
    let engine = Engine::start(&[]).await;
    let state = engine.dir.join("state");
    let mut inventory = Inventory::simulated(1, "RTX 4090", 24, "12.4", "550.54.15");
    inventory.simulated = false;
    let exec = ContainerExecutor::connect(
        EngineConfig::new(&engine.socket, &state),
        MachineId(rig.machine),
        &inventory,
        Arc::new(Access::open(state.join("keys")).unwrap()),
    )
    .await
    .unwrap();
    let spec = rig.spec();
    let command = rig.command(
        "provision",
        "validate_host",
        serde_json::to_value(&spec).unwrap(),
    );
    let error = exec.execute(&command, Progress::none()).await.unwrap_err();
    assert!(
        error.starts_with("the host has no NVIDIA container runtime"),
        "{error}"
    );
}
