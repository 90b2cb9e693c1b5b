//! Offer search on a seeded market: every filter and sort, the two prices,
//! pagination while prices change, "why no offers", the compact query, and
//! bad input at registration and pricing.

use std::collections::HashMap;

use gpumarket::client::Client;
use gpumarket::dev::Parts;
use serde_json::{Value, json};

use crate::harness::*;

struct Market {
    env: TestEnv,
    api: Client,
    host: Client,
    operator: Client,
    /// Machine id → short name (m1..m5).
    names: HashMap<String, &'static str>,
    ids: HashMap<&'static str, String>,
    _stack: gpumarket::dev::Stack,
}

const OFFER_FIELDS: &str = "id rentalPricePerGpuHour pricePerHourGpuOnly pricePerHourAllIn pricePerTflopHour verified reliability gpusFree";

impl Market {
    async fn new() -> Market {
        let env = TestEnv::new().await;
        let stack = env.start(Parts::SERVICES).await;
        let api = Client::new(&stack.gateway_url);
        let operator = env.operator(&api).await;
        let (host_a, tenant_a) = sign_up(&api, &["HOST"]).await;
        let (host_b, _) = sign_up(&api, &["HOST"]).await;
        let machines = [
            (
                "m1",
                &host_a,
                json!({"gpuModel": "H100 80GB SXM", "gpuCount": 8, "country": "SE", "region": "eu-north", "datacenter": true, "cudaVersion": "12.4", "downloadMbps": 10000, "uploadMbps": 10000, "diskGib": 30000}),
                json!({"price": "2.49", "bid": "1.20", "storage": "0.10", "counts": [1, 2, 4, 8]}),
            ),
            (
                "m2",
                &host_a,
                json!({"gpuModel": "A100 80GB SXM", "gpuCount": 4, "country": "DE", "region": "eu-central", "datacenter": true, "cudaVersion": "12.2", "downloadMbps": 5000, "uploadMbps": 1000, "diskGib": 15000}),
                json!({"price": "1.29"}),
            ),
            (
                "m3",
                &host_b,
                json!({"gpuModel": "RTX 4090", "gpuCount": 2, "country": "US", "region": "us-east", "cudaVersion": "12.4", "downloadMbps": 500, "uploadMbps": 500}),
                json!({"price": "0.34", "bid": "0.20", "storage": "0.073", "counts": [1, 2]}),
            ),
            (
                "m4",
                &host_b,
                json!({"gpuModel": "RTX 4090", "gpuCount": 1, "country": "CA", "region": "ca-central", "cudaVersion": "11.8", "downloadMbps": 200, "uploadMbps": 200}),
                json!({"price": "0.31"}),
            ),
            (
                "m5",
                &host_b,
                json!({"gpuModel": "L40S", "gpuCount": 4, "country": "US", "region": "us-west", "datacenter": true, "cudaVersion": "12.4", "downloadMbps": 2000, "uploadMbps": 2000}),
                json!({"price": "0.89"}),
            ),
        ];
        let mut names = HashMap::new();
        let mut ids = HashMap::new();
        for (name, host, spec, pricing) in machines {
            let id = spec_machine(&env, host, spec, pricing).await;
            names.insert(id.clone(), name);
            ids.insert(name, id);
        }
        // What the agents' reports would have recorded by now.
        for (name, reliability) in [
            ("m1", "0.995"),
            ("m2", "0.97"),
            ("m3", "0.92"),
            ("m4", "0.80"),
        ] {
            env.exec(&format!(
                "UPDATE catalog.machines SET reliability = {reliability}, self_test_passed_at = now() WHERE id = '{}'",
                ids[name]
            ));
        }
        operator
            .run(
                "mutation($t: ID!) { setHostVerification(tenantId: $t, verification: VERIFIED, reason: \"KYC done\") { verification } }",
                json!({ "t": tenant_a }),
            )
            .await
            .expect("verify host A");
        Market {
            env,
            api,
            host: host_b,
            operator,
            names,
            ids,
            _stack: stack,
        }
    }

    async fn search(&self, filter: Value, sort: &str) -> Vec<Value> {
        let data = self
            .api
            .run(
                &format!("query($f: OfferFilter) {{ offers(filter: $f, sort: {sort}, first: 50) {{ nodes {{ {OFFER_FIELDS} }} }} }}"),
                json!({ "f": filter }),
            )
            .await
            .expect("offers");
        data["offers"]["nodes"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    async fn names_of(&self, filter: Value, sort: &str) -> Vec<&'static str> {
        self.search(filter, sort)
            .await
            .iter()
            .map(|o| self.names[o["id"].as_str().expect("id")])
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_filter_and_sort_selects_and_orders_the_right_offers() {
    let m = Market::new().await;
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (json!({}), vec!["m4", "m3", "m5", "m2", "m1"]),
        (json!({"gpuModels": ["rtx 4090"]}), vec!["m4", "m3"]),
        (json!({"gpuModel": "L40S"}), vec!["m5"]),
        (json!({"gpuCount": 2}), vec!["m3", "m5", "m2", "m1"]),
        (json!({"gpuCount": 3}), vec!["m5", "m2"]),
        (json!({"minVramGib": 48}), vec!["m5", "m2", "m1"]),
        (json!({"maxPricePerGpuHour": "1.0"}), vec!["m4", "m3", "m5"]),
        (json!({"rentalType": "INTERRUPTIBLE"}), vec!["m3", "m1"]),
        (
            json!({"rentalType": "INTERRUPTIBLE", "maxPricePerGpuHour": "1.0"}),
            vec!["m3"],
        ),
        (json!({"countries": ["US", "ca"]}), vec!["m4", "m3", "m5"]),
        (json!({"regions": ["eu-north"]}), vec!["m1"]),
        (json!({"datacenterOnly": true}), vec!["m5", "m2", "m1"]),
        (json!({"verifiedOnly": true}), vec!["m2", "m1"]),
        (json!({"minReliability": "0.95"}), vec!["m2", "m1"]),
        (json!({"minCudaVersion": "12.4"}), vec!["m3", "m5", "m1"]),
        (json!({"minDiskGib": 1500}), vec!["m2", "m1"]),
        (json!({"minDownloadMbps": 1000}), vec!["m5", "m2", "m1"]),
        (json!({"minUploadMbps": 5000}), vec!["m1"]),
    ];
    for (filter, expected) in cases {
        assert_eq!(
            m.names_of(filter.clone(), "PRICE").await,
            expected,
            "filter {filter}"
        );
    }
    assert_eq!(
        m.names_of(json!({}), "PRICE_PER_TFLOP").await,
        ["m4", "m3", "m5", "m1", "m2"]
    );
    assert_eq!(
        m.names_of(json!({}), "RELIABILITY").await,
        ["m1", "m2", "m3", "m4", "m5"]
    );
    assert_eq!(
        m.names_of(json!({}), "BANDWIDTH").await,
        ["m1", "m2", "m5", "m3", "m4"]
    );

    // Interruptible searches rank and show the minimum bid.
    let bids = m
        .search(json!({"rentalType": "INTERRUPTIBLE"}), "PRICE")
        .await;
    assert_eq!(bids[0]["rentalPricePerGpuHour"], "0.2");
    // GPU-only and all-in prices are separate: 2 × 0.34 + 100 GB × 0.073 / 730 h.
    let priced = m
        .search(
            json!({"gpuModel": "RTX 4090", "gpuCount": 2, "diskGib": 100}),
            "PRICE",
        )
        .await;
    assert_eq!(priced[0]["pricePerHourGpuOnly"], "0.68");
    assert_eq!(priced[0]["pricePerHourAllIn"], "0.69");
    let m1 = m.search(json!({"regions": ["eu-north"]}), "PRICE").await;
    assert_eq!(m1[0]["pricePerTflopHour"], "0.002516422");
    assert_eq!(m1[0]["verified"], true);

    // An offline or expired machine is no offer.
    m.env.exec(&format!(
        "UPDATE catalog.machines SET last_heartbeat_at = now() - interval '1 hour' WHERE id = '{}'",
        m.ids["m5"]
    ));
    m.env.exec(&format!(
        "UPDATE catalog.machines SET list_until = now() - interval '1 second' WHERE id = '{}'",
        m.ids["m4"]
    ));
    assert_eq!(m.names_of(json!({}), "PRICE").await, ["m3", "m2", "m1"]);
    // The sweeper turns an expired listing into an unlisted machine.
    let db = platform::Db::connect(&m.env.config.database_url, 1).unwrap();
    catalog::reliability::sweep(
        &db,
        catalog::reliability::Settings::from_config(&m.env.config).expect("settings"),
        &m.env.config.events_exchange,
    )
    .await
    .unwrap();
    let listed = m.env.count(&format!(
        "SELECT count(*) AS n FROM catalog.machines WHERE listed AND id = '{}'",
        m.ids["m4"]
    ));
    assert_eq!(listed, 0, "an expired listing is unlisted");
    let relist = m
        .host
        .run(
            "mutation($id: ID!) { listMachine(machineId: $id) { id } }",
            json!({ "id": m.ids["m4"] }),
        )
        .await;
    assert_eq!(relist.expect_err("expired listing").code, "VALIDATION");

    let models = m
        .api
        .run("{ gpuModels { name vramGib fp16Tflops } }", json!({}))
        .await
        .expect("gpuModels");
    let models = models["gpuModels"].as_array().expect("models");
    assert!(models.len() >= 15);
    assert!(
        models
            .iter()
            .any(|g| g["name"] == "H200 141GB SXM" && g["vramGib"] == 141)
    );
    m.env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_stay_consistent_while_prices_change() {
    let m = Market::new().await;
    let page = |after: Option<String>| {
        let api = m.api.clone();
        async move {
            let data = api
                .run(
                    "query($after: String) { offers(first: 2, after: $after) { nodes { id } pageInfo { endCursor hasNextPage } } }",
                    json!({ "after": after }),
                )
                .await
                .expect("page");
            data["offers"].clone()
        }
    };
    let first = page(None).await;
    let seen_first: Vec<&str> = first["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| m.names[o["id"].as_str().unwrap()])
        .collect();
    assert_eq!(seen_first, ["m4", "m3"]);
    assert_eq!(first["pageInfo"]["hasNextPage"], true);
    // Between pages: m4 (already seen) becomes the most expensive, m2 gets cheaper
    // but stays after the cursor.
    m.host
        .run("mutation($id: ID!) { setMachinePricing(machineId: $id, pricePerGpuHour: \"5\") { id } }", json!({ "id": m.ids["m4"] }))
        .await
        .expect("reprice");
    m.env.exec(&format!(
        "UPDATE catalog.machines SET price_per_gpu_hour = 0.95 WHERE id = '{}'",
        m.ids["m2"]
    ));
    let second = page(first["pageInfo"]["endCursor"].as_str().map(str::to_owned)).await;
    let seen_second: Vec<&str> = second["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| m.names[o["id"].as_str().unwrap()])
        .collect();
    assert_eq!(
        seen_second,
        ["m5", "m2"],
        "no repeat of m3, nothing skipped"
    );
    let third = page(second["pageInfo"]["endCursor"].as_str().map(str::to_owned)).await;
    let seen_third: Vec<&str> = third["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| m.names[o["id"].as_str().unwrap()])
        .collect();
    assert_eq!(
        seen_third,
        ["m1", "m4"],
        "a repriced offer shows up where its new price puts it"
    );
    assert_eq!(third["pageInfo"]["hasNextPage"], false);

    let wrong = m
        .api
        .run(
            "{ offers(after: \"not-a-cursor\") { nodes { id } } }",
            json!({}),
        )
        .await;
    assert_eq!(wrong.expect_err("bad cursor").code, "VALIDATION");
    m.env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_search_says_which_constraint_ruled_out_what_and_what_would_match() {
    let m = Market::new().await;
    let data = m
        .api
        .run(
            "{ offers(filter: {countries: [\"DE\", \"SE\"], minCudaVersion: \"12.4\", maxPricePerGpuHour: \"2.00\"}) {
                 nodes { id }
                 noOffers { liveOffers summary constraints { constraint eliminated matchingWithout } relaxations { constraint value matching description } } } }",
            json!({}),
        )
        .await
        .expect("offers");
    let why = &data["offers"]["noOffers"];
    assert!(data["offers"]["nodes"].as_array().unwrap().is_empty());
    assert_eq!(why["liveOffers"], 5);
    let report: HashMap<String, (i64, i64)> = why["constraints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["constraint"].as_str().unwrap().to_owned(),
                (
                    c["eliminated"].as_i64().unwrap(),
                    c["matchingWithout"].as_i64().unwrap(),
                ),
            )
        })
        .collect();
    assert_eq!(report["countries"], (3, 2));
    assert_eq!(report["min_cuda_version"], (2, 1));
    assert_eq!(report["max_price_per_gpu_hour"], (1, 1));
    let relax: HashMap<String, (String, i64)> = why["relaxations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["constraint"].as_str().unwrap().to_owned(),
                (
                    r["value"].as_str().unwrap().to_owned(),
                    r["matching"].as_i64().unwrap(),
                ),
            )
        })
        .collect();
    assert_eq!(relax["max_price_per_gpu_hour"], ("2.49".to_owned(), 1));
    assert_eq!(relax["min_cuda_version"], ("12.2".to_owned(), 1));
    assert_eq!(relax["countries"], ("US (2)".to_owned(), 2));
    let summary = why["summary"].as_str().unwrap();
    assert!(summary.starts_with("0 of 5 live offers match"), "{summary}");

    // A search that finds something carries no explanation.
    let found = m
        .api
        .run(
            "{ offers { nodes { id } noOffers { summary } } }",
            json!({}),
        )
        .await
        .expect("offers");
    assert!(found["offers"]["noOffers"].is_null());
    m.env.cleanup().await;
}

/// Every filter given must hold (the SDL's `OfferFilter`): `gpuModel` with
/// `gpuModels` is their intersection, never their union; `storage=N` in the
/// query language (`diskGib`) keeps the machines with at least N GiB of
/// disk, as docs/cli.md and the SDL say, and prices N GiB into the all-in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_filters_intersect_and_storage_filters_on_disk() {
    let m = Market::new().await;
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (
            json!({"gpuModel": "L40S", "gpuModels": ["RTX 4090"]}),
            vec![],
        ),
        (
            json!({"gpuModel": "rtx 4090", "gpuModels": ["RTX 4090", "L40S"]}),
            vec!["m4", "m3"],
        ),
        (
            json!({"gpuModel": "L40S", "gpuModels": ["A100 80GB SXM", "l40s"]}),
            vec!["m5"],
        ),
        (json!({"diskGib": 1500}), vec!["m2", "m1"]),
    ];
    for (filter, expected) in cases {
        assert_eq!(
            m.names_of(filter.clone(), "PRICE").await,
            expected,
            "filter {filter}"
        );
    }

    // The empty intersection explains itself: each model filter by itself
    // rules offers out, and dropping either one would match.
    let data = m
        .api
        .run(
            "{ offers(filter: {gpuModel: \"L40S\", gpuModels: [\"RTX 4090\"]}) {
                 nodes { id } noOffers { constraints { constraint eliminated } relaxations { constraint value } } } }",
            json!({}),
        )
        .await
        .expect("offers");
    let why = &data["offers"]["noOffers"];
    let named: Vec<&str> = why["constraints"]
        .as_array()
        .expect("constraints")
        .iter()
        .map(|c| c["constraint"].as_str().expect("name"))
        .collect();
    assert!(named.contains(&"gpu_model"), "{why}");
    assert!(named.contains(&"gpu_models"), "{why}");
    let relaxed: Vec<(&str, &str)> = why["relaxations"]
        .as_array()
        .expect("relaxations")
        .iter()
        .map(|r| {
            (
                r["constraint"].as_str().unwrap(),
                r["value"].as_str().unwrap(),
            )
        })
        .collect();
    assert!(relaxed.contains(&("gpu_model", "RTX 4090 (2)")), "{why}");
    assert!(relaxed.contains(&("gpu_models", "L40S (1)")), "{why}");

    // `storage=N`: machines with at least N GiB of disk, N GiB priced in.
    let query = |q: &'static str| {
        let api = &m.api;
        async move {
            api.run(
                "query($q: String) { offers(query: $q) { nodes { id pricePerHourGpuOnly pricePerHourAllIn } } }",
                json!({ "q": q }),
            )
            .await
            .expect("offers")["offers"]["nodes"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        }
    };
    let stored = query("storage=1500").await;
    let names: Vec<&str> = stored
        .iter()
        .map(|o| m.names[o["id"].as_str().unwrap()])
        .collect();
    assert_eq!(names, ["m2", "m1"]);
    // m1: 2.49 + 1500 GB × 0.10 / 730 h.
    assert_eq!(stored[1]["pricePerHourGpuOnly"], "2.49");
    assert_eq!(stored[1]["pricePerHourAllIn"], "2.695479452");
    assert_eq!(query("storage=0").await.len(), 5);
    m.env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compact_query_searches_and_points_at_a_bad_token() {
    let m = Market::new().await;
    let data = m
        .api
        .run("{ offers(query: \"gpu_name=RTX_4090 num_gpus>=2 dph<=0.6 country in [US,CA]\") { nodes { id } } }", json!({}))
        .await
        .expect("offers");
    let found: Vec<&str> = data["offers"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| m.names[o["id"].as_str().unwrap()])
        .collect();
    assert_eq!(found, ["m3"]);
    let bad = m
        .api
        .run(
            "{ offers(query: \"gpu_nmae=RTX_4090\") { nodes { id } } }",
            json!({}),
        )
        .await;
    let err = bad.expect_err("bad field");
    assert_eq!(err.code, "VALIDATION");
    assert!(err.message.contains("position 0"), "{}", err.message);
    let both = m
        .api
        .run(
            "{ offers(query: \"dph<=1\", filter: {gpuCount: 1}) { nodes { id } } }",
            json!({}),
        )
        .await;
    assert_eq!(both.expect_err("both").code, "VALIDATION");
    m.env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_machines_and_terms_are_refused_and_nothing_is_stored() {
    let m = Market::new().await;
    let before = m.env.count("SELECT count(*) AS n FROM catalog.machines");
    let agents_before = m.env.agent_users().await;
    let register = |spec: Value| {
        let host = m.host.clone();
        async move {
            let mut input = json!({"name": "x", "gpuModel": "RTX 4090", "gpuCount": 1, "cpuCores": 4, "ramGib": 16,
                                   "diskGib": 100, "country": "US", "idempotencyKey": uuid::Uuid::now_v7().to_string()});
            for (k, v) in spec.as_object().unwrap() {
                input[k] = v.clone();
            }
            host.run("mutation($i: RegisterMachineInput!) { registerMachine(input: $i) { machine { id } } }", json!({ "i": input }))
                .await
                .expect_err("must be refused")
        }
    };
    let unknown = register(json!({"gpuModel": "RTX 9999"})).await;
    assert_eq!(unknown.code, "VALIDATION");
    assert!(
        unknown.message.starts_with("gpuModel"),
        "{}",
        unknown.message
    );
    assert!(
        unknown.message.contains("RTX 4090"),
        "lists known models: {}",
        unknown.message
    );
    assert_eq!(register(json!({"gpuCount": 0})).await.code, "VALIDATION");
    assert_eq!(
        register(json!({"cudaVersion": "twelve"})).await.code,
        "VALIDATION"
    );
    assert_eq!(register(json!({"country": "USA"})).await.code, "VALIDATION");
    // A refused registration leaves no agent login on the broker (an
    // unknown model once got one, with no machine to ever remove it).
    assert_eq!(m.env.agent_users().await, agents_before);
    assert_eq!(
        m.env.count("SELECT count(*) AS n FROM catalog.machines"),
        before
    );

    let price = |vars: Value| {
        let host = m.host.clone();
        let id = m.ids["m3"].clone();
        async move {
            let mut v = json!({ "id": id, "price": "0.5" });
            for (k, x) in vars.as_object().unwrap() {
                v[k] = x.clone();
            }
            host.run(
                "mutation($id: ID!, $price: Decimal!, $bid: Decimal, $counts: [Int!], $until: String) {
                   setMachinePricing(machineId: $id, pricePerGpuHour: $price, minBidPerGpuHour: $bid, allowedGpuCounts: $counts, listUntil: $until) { id } }",
                v,
            )
            .await
            .expect_err("must be refused")
        }
    };
    assert_eq!(price(json!({"price": "-1"})).await.code, "VALIDATION");
    assert_eq!(
        price(json!({"bid": "0.9"})).await.code,
        "VALIDATION",
        "bid above on-demand"
    );
    assert_eq!(price(json!({"counts": [3]})).await.code, "VALIDATION");
    let past = price(json!({"until": "2020-01-01T00:00:00Z"})).await;
    assert!(past.message.starts_with("listUntil"), "{}", past.message);
    // The terms are unchanged.
    let terms = m
        .host
        .run(
            "{ myMachines { id pricePerGpuHour allowedGpuCounts } }",
            json!({}),
        )
        .await
        .expect("machines");
    let m3 = terms["myMachines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == m.ids["m3"].as_str())
        .unwrap()
        .clone();
    assert_eq!(m3["pricePerGpuHour"], "0.34");
    assert_eq!(m3["allowedGpuCounts"], json!([1, 2]));

    // Another host's machine is as good as missing.
    let (stranger, _) = sign_up(&m.api, &["HOST"]).await;
    let other = stranger
        .run("mutation($id: ID!) { setMachinePricing(machineId: $id, pricePerGpuHour: \"9\") { id } }", json!({ "id": m.ids["m1"] }))
        .await;
    assert_eq!(other.expect_err("not theirs").code, "NOT_FOUND");
    m.env.cleanup().await;
}

/// `extensions.fieldErrors` of the one error in `body`, as (field, message).
fn field_errors(body: &Value) -> Vec<(String, String)> {
    let errors = body["errors"].as_array().expect("errors");
    assert_eq!(errors.len(), 1, "{body}");
    assert_eq!(errors[0]["extensions"]["code"], "VALIDATION", "{body}");
    errors[0]["extensions"]["fieldErrors"]
        .as_array()
        .unwrap_or_else(|| panic!("fieldErrors: {body}"))
        .iter()
        .map(|e| {
            (
                e["field"].as_str().expect("field").to_owned(),
                e["message"].as_str().expect("message").to_owned(),
            )
        })
        .collect()
}

/// A form with several wrong fields learns about all of them in one answer
/// (the portal marks each input), and nothing is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_invalid_field_of_a_form_is_reported_at_once() {
    let m = Market::new().await;
    let machines = m.env.count("SELECT count(*) AS n FROM catalog.machines");
    let body = m
        .host
        .raw(
            "mutation($i: RegisterMachineInput!) { registerMachine(input: $i) { machine { id } } }",
            json!({ "i": {"name": " ", "gpuModel": "RTX 4090", "gpuCount": 0, "cpuCores": 4, "ramGib": 16,
                          "diskGib": 100, "country": "USA", "cudaVersion": "twelve", "idempotencyKey": "form-1"} }),
        )
        .await
        .expect("transport");
    let fields = field_errors(&body);
    let names: Vec<&str> = fields.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(names, ["name", "gpuCount", "country", "cudaVersion"]);
    assert_eq!(fields[1].1, "must be between 1 and 64");
    // Clients that read only the message still see every field.
    let message = body["errors"][0]["message"].as_str().expect("message");
    assert!(
        message.starts_with(
            "name: 1 to 200 characters; gpuCount: must be between 1 and 64; country: "
        ),
        "{message}"
    );
    assert_eq!(
        m.env.count("SELECT count(*) AS n FROM catalog.machines"),
        machines
    );

    let profiles = m
        .env
        .count("SELECT count(*) AS n FROM catalog.host_profiles");
    let body = m
        .host
        .raw(
            "mutation { updateHostProfile(input: {legalName: \"\", country: \"Canada\", payoutCurrency: \"CA\"}) { legalName } }",
            json!({}),
        )
        .await
        .expect("transport");
    let names: Vec<String> = field_errors(&body).into_iter().map(|(f, _)| f).collect();
    assert_eq!(names, ["legalName", "country", "payoutCurrency"]);
    assert_eq!(
        m.env
            .count("SELECT count(*) AS n FROM catalog.host_profiles"),
        profiles
    );

    let users = m.env.count("SELECT count(*) AS n FROM quota.users");
    let body = m
        .api
        .raw(
            "mutation { signUp(input: {email: \"nobody\", password: \"short\", tenantName: \"Ok\", roles: [HOST]}) { token } }",
            json!({}),
        )
        .await
        .expect("transport");
    assert_eq!(
        field_errors(&body),
        [
            ("email".to_owned(), "not an email address".to_owned()),
            ("password".to_owned(), "at least 8 characters".to_owned()),
        ]
    );
    assert_eq!(m.env.count("SELECT count(*) AS n FROM quota.users"), users);
    m.env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_profiles_are_kept_and_only_operators_verify() {
    let m = Market::new().await;
    let profile = m
        .host
        .run(
            "mutation { updateHostProfile(input: {legalName: \"Garage Rigs Ltd\", country: \"ca\", payoutCurrency: \"cad\"}) { legalName country payoutCurrency verification } }",
            json!({}),
        )
        .await
        .expect("profile")["updateHostProfile"]
        .clone();
    assert_eq!(
        profile,
        json!({"legalName": "Garage Rigs Ltd", "country": "CA", "payoutCurrency": "CAD", "verification": "UNVERIFIED"})
    );
    let me = m
        .host
        .run("{ me { tenantId } }", json!({}))
        .await
        .expect("me");
    let tenant = me["me"]["tenantId"].clone();
    let self_verify = m
        .host
        .run("mutation($t: ID!) { setHostVerification(tenantId: $t, verification: VERIFIED, reason: \"trust me\") { verification } }", json!({ "t": tenant }))
        .await;
    assert_eq!(
        self_verify.expect_err("host cannot verify itself").code,
        "FORBIDDEN"
    );
    let no_reason = m
        .operator
        .run("mutation($t: ID!) { setHostVerification(tenantId: $t, verification: SUSPENDED, reason: \" \") { verification } }", json!({ "t": tenant }))
        .await;
    assert_eq!(no_reason.expect_err("reason required").code, "VALIDATION");
    let suspended = m
        .operator
        .run(
            "mutation($t: ID!) { setHostVerification(tenantId: $t, verification: SUSPENDED, reason: \"chargebacks\") { verification verificationReason } }",
            json!({ "t": tenant }),
        )
        .await
        .expect("suspend");
    assert_eq!(
        suspended["setHostVerification"],
        json!({"verification": "SUSPENDED", "verificationReason": "chargebacks"})
    );
    // Announced to the host once (its webhooks); the refused attempts, not.
    assert_eq!(
        m.env.count(&format!(
            "SELECT count(*) AS n FROM catalog.outbox WHERE routing_key = 'catalog.host.verification' \
             AND body->'payload'->>'host_tenant_id' = {} \
             AND body->'payload'->>'verification' = 'suspended' \
             AND body->'payload'->>'reason' = 'chargebacks'",
            tenant.to_string().replace('"', "'")
        )),
        1
    );
    m.env.assert_sequenced(
        "catalog",
        &["catalog.host.verification"],
        "'host:' || (body->'payload'->>'host_tenant_id')",
    );
    let seen = m
        .host
        .run(
            "{ hostProfile { verification verificationReason legalName } }",
            json!({}),
        )
        .await
        .expect("profile");
    assert_eq!(seen["hostProfile"]["verification"], "SUSPENDED");
    m.env.cleanup().await;
}
