//! The demo market, created through the public API like any user would:
//! an operator, three hosts with real GPU models at realistic prices, and a
//! renter with credit. Safe to run again: sign-ups fall back to login,
//! machines are registered with idempotency keys, and agent tokens are
//! rotated when a replayed registration does not show one.

use anyhow::Context;
use serde_json::{Value, json};

use crate::client::{Client, GraphQlError};

pub const OPERATOR_EMAIL: &str = "operator@demo.gpumarket.dev";
pub const RENTER_EMAIL: &str = "renter@demo.gpumarket.dev";
pub const DEMO_PASSWORD: &str = "demo-password-1";

/// Host, country, and machines as (name, GPU model, GPU count, VRAM GiB per
/// GPU, CPU cores, RAM GiB, disk GiB, USD per GPU-hour).
type MachineSpec = (
    &'static str,
    &'static str,
    i32,
    i32,
    i32,
    i32,
    i32,
    &'static str,
);

const HOSTS: &[(&str, &str, &[MachineSpec])] = &[
    (
        "Nordic Compute AB",
        "SE",
        &[
            (
                "sto-h100-01",
                "H100 80GB SXM",
                8,
                80,
                192,
                2048,
                30_000,
                "2.49",
            ),
            (
                "sto-a100-01",
                "A100 80GB SXM",
                8,
                80,
                128,
                1024,
                15_000,
                "1.29",
            ),
        ],
    ),
    (
        "Ohio GPU Farm LLC",
        "US",
        &[
            ("cmh-l40s-01", "L40S", 4, 48, 64, 512, 7_680, "0.89"),
            (
                "cmh-a100-02",
                "A100 80GB PCIe",
                4,
                80,
                64,
                512,
                7_680,
                "1.19",
            ),
        ],
    ),
    (
        "Garage Rigs",
        "CA",
        &[
            ("yyz-4090-01", "RTX 4090", 2, 24, 32, 128, 2_000, "0.34"),
            ("yyz-4090-02", "RTX 4090", 1, 24, 16, 64, 1_000, "0.31"),
        ],
    ),
];

/// The machine `make run-real` adds to the demo market (with `gpumarket dev
/// --engine-socket`): its agent runs rentals as real containers on the local
/// engine, with one simulated GPU.
pub const REAL_MACHINE: MachineSpec = ("local-podman-01", "RTX 4090", 1, 24, 4, 8, 50, "0.29");

/// A demo machine's agent credentials and what its simulated GPUs report.
pub struct DemoAgent {
    pub machine_id: uuid::Uuid,
    pub token: String,
    pub gpu_model: String,
    pub gpu_count: u32,
    pub vram_gib: u32,
    pub cuda_version: String,
    /// The machine runs real containers ([`REAL_MACHINE`]).
    pub real: bool,
}

pub struct Seeded {
    pub agents: Vec<DemoAgent>,
    pub renter_api_key: String,
    pub host_api_key: String,
    pub operator_email: &'static str,
}

const SIGN_UP: &str = "mutation($input: SignUpInput!) { signUp(input: $input) { token } }";
const LOGIN: &str = "mutation($email: String!, $password: String!) { login(email: $email, password: $password) { token } }";

/// Signs up, or logs in when the email is already registered.
async fn account(
    client: &Client,
    email: &str,
    tenant: &str,
    roles: &[&str],
) -> anyhow::Result<Client> {
    let input =
        json!({ "email": email, "password": DEMO_PASSWORD, "tenantName": tenant, "roles": roles });
    let token = match client.run(SIGN_UP, json!({ "input": input })).await {
        Ok(data) => data["signUp"]["token"].clone(),
        Err(GraphQlError { code, .. }) if code == "CONFLICT" => {
            let data = client
                .run(LOGIN, json!({ "email": email, "password": DEMO_PASSWORD }))
                .await?;
            data["login"]["token"].clone()
        }
        Err(e) => return Err(e.into()),
    };
    Ok(client.with_token(token.as_str().context("no token")?))
}

async fn api_key(client: &Client, name: &str, scopes: &[&str]) -> anyhow::Result<String> {
    // A fresh key per run: keys are shown once.
    let data = client
        .run(
            "mutation($input: CreateApiKeyInput!) { createApiKey(input: $input) { secret } }",
            json!({ "input": { "name": name, "scopes": scopes, "idempotencyKey": uuid::Uuid::now_v7().to_string() } }),
        )
        .await?;
    Ok(data["createApiKey"]["secret"]
        .as_str()
        .context("no secret")?
        .to_owned())
}

/// Seeds the market through the gateway at `gateway_url`. The operator must
/// exist already (`gpumarket admin create-operator`, which `dev` runs).
pub async fn demo_market(gateway_url: &str, real_machine: bool) -> anyhow::Result<Seeded> {
    let anonymous = Client::new(gateway_url);
    let mut host_api_key = String::new();
    let mut agents = Vec::new();
    for (i, (name, country, machines)) in HOSTS.iter().enumerate() {
        let email = format!("host{}@demo.gpumarket.dev", i + 1);
        let host = account(&anonymous, &email, name, &["HOST"]).await?;
        // The garage host also runs the real-container machine.
        let real = (real_machine && i == HOSTS.len() - 1).then_some(&REAL_MACHINE);
        for (machine, model, gpus, vram, cpus, ram, disk, price) in machines.iter().chain(real) {
            let datacenter = *country != "CA";
            let cuda = if datacenter { "12.4" } else { "12.2" };
            let data = host
                .run(
                    "mutation($input: RegisterMachineInput!) { registerMachine(input: $input) { machine { id } agentToken } }",
                    json!({ "input": {
                        "name": machine, "gpuModel": model, "gpuCount": gpus, "vramGib": vram,
                        "cpuCores": cpus, "ramGib": ram, "diskGib": disk, "country": country,
                        "datacenter": datacenter, "cudaVersion": cuda, "driverVersion": "550.90.07",
                        "cpuModel": if datacenter { "AMD EPYC 9454" } else { "AMD Ryzen 9 7950X" },
                        "downloadMbps": if datacenter { 10000 } else { 1000 },
                        "uploadMbps": if datacenter { 10000 } else { 500 },
                        "idempotencyKey": format!("demo-{machine}"),
                    }}),
                )
                .await?;
            let id: Value = data["registerMachine"]["machine"]["id"].clone();
            // A second run gets no token from the replayed registration: issue a new one.
            let token = match data["registerMachine"]["agentToken"].as_str() {
                Some(token) => token.to_owned(),
                None => host
                    .run(
                        "mutation($id: ID!) { rotateAgentToken(machineId: $id) { agentToken } }",
                        json!({ "id": id }),
                    )
                    .await?["rotateAgentToken"]["agentToken"]
                    .as_str()
                    .context("no agent token")?
                    .to_owned(),
            };
            agents.push(DemoAgent {
                machine_id: id.as_str().context("no machine id")?.parse()?,
                token,
                gpu_model: (*model).to_owned(),
                gpu_count: *gpus as u32,
                vram_gib: *vram as u32,
                cuda_version: cuda.to_owned(),
                real: *machine == REAL_MACHINE.0,
            });
            host.run(
                "mutation($id: ID!, $price: Decimal!) { setMachinePricing(machineId: $id, pricePerGpuHour: $price) { id } }",
                json!({ "id": id, "price": price }),
            )
            .await?;
            host.run(
                "mutation($id: ID!) { listMachine(machineId: $id) { id } }",
                json!({ "id": id }),
            )
            .await?;
        }
        if i == 0 {
            host_api_key = api_key(&host, "demo host key", &["READ", "HOST", "BILLING"]).await?;
        }
    }

    let renter = account(&anonymous, RENTER_EMAIL, "Demo Renter Inc", &["RENTER"]).await?;
    let me = renter.run("{ me { tenantId } }", json!({})).await?;
    let data = anonymous
        .run(
            LOGIN,
            json!({ "email": OPERATOR_EMAIL, "password": DEMO_PASSWORD }),
        )
        .await
        .context("logging in the demo operator (create it first)")?;
    let operator = anonymous.with_token(data["login"]["token"].as_str().context("no token")?);
    operator
        .run(
            "mutation($t: ID!) { grantCredit(tenantId: $t, amount: \"500\", idempotencyKey: \"demo-credit\", reason: \"demo credit\") { amount } }",
            json!({ "t": me["me"]["tenantId"] }),
        )
        .await?;
    // An operator has checked the first host's papers; its machines can show
    // as verified once their agents' evidence meets the criteria.
    let host_one = Client::new(gateway_url)
        .run(
            LOGIN,
            json!({ "email": "host1@demo.gpumarket.dev", "password": DEMO_PASSWORD }),
        )
        .await?;
    let host_one = anonymous.with_token(host_one["login"]["token"].as_str().context("no token")?);
    host_one
        .run(
            "mutation { updateHostProfile(input: {legalName: \"Nordic Compute AB\", country: \"SE\", payoutCurrency: \"SEK\"}) { tenantId } }",
            json!({}),
        )
        .await?;
    let tenant = host_one.run("{ me { tenantId } }", json!({})).await?;
    operator
        .run(
            "mutation($t: ID!) { setHostVerification(tenantId: $t, verification: VERIFIED, reason: \"demo: identity and agreement checked\") { verification } }",
            json!({ "t": tenant["me"]["tenantId"] }),
        )
        .await?;
    let renter_api_key = api_key(&renter, "demo renter key", &["READ", "RENT", "BILLING"]).await?;
    Ok(Seeded {
        agents,
        renter_api_key,
        host_api_key,
        operator_email: OPERATOR_EMAIL,
    })
}
