//! What every benchmark shares: flags, percentiles, the machine it ran on,
//! and writing its section of docs/benchmarks.md.

#![allow(dead_code)]

use std::time::Duration;

/// `--name N` from the command line, or the default.
pub fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `--tiny`: every size at a few items, so that `make bench-smoke` (run by
/// `make test`) runs each benchmark end to end in seconds and a benchmark
/// cannot rot unseen. Tiny runs do not rewrite docs/benchmarks.md.
pub fn tiny() -> bool {
    std::env::args().any(|a| a == "--tiny")
}

/// `--name N`, or `default` (`tiny` under `--tiny`).
pub fn sized(name: &str, default: usize, tiny_default: usize) -> usize {
    arg(name, if tiny() { tiny_default } else { default })
}

/// Milliseconds at percentile `p` (0..=1) of sorted samples.
pub fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)].as_secs_f64() * 1000.0
}

pub fn machine_facts() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .next()
                .map(|l| l.split_whitespace().nth(1).unwrap_or("0").to_owned())
        })
        .and_then(|kb| kb.parse::<u64>().ok())
        .map(|kb| format!("{:.0} GiB", kb as f64 / 1024.0 / 1024.0))
        .unwrap_or_default();
    format!("{cores} cores ({cpu}), {mem} RAM")
}

pub fn pg_version(admin_url: &str) -> String {
    use diesel::{Connection, PgConnection, RunQueryDsl};
    #[derive(diesel::QueryableByName)]
    struct Version {
        #[diesel(sql_type = diesel::sql_types::Text)]
        v: String,
    }
    PgConnection::establish(admin_url)
        .ok()
        .and_then(|mut c| {
            diesel::sql_query("SELECT current_setting('server_version') AS v")
                .get_result::<Version>(&mut c)
                .ok()
        })
        .map_or_else(|| "unknown".to_owned(), |v| v.v)
}

/// Replaces the section that starts with `heading` (a `## ` line) in
/// docs/benchmarks.md, or appends it, so each bench rewrites only its own.
pub fn write_section(heading: &str, section: &str) -> std::io::Result<()> {
    if tiny() || cfg!(debug_assertions) {
        // A tiny or unoptimised run says nothing about the machine: print it,
        // keep the page's release figures.
        println!("{section}");
        println!("(--tiny or a debug build: docs/benchmarks.md left as it is)");
        return Ok(());
    }
    let path = "docs/benchmarks.md";
    let existing = std::fs::read_to_string(path).unwrap_or_else(|_| {
        "# Benchmarks\n\nNumbers from `make bench`; each section says the machine it ran on.\n\n"
            .into()
    });
    let updated = match existing.find(heading) {
        Some(start) => {
            let end = existing[start + 3..]
                .find("\n## ")
                .map(|i| start + 3 + i + 1)
                .unwrap_or(existing.len());
            format!("{}{}{}", &existing[..start], section, &existing[end..])
        }
        None => format!("{existing}{section}"),
    };
    std::fs::write(path, updated)
}

/// Where `make bench` collects the goal lines of every benchmark it runs,
/// so that it can end with one summary (`make bench` empties it first).
/// Outside the clone, beside the build, like the target directory.
pub fn ratios_file() -> std::path::PathBuf {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("target"));
    dir.join("bench-ratios.txt")
}

/// Which way a goal points.
#[derive(Debug, Clone, Copy)]
pub enum Goal {
    AtLeast(f64),
    AtMost(f64),
}

/// One goal of the scaling issue as the line a script reads:
/// `ratio <name> = <value> (goal >= <target>)` (or `<=`). Printed at once,
/// and appended to [`ratios_file`] for the summary that ends `make bench`
/// (tiny runs print it but do not record it). Returns the line so that the
/// bench can put it in its docs/benchmarks.md section too.
pub fn ratio(name: &str, value: f64, goal: Goal) -> String {
    let target = match goal {
        Goal::AtLeast(t) => format!("goal >= {t}"),
        Goal::AtMost(t) => format!("goal <= {t}"),
    };
    let shown = if value.abs() >= 100.0 {
        format!("{value:.0}")
    } else if value.abs() >= 1.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.3}")
    };
    let line = format!("ratio {name} = {shown} ({target})");
    println!("{line}");
    if !tiny() {
        use std::io::Write;
        let file = ratios_file();
        if let Some(parent) = file.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&file)
        {
            Ok(mut f) => {
                let _ = writeln!(f, "{line}");
            }
            Err(error) => eprintln!("could not record {name} in {}: {error}", file.display()),
        }
    }
    line
}
