//! Test environment: a fresh database (migrated) and a fresh RabbitMQ vhost
//! per test, the stack started in this process on random ports, and helpers
//! to drive the public API.

use std::time::Duration;

use diesel::{Connection, PgConnection, RunQueryDsl};
use gpumarket::client::Client;
use gpumarket::dev::{self, Parts, Stack};
use platform::Config;
use platform::rabbitmq_admin::RabbitAdmin;
use serde_json::{Value, json};

/// The events numbered by a renter's balance (`tenant:<id>`), and by a
/// machine (`machine:<id>`), with the SQL of their resource keys
/// ([`TestEnv::assert_sequenced`]).
pub const BALANCE_EVENTS: [&str; 4] = [
    contracts::events::RUNWAY_LOW,
    contracts::events::BALANCE_EXHAUSTED,
    contracts::events::SPEND_CAP_REACHED,
    contracts::events::TOP_UP_SUCCEEDED,
];
pub const BALANCE_RESOURCE: &str = "'tenant:' || (body->'payload'->>'tenant_id')";
pub const MACHINE_EVENTS: [&str; 4] = [
    contracts::events::MACHINE_ONLINE,
    contracts::events::MACHINE_OFFLINE,
    contracts::events::MACHINE_RENTED,
    contracts::events::MACHINE_RELEASED,
];
pub const MACHINE_RESOURCE: &str = "'machine:' || (body->'payload'->>'machine_id')";

pub const PASSWORD: &str = "correct horse battery";

pub struct TestEnv {
    pub config: Config,
    pub db_name: String,
    vhost: String,
    admin_url: String,
    /// Set by [`TestEnv::cleanup`]; otherwise (a test that panicked) `Drop`
    /// removes the broker's and the database's leftovers.
    cleaned: bool,
}

/// The RabbitMQ management API's base URL and its credentials.
pub fn management(config: &Config) -> (reqwest::Url, String, String) {
    let mut url = reqwest::Url::parse(&config.rabbitmq_management_url).expect("management URL");
    let user = url.username().to_owned();
    let pass = url.password().unwrap_or_default().to_owned();
    let _ = url.set_username("");
    let _ = url.set_password(None);
    (url, user, pass)
}

impl TestEnv {
    pub async fn new() -> TestEnv {
        let suffix = uuid::Uuid::now_v7().simple().to_string();
        let db_name = format!("gpumarket_test_{suffix}");
        let vhost = format!("gpumarket_test_{suffix}");
        let mut config = Config::from_env().expect("config");
        let admin_url = platform::config::replace_db_name(&config.database_url, "postgres");
        config = config.with_database(&db_name);
        config.db_pool_size = 2;
        // Every service of the registry on any free port.
        for name in gpumarket::services::names() {
            config.ports.set(name, 0);
        }
        config.outbox_poll_ms = 50;
        let amqp = reqwest::Url::parse(&config.amqp_url).expect("amqp url");
        config.amqp_url = format!(
            "amqp://{}:{}@{}:{}/{vhost}",
            amqp.username(),
            amqp.password().unwrap_or_default(),
            amqp.host_str().unwrap_or("127.0.0.1"),
            amqp.port().unwrap_or(5672)
        );

        let (db_url, admin) = (db_name.clone(), admin_url.clone());
        tokio::task::spawn_blocking(move || {
            // A copy of the migrated template (platform::db::TEMPLATE_DATABASE).
            platform::db::create_migrated_database(&admin, &db_url)
                .expect("create migrated database");
        })
        .await
        .expect("join");

        let (base, user, pass) = management(&config);
        let http = reqwest::Client::new();
        let put = |path: String, body: Value| {
            http.put(base.join(&path).expect("url"))
                .basic_auth(&user, Some(&pass))
                .json(&body)
                .send()
        };
        let resp = put(format!("api/vhosts/{vhost}"), json!({}))
            .await
            .expect("create vhost (is rabbitmq_management enabled?)");
        assert!(
            resp.status().is_success(),
            "create vhost: {}",
            resp.status()
        );
        let resp = put(
            format!("api/permissions/{vhost}/{user}"),
            json!({ "configure": ".*", "write": ".*", "read": ".*" }),
        )
        .await
        .expect("vhost permissions");
        assert!(
            resp.status().is_success(),
            "vhost permissions: {}",
            resp.status()
        );

        TestEnv {
            config,
            db_name,
            vhost,
            admin_url,
            cleaned: false,
        }
    }

    /// Changes one service's group of settings before the stack starts.
    pub fn settings<T: platform::settings::ServiceSettings>(
        &mut self,
        change: impl FnOnce(&mut T),
    ) {
        self.config.update_settings(change).expect("settings");
    }

    /// How often metering settles running intervals, which is also how
    /// often billing watches spending (both read
    /// `GPUMARKET_SETTLEMENT_INTERVAL_MS`).
    pub fn settlement_interval_ms(&mut self, ms: u64) {
        let every = Duration::from_millis(ms);
        self.settings(|s: &mut metering::MeteringSettings| s.settlement_interval = every);
        self.settings(|s: &mut billing::BillingSettings| s.spend_watch_interval = every);
    }

    /// The runway below which a renter is warned, by billing and in the
    /// gateway's answers (both read `GPUMARKET_RUNWAY_WARNING_SECONDS`).
    pub fn runway_warning_seconds(&mut self, seconds: i64) {
        self.settings(|s: &mut billing::BillingSettings| s.runway_warning_seconds = seconds);
        self.settings(|s: &mut gateway::GatewaySettings| s.runway_warning_seconds = seconds);
    }

    pub async fn start(&self, parts: Parts) -> Stack {
        dev::start(self.config.clone(), parts)
            .await
            .expect("start stack")
    }

    /// [`TestEnv::start`] with the webhook service's settings.
    pub async fn start_with_webhooks(&self, parts: Parts, settings: webhooks::Settings) -> Stack {
        let mut config = self.config.clone();
        config.set_settings(settings);
        dev::start(config, parts).await.expect("start stack")
    }

    pub fn conn(&self) -> PgConnection {
        PgConnection::establish(&self.config.database_url).expect("connect")
    }

    /// One number from SQL.
    pub fn count(&self, sql: &str) -> i64 {
        #[derive(diesel::QueryableByName)]
        struct N {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            n: i64,
        }
        let rows: Vec<N> = diesel::sql_query(sql).load(&mut self.conn()).expect(sql);
        rows.first().map(|r| r.n).unwrap_or(0)
    }

    /// Every message each service wrote to its outbox is of a kind the
    /// service says it publishes (`Service::publishes`, and the worker's
    /// `provisioner::PUBLISHES`): the registry's list, which
    /// api-specs/asyncapi.yaml is checked against, is what the code sends.
    /// Returns how many kinds were seen, so a test can tell it looked.
    pub fn assert_outboxes_hold_only_published_kinds(&self) -> usize {
        #[derive(diesel::QueryableByName)]
        struct Key {
            #[diesel(sql_type = diesel::sql_types::Text)]
            routing_key: String,
        }
        let mut seen = 0;
        for (service, kinds) in gpumarket::services::publishers() {
            if self.count(&format!(
                "SELECT count(*) AS n FROM information_schema.tables \
                 WHERE table_schema = '{service}' AND table_name = 'outbox'"
            )) == 0
            {
                assert!(
                    kinds.is_empty(),
                    "{service} publishes {kinds:?} but has no outbox"
                );
                continue;
            }
            let keys: Vec<Key> =
                diesel::sql_query(format!("SELECT DISTINCT routing_key FROM {service}.outbox"))
                    .load(&mut self.conn())
                    .expect("outbox keys");
            for key in keys {
                assert!(
                    kinds.contains(&key.routing_key.as_str()),
                    "{service}'s outbox holds {}, which its Service::publishes does not list",
                    key.routing_key
                );
                seen += 1;
            }
        }
        seen
    }

    /// The events of `routing_keys` in `<schema>.outbox` are numbered per
    /// resource (`resource`, an SQL expression over the row, e.g.
    /// `'invoice:' || (body->'payload'->>'invoice_id')`): each resource's
    /// events, in the order they were written (under the resource's
    /// counter lock, so in commit order), carry `sequence` 1, 2, 3, ...,
    /// and its counter in `<schema>.resource_sequences` ends at the last.
    /// Returns how many events were checked.
    pub fn assert_sequenced(&self, schema: &str, routing_keys: &[&str], resource: &str) -> i64 {
        let keys = routing_keys
            .iter()
            .map(|k| format!("'{k}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let events = format!(
            "SELECT {resource} AS resource, (body->'payload'->>'sequence')::bigint AS s, \
                    row_number() OVER (PARTITION BY {resource} ORDER BY seq) AS r \
             FROM {schema}.outbox WHERE routing_key IN ({keys})"
        );
        let misnumbered = self.count(&format!(
            "SELECT count(*) AS n FROM ({events}) e WHERE e.s IS DISTINCT FROM e.r"
        ));
        assert_eq!(
            misnumbered, 0,
            "{schema} {routing_keys:?}: events out of sequence"
        );
        let counters_behind = self.count(&format!(
            "SELECT count(*) AS n FROM (SELECT resource, max(r) AS last FROM ({events}) e GROUP BY resource) e \
             LEFT JOIN {schema}.resource_sequences c ON c.resource = e.resource \
             WHERE c.seq IS DISTINCT FROM e.last"
        ));
        assert_eq!(
            counters_behind, 0,
            "{schema} {routing_keys:?}: counters disagree"
        );
        self.count(&format!(
            "SELECT count(*) AS n FROM {schema}.outbox WHERE routing_key IN ({keys})"
        ))
    }

    /// Runs a statement (test fixtures only).
    pub fn exec(&self, sql: &str) {
        diesel::sql_query(sql).execute(&mut self.conn()).expect(sql);
    }

    /// Marks machines as heard from now, as an agent's heartbeat would.
    /// Marks every machine heard from for the rest of the test (an hour
    /// ahead): tests about provisioning and capacity must not have their
    /// instances declared `host_lost` by the reconciler when a loaded
    /// machine makes them outlast the heartbeat grace. Liveness has its own
    /// tests (`system::agents`, `system::reconciler`).
    pub fn heartbeat_all(&self) {
        self.exec("UPDATE catalog.machines SET last_heartbeat_at = now() + interval '1 hour'");
    }

    /// Creates an operator directly (as `gpumarket admin create-operator`
    /// does) and logs it in through the API.
    pub async fn operator(&self, api: &Client) -> Client {
        let db = platform::Db::connect(&self.config.database_url, 1).expect("db");
        let email = format!("op-{}@test.dev", uuid::Uuid::now_v7().simple());
        quota::create_operator(&db, &email, PASSWORD)
            .await
            .expect("operator");
        login(api, &email).await
    }

    /// The broker's agent users with permissions on this test's vhost (each
    /// machine's agent gets one when its token is made).
    pub async fn agent_users(&self) -> Vec<String> {
        let admin = RabbitAdmin::new(&self.config.rabbitmq_management_url).expect("admin");
        let mut users: Vec<String> = admin
            .permissions_in(&self.vhost)
            .await
            .expect("permissions")
            .into_iter()
            .map(|p| p.user)
            .filter(|u| u.starts_with("agent-"))
            .collect();
        users.sort();
        users
    }

    pub async fn cleanup(mut self) {
        remove_leftovers(&self.config, &self.vhost, &self.admin_url, &self.db_name).await;
        self.cleaned = true;
    }
}

impl Drop for TestEnv {
    /// A test that panicked before [`TestEnv::cleanup`] still leaves nothing
    /// behind on the broker (its vhost, with the queues in it, and the agent
    /// users of its machines) nor its database. Drop cannot await, and may
    /// run inside the test's runtime: the work runs on a thread of its own.
    fn drop(&mut self) {
        if self.cleaned {
            return;
        }
        let (config, vhost, admin_url, db_name) = (
            self.config.clone(),
            self.vhost.clone(),
            self.admin_url.clone(),
            self.db_name.clone(),
        );
        let _ = std::thread::spawn(move || {
            if let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                runtime.block_on(remove_leftovers(&config, &vhost, &admin_url, &db_name));
            }
        })
        .join();
    }
}

/// Deletes the agent users of the test's machines (users are broker-wide,
/// not per vhost; every token generation), the test's vhost (its queues go
/// with it) and its database.
async fn remove_leftovers(config: &Config, vhost: &str, admin_url: &str, db_name: &str) {
    let (base, user, pass) = management(config);
    // Agent users are broker-wide, not per vhost: remove this test's
    // (every token generation of each of its machines).
    #[derive(diesel::QueryableByName)]
    struct Id {
        #[diesel(sql_type = diesel::sql_types::Uuid)]
        id: uuid::Uuid,
    }
    let machines: Vec<Id> = PgConnection::establish(&config.database_url)
        .ok()
        .and_then(|mut c| {
            diesel::sql_query("SELECT id FROM catalog.machines")
                .load(&mut c)
                .ok()
        })
        .unwrap_or_default();
    if let Ok(admin) = RabbitAdmin::new(&config.rabbitmq_management_url) {
        let users = admin
            .users_starting_with("agent-")
            .await
            .unwrap_or_default();
        let ours = |u: &str| {
            machines
                .iter()
                .any(|m| u.starts_with(&format!("agent-{}", m.id)))
        };
        for user in users.iter().filter(|u| ours(u)) {
            let _ = admin.delete_user(user).await;
        }
        // And any agent user left with a permission here but no machine row
        // (what a refused registration once left behind).
        for permission in admin.permissions_in(vhost).await.unwrap_or_default() {
            if permission.user.starts_with("agent-") {
                let _ = admin.delete_user(&permission.user).await;
            }
        }
    }
    let _ = reqwest::Client::new()
        .delete(base.join(&format!("api/vhosts/{}", vhost)).expect("url"))
        .basic_auth(&user, Some(&pass))
        .send()
        .await;
    let (admin, name) = (admin_url.to_owned(), db_name.to_owned());
    let _ = tokio::task::spawn_blocking(move || platform::db::drop_database(&admin, &name)).await;
}

/// The broker user of the machine's current agent token (what its agent
/// connects as and sets in `user_id`).
pub fn agent_user(env: &TestEnv, machine: impl std::fmt::Display) -> String {
    #[derive(diesel::QueryableByName)]
    struct Hash {
        #[diesel(sql_type = diesel::sql_types::Text)]
        h: String,
    }
    let sql =
        format!("SELECT agent_token_sha256 AS h FROM catalog.machines WHERE id = '{machine}'");
    let rows: Vec<Hash> = diesel::sql_query(&sql)
        .load(&mut env.conn())
        .expect("token hash");
    let hash = rows.first().map(|r| r.h.clone()).expect("machine");
    catalog::agents::agent_username(machine.to_string().parse().expect("uuid"), &hash)
}

pub async fn sign_up(api: &Client, roles: &[&str]) -> (Client, String) {
    let email = format!("u-{}@test.dev", uuid::Uuid::now_v7().simple());
    let data = api
        .run(
            "mutation($input: SignUpInput!) { signUp(input: $input) { token me { tenantId } } }",
            json!({ "input": { "email": email, "password": PASSWORD, "tenantName": "Test Org", "roles": roles } }),
        )
        .await
        .expect("signUp");
    let token = data["signUp"]["token"].as_str().expect("token");
    let tenant = data["signUp"]["me"]["tenantId"]
        .as_str()
        .expect("tenant")
        .to_owned();
    (api.with_token(token), tenant)
}

pub async fn login(api: &Client, email: &str) -> Client {
    let data = api
        .run(
            "mutation($e: String!, $p: String!) { login(email: $e, password: $p) { token } }",
            json!({ "e": email, "p": PASSWORD }),
        )
        .await
        .expect("login");
    api.with_token(data["login"]["token"].as_str().expect("token"))
}

/// Registers, prices and lists a machine; returns its id (= its offer id).
pub async fn listed_machine(host: &Client, model: &str, gpus: i32, price: &str) -> String {
    let data = host
        .run(
            "mutation($input: RegisterMachineInput!) { registerMachine(input: $input) { machine { id } agentToken } }",
            json!({ "input": {
                "name": "test-rig", "gpuModel": model, "gpuCount": gpus, "vramGib": 24,
                "cpuCores": 16, "ramGib": 64, "diskGib": 1000, "country": "US",
                "idempotencyKey": uuid::Uuid::now_v7().to_string(),
            }}),
        )
        .await
        .expect("registerMachine");
    assert!(
        data["registerMachine"]["agentToken"]
            .as_str()
            .is_some_and(|t| t.len() > 20)
    );
    let id = data["registerMachine"]["machine"]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    host.run(
        "mutation($id: ID!, $p: Decimal!) { setMachinePricing(machineId: $id, pricePerGpuHour: $p) { id } }",
        json!({ "id": id, "p": price }),
    )
    .await
    .expect("setMachinePricing");
    let listed = host
        .run(
            "mutation($id: ID!) { listMachine(machineId: $id) { listed } }",
            json!({ "id": id }),
        )
        .await
        .expect("listMachine");
    assert_eq!(listed["listMachine"]["listed"], true);
    id
}

pub async fn grant(operator: &Client, tenant: &str, amount: &str) {
    operator
        .run(
            "mutation($t: ID!, $a: Decimal!, $k: String!) { grantCredit(tenantId: $t, amount: $a, idempotencyKey: $k, reason: \"test\") { amount } }",
            json!({ "t": tenant, "a": amount, "k": uuid::Uuid::now_v7().to_string() }),
        )
        .await
        .expect("grantCredit");
}

pub async fn order(
    renter: &Client,
    offer: &str,
    gpus: i32,
    key: &str,
) -> Result<Value, gpumarket::client::GraphQlError> {
    renter
        .run(
            "mutation($input: CreateOrderInput!) { createOrder(input: $input) { id status rentalType pricePerGpuHour pricePerHourTotal } }",
            json!({ "input": { "offerId": offer, "gpuCount": gpus, "idempotencyKey": key,
                               "sshPublicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpumarketTestKey test@gpumarket" } }),
        )
        .await
        .map(|d| d["createOrder"].clone())
}

/// Polls `f` every 100 ms until it returns Some, failing after `limit`.
pub async fn eventually<T, F, Fut>(what: &str, limit: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub async fn instance_status(renter: &Client, id: &str) -> Value {
    renter
        .run(
            "query($id: ID!) { instance(id: $id) { id status statusReason allowedActions runningAt stoppedAt } }",
            json!({ "id": id }),
        )
        .await
        .expect("instance")["instance"]
        .clone()
}

/// Orders `gpus` GPUs of `offer` and waits until the instance runs; its id.
pub async fn running_instance(renter: &Client, offer: &str, gpus: i32, key: &str) -> String {
    let placed = order(renter, offer, gpus, key).await.expect("order");
    let id = placed["id"].as_str().expect("id").to_owned();
    wait_running(renter, &id, Duration::from_secs(30)).await;
    id
}

pub async fn wait_running(renter: &Client, id: &str, limit: Duration) -> Value {
    eventually("instance running", limit, || async {
        let i = instance_status(renter, id).await;
        (i["status"] == "running").then_some(i)
    })
    .await
}

/// Registers, prices and lists a machine and runs a simulated host agent for
/// it in this process (the real protocol over RabbitMQ); returns once the
/// machine is online.
pub async fn machine_with_agent(
    stack: &Stack,
    host: &Client,
    model: &str,
    gpus: i32,
    vram: i32,
    price: &str,
) -> String {
    let (id, token) = machine_for_agent(host, "agent-rig", model, gpus, None, price).await;
    let agent = gpumarket::seed::DemoAgent {
        machine_id: id.parse().expect("uuid"),
        token,
        gpu_model: model.to_owned(),
        gpu_count: gpus as u32,
        vram_gib: vram as u32,
        cuda_version: "12.4".into(),
        real: false,
    };
    // The task ends with the test's runtime.
    let _agent = gpumarket::dev::spawn_agent(&stack.config, &agent).expect("agent");
    wait_online(host, &id, Duration::from_secs(20)).await;
    id
}

/// Registers, prices and lists a machine for an agent to run; its id and
/// the agent token. Without `vram`, the catalog's figure for the model.
pub async fn machine_for_agent(
    host: &Client,
    name: &str,
    model: &str,
    gpus: i32,
    vram: Option<i32>,
    price: &str,
) -> (String, String) {
    let mut input = json!({
        "name": name, "gpuModel": model, "gpuCount": gpus, "cpuCores": 16,
        "ramGib": 64, "diskGib": 1000, "country": "US", "cudaVersion": "12.4",
        "idempotencyKey": uuid::Uuid::now_v7().to_string(),
    });
    if let Some(vram) = vram {
        input["vramGib"] = vram.into();
    }
    let data = host
        .run(
            "mutation($input: RegisterMachineInput!) { registerMachine(input: $input) { machine { id } agentToken } }",
            json!({ "input": input }),
        )
        .await
        .expect("registerMachine");
    let id = data["registerMachine"]["machine"]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let token = data["registerMachine"]["agentToken"]
        .as_str()
        .expect("token")
        .to_owned();
    host.run(
        "mutation($id: ID!, $p: Decimal!) { setMachinePricing(machineId: $id, pricePerGpuHour: $p) { id } }",
        json!({ "id": id, "p": price }),
    )
    .await
    .expect("setMachinePricing");
    host.run(
        "mutation($id: ID!) { listMachine(machineId: $id) { listed } }",
        json!({ "id": id }),
    )
    .await
    .expect("listMachine");
    (id, token)
}

/// Waits until the host sees its machine online (its agent heartbeats).
pub async fn wait_online(host: &Client, id: &str, limit: Duration) {
    eventually("machine online", limit, || async {
        let machines = host
            .run("{ myMachines { id online } }", json!({}))
            .await
            .expect("myMachines");
        machines["myMachines"]
            .as_array()
            .and_then(|ms| ms.iter().find(|m| m["id"] == id))
            .filter(|m| m["online"] == true)
            .map(|_| ())
    })
    .await;
}

/// Registers, prices and lists a machine with a full specification, and
/// marks it heard from; returns its id.
pub async fn spec_machine(env: &TestEnv, host: &Client, spec: Value, pricing: Value) -> String {
    let mut input = json!({
        "name": "rig", "gpuCount": 1, "cpuCores": 16, "ramGib": 64, "diskGib": 1000,
        "country": "US", "idempotencyKey": uuid::Uuid::now_v7().to_string(),
    });
    for (k, v) in spec.as_object().expect("spec object") {
        input[k] = v.clone();
    }
    let data = host
        .run(
            "mutation($input: RegisterMachineInput!) { registerMachine(input: $input) { machine { id } } }",
            json!({ "input": input }),
        )
        .await
        .expect("registerMachine");
    let id = data["registerMachine"]["machine"]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let mut vars = json!({ "id": id });
    for (k, v) in pricing.as_object().expect("pricing object") {
        vars[k] = v.clone();
    }
    host.run(
        "mutation($id: ID!, $price: Decimal!, $bid: Decimal, $storage: Decimal, $counts: [Int!], $until: String) {
           setMachinePricing(machineId: $id, pricePerGpuHour: $price, minBidPerGpuHour: $bid,
                             storagePricePerGbMonth: $storage, allowedGpuCounts: $counts, listUntil: $until) { id } }",
        vars,
    )
    .await
    .expect("setMachinePricing");
    host.run(
        "mutation($id: ID!) { listMachine(machineId: $id) { listed } }",
        json!({ "id": id }),
    )
    .await
    .expect("listMachine");
    env.exec(&format!(
        "UPDATE catalog.machines SET last_heartbeat_at = now() + interval '1 hour' WHERE id = '{id}'"
    ));
    id
}

/// A provisioning worker as its own OS process (so a test can SIGKILL it),
/// pointed at the stack; `env` adds settings such as injected latency or
/// failures of the simulated driver.
pub fn worker_process(config: &Config, env: &[(&str, &str)]) -> std::process::Child {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_gpumarket"));
    cmd.args(["worker", "provisioner"])
        .env("GPUMARKET_DATABASE_URL", &config.database_url)
        .env("GPUMARKET_AMQP_URL", &config.amqp_url)
        .env("GPUMARKET_ORDERING_URL", config.url("ordering"))
        .env("GPUMARKET_SERVICE_TOKEN", config.service_token.expose())
        .env("GPUMARKET_DB_POOL_SIZE", "2")
        // Tests start several workers at once: each its own metrics port.
        .env("GPUMARKET_PROVISIONER_PORT", "0")
        .env("RUST_LOG", "error")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit());
    for (key, value) in env {
        cmd.env(key, value);
    }
    cmd.spawn().expect("spawn worker")
}

/// The usual cast of a rental test: a host's listed machine that is heard
/// from (`offer`), a renter with credit, and an operator, on a running stack.
pub struct Rental {
    pub env: TestEnv,
    pub stack: Stack,
    pub renter: Client,
    pub tenant: String,
    pub operator: Client,
    pub offer: String,
}

pub async fn rental(
    env: TestEnv,
    parts: Parts,
    model: &str,
    gpus: i32,
    price: &str,
    credit: &str,
) -> Rental {
    let stack = env.start(parts).await;
    let api = Client::new(&stack.gateway_url);
    let (host, _) = sign_up(&api, &["HOST"]).await;
    let offer = listed_machine(&host, model, gpus, price).await;
    env.heartbeat_all();
    let (renter, tenant) = sign_up(&api, &["RENTER"]).await;
    let operator = env.operator(&api).await;
    grant(&operator, &tenant, credit).await;
    Rental {
        env,
        stack,
        renter,
        tenant,
        operator,
        offer,
    }
}

/// Signs up like [`sign_up`] and also returns the bearer token (for
/// WebSocket subscriptions, which carry it in `connection_init`).
pub async fn sign_up_with_token(api: &Client, roles: &[&str]) -> (Client, String, String) {
    let email = format!("u-{}@test.dev", uuid::Uuid::now_v7().simple());
    let data = api
        .run(
            "mutation($input: SignUpInput!) { signUp(input: $input) { token me { tenantId } } }",
            json!({ "input": { "email": email, "password": PASSWORD, "tenantName": "Test Org", "roles": roles } }),
        )
        .await
        .expect("signUp");
    let token = data["signUp"]["token"].as_str().expect("token").to_owned();
    let tenant = data["signUp"]["me"]["tenantId"]
        .as_str()
        .expect("tenant")
        .to_owned();
    (api.with_token(&token), tenant, token)
}

/// The fields of `instanceEvents` the tests read.
pub const INSTANCE_EVENTS: &str = "subscription($id: ID!) { instanceEvents(instanceId: $id) {
    seq kind fromState toState reason at
    step { jobKind step status attempt durationMs error at }
    rule { rule action dueAt }
    instance { id status rentalType pricePerGpuHour pricePerHourTotal currency }
} }";

/// One `instanceEvents` subscription over a real WebSocket speaking
/// graphql-transport-ws.
pub struct EventStream {
    ws: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
}

/// What the server sent for the subscription.
#[derive(Debug)]
pub enum Frame {
    /// A `next` message's payload (`data` or `errors`).
    Next(Value),
    /// The server's `error` message payload.
    Error(Value),
    Complete,
    /// The server closed the socket (code, reason).
    Closed(u16, String),
}

impl EventStream {
    /// Connects to `{gateway_url}/graphql`, initialises the connection with
    /// `token` (if any) and subscribes to `instance_id`'s events.
    pub async fn open(gateway_url: &str, token: Option<&str>, instance_id: &str) -> EventStream {
        Self::open_query(
            gateway_url,
            token,
            INSTANCE_EVENTS,
            json!({ "id": instance_id }),
        )
        .await
    }

    /// Like [`EventStream::open`] with any subscription document.
    pub async fn open_query(
        gateway_url: &str,
        token: Option<&str>,
        query: &str,
        variables: Value,
    ) -> EventStream {
        use futures_util::SinkExt;
        use tokio_tungstenite::tungstenite::Message;

        let (mut stream, ack) = Self::init(gateway_url, token).await;
        assert_eq!(ack["type"], "connection_ack", "{ack}");
        stream
            .ws
            .send(Message::text(
                json!({ "id": "1", "type": "subscribe", "payload": {
                    "query": query, "variables": variables } })
                .to_string(),
            ))
            .await
            .expect("subscribe");
        stream
    }

    /// Connects and sends `connection_init` with `token` (if any); returns
    /// the stream and the server's answer: `connection_ack`, or `__closed`
    /// with the close code and reason when the server refused.
    pub async fn init(gateway_url: &str, token: Option<&str>) -> (EventStream, Value) {
        use futures_util::SinkExt;
        use tokio_tungstenite::tungstenite::Message;
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;

        let url = format!("{}/graphql", gateway_url.replacen("http://", "ws://", 1));
        let mut request = url.into_client_request().expect("ws request");
        request.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            "graphql-transport-ws".parse().expect("header"),
        );
        let (ws, response) = tokio_tungstenite::connect_async(request)
            .await
            .expect("websocket connect");
        assert_eq!(
            response
                .headers()
                .get("sec-websocket-protocol")
                .and_then(|v| v.to_str().ok()),
            Some("graphql-transport-ws")
        );
        let mut stream = EventStream { ws };
        let payload = match token {
            Some(t) => json!({ "authorization": format!("Bearer {t}") }),
            None => json!({}),
        };
        stream
            .ws
            .send(Message::text(
                json!({ "type": "connection_init", "payload": payload }).to_string(),
            ))
            .await
            .expect("connection_init");
        let answer = stream.message(Duration::from_secs(10)).await;
        (stream, answer)
    }

    /// Closes the socket (a close frame, then the end of the stream).
    pub async fn close(&mut self) {
        let _ = self.ws.close(None).await;
    }

    /// The next protocol message as JSON (answering pings on the way).
    async fn message(&mut self, limit: Duration) -> Value {
        use futures_util::{SinkExt, StreamExt};
        use tokio_tungstenite::tungstenite::Message;
        loop {
            let next = tokio::time::timeout(limit, self.ws.next())
                .await
                .expect("timed out waiting for a WebSocket message");
            match next {
                Some(Ok(Message::Text(text))) => {
                    let value: Value = serde_json::from_str(&text).expect("JSON message");
                    if value["type"] == "ping" {
                        let _ = self
                            .ws
                            .send(Message::text(json!({ "type": "pong" }).to_string()))
                            .await;
                        continue;
                    }
                    return value;
                }
                Some(Ok(Message::Close(frame))) => {
                    let (code, reason) = frame
                        .map(|f| (u16::from(f.code), f.reason.to_string()))
                        .unwrap_or((1005, String::new()));
                    return json!({ "type": "__closed", "code": code, "reason": reason });
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => {
                    return json!({ "type": "__closed", "code": 1006, "reason": e.to_string() });
                }
                None => return json!({ "type": "__closed", "code": 1006, "reason": "eof" }),
            }
        }
    }

    pub async fn frame(&mut self, limit: Duration) -> Frame {
        let m = self.message(limit).await;
        match m["type"].as_str() {
            Some("next") => Frame::Next(m["payload"].clone()),
            Some("error") => Frame::Error(m["payload"].clone()),
            Some("complete") => Frame::Complete,
            Some("__closed") => Frame::Closed(
                m["code"].as_u64().unwrap_or(0) as u16,
                m["reason"].as_str().unwrap_or_default().to_owned(),
            ),
            _ => panic!("unexpected message {m}"),
        }
    }

    /// Events until one satisfies `stop` (included); fails on an error, the
    /// end of the stream or `limit` without a new event.
    pub async fn until(&mut self, limit: Duration, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut events = Vec::new();
        loop {
            match self.frame(limit).await {
                Frame::Next(payload) => {
                    assert!(payload.get("errors").is_none(), "{payload}");
                    let event = payload["data"]["instanceEvents"].clone();
                    let done = stop(&event);
                    events.push(event);
                    if done {
                        return events;
                    }
                }
                Frame::Closed(code, reason) => {
                    panic!("socket closed ({code} {reason}) after {events:?}")
                }
                other => panic!("subscription ended: {other:?} after {events:?}"),
            }
        }
    }
}

/// A GraphQL decimal (a JSON string) as an exact decimal.
pub fn dec(v: &Value) -> rust_decimal::Decimal {
    v.as_str()
        .unwrap_or_else(|| panic!("decimal string: {v}"))
        .parse()
        .expect("decimal")
}

/// The one numeric column `d` of the first row of `sql` (0 without rows).
pub fn sql_decimal(env: &TestEnv, sql: &str) -> rust_decimal::Decimal {
    #[derive(diesel::QueryableByName)]
    struct D {
        #[diesel(sql_type = diesel::sql_types::Numeric)]
        d: rust_decimal::Decimal,
    }
    let rows: Vec<D> = diesel::sql_query(sql).load(&mut env.conn()).expect(sql);
    rows.first().map(|r| r.d).unwrap_or_default()
}

const README: &str = include_str!("../../README.md");

/// The fenced blocks of the README section that starts with `heading`, up
/// to the next `## `, as (language, text): what the README tests send as a
/// reader would.
pub fn readme_blocks(heading: &str) -> Vec<(String, String)> {
    let start = README
        .find(heading)
        .unwrap_or_else(|| panic!("the README has {heading:?}"));
    let rest = &README[start..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    let mut blocks = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in rest[..end].lines() {
        match (&mut current, line.strip_prefix("```")) {
            (None, Some(lang)) => current = Some((lang.trim().to_owned(), String::new())),
            (Some(_), Some(_)) => blocks.extend(current.take()),
            (Some((_, text)), None) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, None) => {}
        }
    }
    blocks
}
