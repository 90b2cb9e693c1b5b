//! `make run`/`make test`'s readiness step, deploy/local/ensure-services.sh,
//! on a machine without the browser tests' tools: it installs Debian's
//! Chromium and Node.js through apt-get (with sudo when not root), as it
//! installs PostgreSQL and RabbitMQ, so the README's two commands need
//! nothing installed by hand. apt-get, sudo and id are stand-ins that record
//! what they were asked; the servers are the real ones the suite runs on.

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;
use std::process::Command;

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/deploy/local/ensure-services.sh"
);

fn stub(dir: &Path, name: &str, body: &str) {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/usr/bin/bash\n{body}\n")).expect("stub");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// A PATH of only what the script needs (no Chromium, no Node.js), the real
/// tools linked in, apt-get/sudo/id recording into `log`.
fn fresh_machine(dir: &Path, log: &Path) {
    for tool in [
        "bash",
        "env",
        "seq",
        "sleep",
        "psql",
        "curl",
        "pkg-config",
        "ls",
        "sort",
        "tail",
        "cat",
    ] {
        let real = ["/usr/bin", "/bin", "/usr/local/bin"]
            .iter()
            .map(|d| Path::new(d).join(tool))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("{tool} is needed by ensure-services.sh"));
        symlink(real, dir.join(tool)).expect("link");
    }
    let log = log.display();
    stub(dir, "id", "echo 1000");
    stub(
        dir,
        "sudo",
        &format!("echo \"sudo $*\" >> {log}; exec \"$@\""),
    );
    stub(dir, "apt-get", &format!("echo \"apt-get $*\" >> {log}"));
}

#[test]
fn the_readiness_step_installs_chromium_and_node_when_missing() {
    let tmp = std::env::temp_dir().join(format!("gpumarket-readiness-{}", uuid::Uuid::now_v7()));
    let bin = tmp.join("bin");
    std::fs::create_dir_all(&bin).expect("dir");
    let log = tmp.join("log");
    fresh_machine(&bin, &log);

    let run = |path: &Path| {
        Command::new("/usr/bin/bash")
            .arg(SCRIPT)
            .env_clear()
            .env("PATH", path)
            .env("HOME", &tmp)
            .output()
            .expect("run ensure-services.sh")
    };
    let out = run(&bin);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let asked = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(asked.contains("sudo apt-get update"), "{asked}");
    assert!(
        asked.contains("apt-get install -y -qq chromium nodejs"),
        "not root: through sudo, both at once:\n{asked}"
    );
    assert!(stdout.contains("installing chromium nodejs"), "{stdout}");
    // And the container engine the real-container tests drive (issue 16).
    assert!(
        asked.contains("install -y -qq podman runc"),
        "Podman and runc too:\n{asked}"
    );

    // Once they are there, nothing more is installed.
    std::fs::remove_file(&log).ok();
    stub(&bin, "chromium", "exit 0");
    stub(&bin, "node", "echo 20");
    stub(&bin, "npm", "exit 0");
    for tool in ["podman", "runc", "ssh", "docker-registry"] {
        stub(&bin, tool, "exit 0");
    }
    let out = run(&bin);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        std::fs::read_to_string(&log).unwrap_or_default().is_empty(),
        "nothing to install"
    );
    std::fs::remove_dir_all(&tmp).ok();
}
