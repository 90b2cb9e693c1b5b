//! The fallback on real hosts where NVML cannot be loaded (or the agent was
//! built without it): `nvidia-smi`'s CSV queries, parsed here.

use std::process::Command;

use super::Inventory;
use crate::Error;
use crate::protocol::{GpuInfo, GpuSample};

const INVENTORY_QUERY: &str = "--query-gpu=index,name,uuid,memory.total,driver_version";
const SAMPLE_QUERY: &str = "--query-gpu=index,utilization.gpu,memory.used";

fn run(args: &[&str]) -> Result<String, Error> {
    let output = Command::new("nvidia-smi")
        .args(args)
        .output()
        .map_err(|e| Error::Inventory(format!("running nvidia-smi: {e}")))?;
    if !output.status.success() {
        return Err(Error::Inventory(format!(
            "nvidia-smi exited with {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The GPUs `nvidia-smi` lists, with the CUDA version from its banner.
pub fn inventory() -> Result<Inventory, Error> {
    let csv = run(&[INVENTORY_QUERY, "--format=csv,noheader,nounits"])?;
    let banner = run(&[])?;
    parse_inventory(&csv, &banner)
}

/// Utilisation and memory in use per GPU, for a heartbeat.
pub fn samples() -> Result<Vec<GpuSample>, Error> {
    parse_samples(&run(&[SAMPLE_QUERY, "--format=csv,noheader,nounits"])?)
}

fn fields(line: &str, n: usize) -> Result<Vec<&str>, Error> {
    let fields: Vec<&str> = line.split(',').map(str::trim).collect();
    if fields.len() != n {
        return Err(Error::Inventory(format!(
            "nvidia-smi line {line:?}: expected {n} fields"
        )));
    }
    Ok(fields)
}

fn number<T: std::str::FromStr>(value: &str, what: &str) -> Result<T, Error> {
    value
        .parse()
        .map_err(|_| Error::Inventory(format!("nvidia-smi {what} {value:?} is not a number")))
}

pub fn parse_inventory(csv: &str, banner: &str) -> Result<Inventory, Error> {
    let mut gpus = Vec::new();
    let mut driver_version = String::new();
    for line in csv.lines().filter(|l| !l.trim().is_empty()) {
        let f = fields(line, 5)?;
        gpus.push(GpuInfo {
            index: number(f[0], "index")?,
            name: f[1].to_owned(),
            uuid: f[2].to_owned(),
            memory_total_mib: number(f[3], "memory.total")?,
        });
        driver_version = f[4].to_owned();
    }
    if gpus.is_empty() {
        return Err(Error::Inventory("nvidia-smi lists no GPUs".into()));
    }
    // The banner's "CUDA Version: 12.4" is the highest CUDA the driver supports.
    let cuda_version = banner
        .split("CUDA Version:")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .map(|v| v.trim_end_matches('|').to_owned())
        .ok_or_else(|| Error::Inventory("nvidia-smi banner has no CUDA Version".into()))?;
    Ok(Inventory {
        gpus,
        cuda_version,
        driver_version,
        simulated: false,
        simulated_utilization_percent: None,
    })
}

pub fn parse_samples(csv: &str) -> Result<Vec<GpuSample>, Error> {
    csv.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let f = fields(line, 3)?;
            Ok(GpuSample {
                index: number(f[0], "index")?,
                utilization_percent: number(f[1], "utilization.gpu")?,
                memory_used_mib: number(f[2], "memory.used")?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shapes as nvidia-smi 550 prints them.
    const CSV: &str = "0, NVIDIA H100 80GB HBM3, GPU-2a3b4c5d-1111-2222-3333-444455556666, 81559, 550.54.15\n\
                       1, NVIDIA H100 80GB HBM3, GPU-9f8e7d6c-1111-2222-3333-444455556666, 81559, 550.54.15\n";
    const BANNER: &str = "+-----------------------------------------------------------------------------------------+\n\
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |\n";

    #[test]
    fn inventory_comes_from_the_csv_and_the_banner() {
        let inv = parse_inventory(CSV, BANNER).unwrap();
        assert_eq!(inv.gpus.len(), 2);
        assert_eq!(inv.gpus[1].index, 1);
        assert_eq!(inv.gpus[0].name, "NVIDIA H100 80GB HBM3");
        assert_eq!(inv.gpus[0].memory_total_mib, 81559);
        assert_eq!(inv.cuda_version, "12.4");
        assert_eq!(inv.driver_version, "550.54.15");
        assert!(!inv.simulated);
    }

    #[test]
    fn samples_parse_and_garbage_is_an_error() {
        let s = parse_samples("0, 97, 40123\n1, 0, 3\n").unwrap();
        assert_eq!(
            (s[0].utilization_percent, s[0].memory_used_mib),
            (97, 40123)
        );
        assert!(parse_samples("0, lots, 3\n").is_err());
        assert!(parse_inventory("", BANNER).is_err());
        assert!(parse_inventory(CSV, "no banner").is_err());
    }
}
