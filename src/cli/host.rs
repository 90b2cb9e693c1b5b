//! `gpumarket host ...`: register, price, list and unlist machines.

use clap::{Subcommand, ValueEnum};
use rust_decimal::Decimal;
use serde_json::{Map, Value, json};

use super::output::{number, pairs, table, text};
use super::{ApiArgs, CliError};

#[derive(Subcommand, Debug)]
pub enum HostCommand {
    /// Register a machine; prints its id and the host agent's token (shown once).
    Register(Box<RegisterArgs>),
    /// Set a machine's listing terms.
    Price(PriceArgs),
    /// Put a machine on the offers list.
    List { machine_id: String },
    /// Take a machine off the offers list.
    Unlist { machine_id: String },
    /// Your machines, listed or not.
    Machines,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum DiskType {
    Nvme,
    Ssd,
    Hdd,
}

impl DiskType {
    /// The GraphQL enum value.
    fn graphql(self) -> &'static str {
        match self {
            DiskType::Nvme => "NVME",
            DiskType::Ssd => "SSD",
            DiskType::Hdd => "HDD",
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct RegisterArgs {
    #[arg(long)]
    pub name: String,
    /// Catalog name, e.g. "RTX 4090".
    #[arg(long)]
    pub gpu_model: String,
    #[arg(long)]
    pub gpu_count: i32,
    #[arg(long)]
    pub cpu_cores: i32,
    #[arg(long)]
    pub ram_gib: i32,
    #[arg(long)]
    pub disk_gib: i32,
    /// ISO 3166-1 alpha-2, e.g. US.
    #[arg(long)]
    pub country: String,
    /// VRAM per GPU; the catalog's figure for the model when absent.
    #[arg(long)]
    pub vram_gib: Option<i32>,
    #[arg(long)]
    pub cpu_model: Option<String>,
    #[arg(long, value_enum)]
    pub disk_type: Option<DiskType>,
    #[arg(long)]
    pub upload_mbps: Option<i32>,
    #[arg(long)]
    pub download_mbps: Option<i32>,
    #[arg(long)]
    pub region: Option<String>,
    /// The machine is in a datacenter.
    #[arg(long)]
    pub datacenter: bool,
    #[arg(long)]
    pub driver_version: Option<String>,
    /// `major.minor`, e.g. 12.4.
    #[arg(long)]
    pub cuda_version: Option<String>,
    /// Repeating a registration with the same key returns the same machine
    /// (default: a fresh UUID, so every run registers a new machine).
    #[arg(long)]
    pub idempotency_key: Option<String>,
}

#[derive(clap::Args, Debug)]
pub struct PriceArgs {
    pub machine_id: String,
    /// On-demand price per GPU-hour, e.g. 0.45.
    #[arg(long)]
    pub price: String,
    /// Lowest bid per GPU-hour accepted for interruptible rentals.
    #[arg(long)]
    pub min_bid: Option<String>,
    #[arg(long)]
    pub storage_price_per_gb_month: Option<String>,
    #[arg(long)]
    pub bandwidth_up_price_per_tb: Option<String>,
    #[arg(long)]
    pub bandwidth_down_price_per_tb: Option<String>,
    /// Rental sizes allowed, e.g. 1,2,4.
    #[arg(long, value_delimiter = ',')]
    pub gpu_counts: Option<Vec<i32>>,
    /// Stop listing at this instant (RFC 3339), e.g. 2027-06-30T00:00:00Z.
    #[arg(long)]
    pub list_until: Option<String>,
}

pub async fn run(api: &ApiArgs, command: HostCommand) -> Result<(), CliError> {
    match command {
        HostCommand::Register(args) => register(api, *args).await,
        HostCommand::Price(args) => price(api, args).await,
        HostCommand::List { machine_id } => list(api, &machine_id, "listMachine").await,
        HostCommand::Unlist { machine_id } => list(api, &machine_id, "unlistMachine").await,
        HostCommand::Machines => machines(api).await,
    }
}

const REGISTER: &str = "mutation($input: RegisterMachineInput!) { \
    registerMachine(input: $input) { machine { id name gpuModel gpuCount } agentToken } }";

async fn register(api: &ApiArgs, args: RegisterArgs) -> Result<(), CliError> {
    let client = api.authenticated()?;
    if let Some(version) = &args.cuda_version {
        cuda_version("--cuda-version", version)?;
    }
    let mut input = Map::new();
    input.insert("name".into(), json!(args.name));
    input.insert("gpuModel".into(), json!(args.gpu_model));
    input.insert("gpuCount".into(), json!(args.gpu_count));
    input.insert("cpuCores".into(), json!(args.cpu_cores));
    input.insert("ramGib".into(), json!(args.ram_gib));
    input.insert("diskGib".into(), json!(args.disk_gib));
    input.insert("country".into(), json!(args.country));
    let optional = [
        ("vramGib", args.vram_gib.map(Value::from)),
        ("cpuModel", args.cpu_model.map(Value::from)),
        ("diskType", args.disk_type.map(|d| Value::from(d.graphql()))),
        ("uploadMbps", args.upload_mbps.map(Value::from)),
        ("downloadMbps", args.download_mbps.map(Value::from)),
        ("region", args.region.map(Value::from)),
        ("datacenter", args.datacenter.then_some(Value::Bool(true))),
        ("driverVersion", args.driver_version.map(Value::from)),
        ("cudaVersion", args.cuda_version.map(Value::from)),
    ];
    for (name, value) in optional {
        if let Some(value) = value {
            input.insert(name.into(), value);
        }
    }
    let key = args
        .idempotency_key
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    input.insert("idempotencyKey".into(), json!(key));

    let data = client
        .run(REGISTER, json!({ "input": Value::Object(input) }))
        .await?;
    let registered = &data["registerMachine"];
    let machine = &registered["machine"];
    let token = &registered["agentToken"];
    let note = if token.is_string() {
        "The agent token is shown only once: store it now (the host agent needs it)."
    } else {
        "No agent token: this idempotency key was used before, and the token was shown then."
    };
    if api.json {
        api.print(registered, String::new);
        eprintln!("{note}");
    } else {
        let summary = pairs(&[
            ("machine id", text(&machine["id"])),
            ("name", text(&machine["name"])),
            ("gpu model", text(&machine["gpuModel"])),
            ("gpus", text(&machine["gpuCount"])),
            ("agent token", text(token)),
        ]);
        println!("Machine registered.\n{summary}\n{note}");
    }
    Ok(())
}

async fn price(api: &ApiArgs, args: PriceArgs) -> Result<(), CliError> {
    let client = api.authenticated()?;
    // Only the arguments given are sent: absent ones keep their value.
    let mut params = vec!["$id: ID!".to_owned(), "$price: Decimal!".to_owned()];
    let mut arguments = vec![
        "machineId: $id".to_owned(),
        "pricePerGpuHour: $price".to_owned(),
    ];
    let mut variables = Map::new();
    variables.insert("id".into(), json!(args.machine_id));
    variables.insert("price".into(), json!(decimal("--price", &args.price)?));
    let decimals = [
        ("minBid", "minBidPerGpuHour", "--min-bid", &args.min_bid),
        (
            "storage",
            "storagePricePerGbMonth",
            "--storage-price-per-gb-month",
            &args.storage_price_per_gb_month,
        ),
        (
            "up",
            "bandwidthUpPricePerTb",
            "--bandwidth-up-price-per-tb",
            &args.bandwidth_up_price_per_tb,
        ),
        (
            "down",
            "bandwidthDownPricePerTb",
            "--bandwidth-down-price-per-tb",
            &args.bandwidth_down_price_per_tb,
        ),
    ];
    for (var, argument, flag, value) in decimals {
        if let Some(value) = value {
            params.push(format!("${var}: Decimal"));
            arguments.push(format!("{argument}: ${var}"));
            variables.insert(var.into(), json!(decimal(flag, value)?));
        }
    }
    if let Some(counts) = &args.gpu_counts {
        params.push("$counts: [Int!]".into());
        arguments.push("allowedGpuCounts: $counts".into());
        variables.insert("counts".into(), json!(counts));
    }
    if let Some(until) = &args.list_until {
        let instant = chrono::DateTime::parse_from_rfc3339(until).map_err(|_| {
            CliError::Usage(format!(
                "error: --list-until `{until}` is not an RFC 3339 instant, e.g. 2027-06-30T00:00:00Z"
            ))
        })?;
        params.push("$until: String".into());
        arguments.push("listUntil: $until".into());
        variables.insert(
            "until".into(),
            json!(instant.with_timezone(&chrono::Utc).to_rfc3339()),
        );
    }
    let query = format!(
        "mutation({}) {{ setMachinePricing({}) {{ id pricePerGpuHour }} }}",
        params.join(", "),
        arguments.join(", ")
    );
    let data = client.run(&query, Value::Object(variables)).await?;
    let machine = &data["setMachinePricing"];
    api.print(machine, || {
        format!(
            "Machine {} priced at {} per GPU-hour.",
            text(&machine["id"]),
            number(&machine["pricePerGpuHour"])
        )
    });
    Ok(())
}

async fn list(api: &ApiArgs, machine_id: &str, mutation: &str) -> Result<(), CliError> {
    let client = api.authenticated()?;
    let query = format!("mutation($id: ID!) {{ {mutation}(machineId: $id) {{ id listed }} }}");
    let data = client.run(&query, json!({ "id": machine_id })).await?;
    let machine = &data[mutation];
    api.print(machine, || {
        let state = if machine["listed"] == true {
            "listed"
        } else {
            "not listed"
        };
        format!("Machine {} is {state}.", text(&machine["id"]))
    });
    Ok(())
}

const MY_MACHINES: &str = "{ myMachines { id name gpuModel gpuCount gpusAllocated listed online \
    reliability pricePerGpuHour } }";

async fn machines(api: &ApiArgs) -> Result<(), CliError> {
    let client = api.authenticated()?;
    let data = client.run(MY_MACHINES, json!({})).await?;
    let machines = &data["myMachines"];
    api.print(machines, || {
        let rows: Vec<Vec<String>> = machines
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|m| {
                vec![
                    text(&m["id"]),
                    text(&m["name"]),
                    text(&m["gpuModel"]),
                    format!("{}/{}", text(&m["gpusAllocated"]), text(&m["gpuCount"])),
                    text(&m["listed"]),
                    text(&m["online"]),
                    number(&m["reliability"]),
                    number(&m["pricePerGpuHour"]),
                ]
            })
            .collect();
        if rows.is_empty() {
            return "No machines yet: `gpumarket host register` adds one.".into();
        }
        table(
            &[
                "ID",
                "NAME",
                "GPU",
                "IN USE",
                "LISTED",
                "ONLINE",
                "RELIABILITY",
                "$/GPU-H",
            ],
            &["IN USE", "RELIABILITY", "$/GPU-H"],
            rows,
        )
    });
    Ok(())
}

/// A non-negative decimal, as the string the API's `Decimal` takes.
fn decimal(flag: &str, value: &str) -> Result<String, CliError> {
    match value.trim().parse::<Decimal>() {
        Ok(d) if !d.is_sign_negative() || d.is_zero() => Ok(d.to_string()),
        Ok(_) => Err(CliError::Usage(format!(
            "error: {flag} must not be negative"
        ))),
        Err(_) => Err(CliError::Usage(format!(
            "error: {flag} `{value}` is not a decimal number, e.g. 0.45"
        ))),
    }
}

fn cuda_version(flag: &str, value: &str) -> Result<(), CliError> {
    let valid = value.split_once('.').is_some_and(|(major, minor)| {
        [major, minor]
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
    });
    if valid {
        Ok(())
    } else {
        Err(CliError::Usage(format!(
            "error: {flag} `{value}` is not `major.minor`, e.g. 12.4"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_checked_before_sending() {
        assert_eq!(decimal("--price", "0.45").unwrap(), "0.45");
        assert_eq!(decimal("--price", " 1 ").unwrap(), "1");
        assert!(matches!(decimal("--price", "-1"), Err(CliError::Usage(_))));
        assert!(matches!(
            decimal("--price", "cheap"),
            Err(CliError::Usage(_))
        ));
    }

    #[test]
    fn cuda_versions_are_major_minor() {
        assert!(cuda_version("--cuda-version", "12.4").is_ok());
        assert!(cuda_version("--cuda-version", "12").is_err());
        assert!(cuda_version("--cuda-version", "12.x").is_err());
    }
}
