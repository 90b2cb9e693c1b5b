//! Fractional GPUs (issue 21, docs/mig.md): MIG slices ordered through the
//! public API, placed without overlap (read back from PostgreSQL), never
//! mixed with whole rentals on one GPU, and billed at the slice's price to
//! the second.

use std::time::Duration;

use gpumarket::client::Client;
use gpumarket::dev::Parts;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rust_decimal::Decimal;
use serde_json::{Value, json};

use crate::harness::*;

const SSH_KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpumarketTestKey test@gpumarket";

async fn set_mode(
    host: &Client,
    machine: &str,
    gpu: i32,
    mode: &str,
) -> Result<Value, gpumarket::client::GraphQlError> {
    host.run(
        "mutation($input: SetGpuModeInput!) { setGpuMode(input: $input) { index mode rentedWhole slices { profile start size } } }",
        json!({ "input": { "machineId": machine, "gpuIndex": gpu, "mode": mode } }),
    )
    .await
    .map(|d| d["setGpuMode"].clone())
}

async fn order_slice(
    renter: &Client,
    offer: &str,
    profile: &str,
    key: &str,
) -> Result<Value, gpumarket::client::GraphQlError> {
    renter
        .run(
            "mutation($input: CreateOrderInput!) { createOrder(input: $input) { id status migProfile pricePerGpuHour pricePerHourTotal } }",
            json!({ "input": { "offerId": offer, "gpuCount": 1, "migProfile": profile,
                               "idempotencyKey": key, "sshPublicKey": SSH_KEY } }),
        )
        .await
        .map(|d| d["createOrder"].clone())
}

/// A host with a listed H100 machine of `gpus` GPUs, and a funded renter
/// without quota limits that matter here.
struct Market {
    env: TestEnv,
    stack: gpumarket::dev::Stack,
    host: Client,
    renter: Client,
}

async fn market(parts: Parts) -> Market {
    let env = TestEnv::new().await;
    let stack = env.start(parts).await;
    let api = Client::new(&stack.gateway_url);
    let (host, _) = sign_up(&api, &["HOST"]).await;
    let (renter, tenant) = sign_up(&api, &["RENTER"]).await;
    let operator = env.operator(&api).await;
    grant(&operator, &tenant, "100000").await;
    operator
        .run(
            "mutation($t: ID!) { setTenantQuota(tenantId: $t, maxGpus: 1000) { maxGpus } }",
            json!({ "t": tenant }),
        )
        .await
        .expect("setTenantQuota");
    Market {
        env,
        stack,
        host,
        renter,
    }
}

/// Live slice allocations whose memory slices overlap on one GPU, from the
/// allocations' own placements (not from the holds, whose primary key
/// could not show it).
const OVERLAPS: &str = "SELECT count(*) AS n FROM catalog.allocations a \
     JOIN catalog.allocations b ON a.machine_id = b.machine_id AND a.mig_gpu_index = b.mig_gpu_index \
      AND a.order_id < b.order_id \
      AND int4range(a.mig_start, a.mig_start + a.mig_size) && int4range(b.mig_start, b.mig_start + b.mig_size) \
     WHERE a.released_at IS NULL AND b.released_at IS NULL";

/// Live allocations whose holds are not exactly their placement.
const HOLDS_DISAGREE: &str = "SELECT count(*) AS n FROM catalog.allocations a \
     WHERE a.released_at IS NULL AND a.mig_profile IS NOT NULL AND \
       (SELECT array_agg(h.memory_slice ORDER BY h.memory_slice) FROM catalog.gpu_holds h \
         WHERE h.holder = a.order_id AND h.gpu_index = a.mig_gpu_index) \
       IS DISTINCT FROM ARRAY(SELECT generate_series(a.mig_start, a.mig_start + a.mig_size - 1))::smallint[]";

/// GPUs holding both a whole rental and a slice.
const MIXED: &str = "SELECT count(*) AS n FROM (SELECT h.machine_id, h.gpu_index FROM catalog.gpu_holds h \
     JOIN catalog.allocations a ON a.order_id = h.holder \
     GROUP BY h.machine_id, h.gpu_index \
     HAVING bool_or(a.mig_profile IS NULL) AND bool_or(a.mig_profile IS NOT NULL)) g";

/// Racing slice orders of random profiles on one machine (two MIG GPUs),
/// over several seeds: no two live slices share a memory slice, every
/// allocation holds exactly its placement, and what won is what runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_slice_orders_never_share_a_memory_slice() {
    let m = market(Parts::SERVICES).await;
    let profiles = [
        "1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb",
    ];
    // One GPU, then across a machine of two and of four.
    for (seed, gpus) in [(7u64, 1), (21, 2), (1234, 4)] {
        let offer = listed_machine(&m.host, "H100 80GB SXM", gpus, "2.40").await;
        for gpu in 0..gpus {
            set_mode(&m.host, &offer, gpu, "MIG_AUTO")
                .await
                .expect("MIG");
        }
        m.env.heartbeat_all();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let wanted: Vec<&str> = (0..20)
            .map(|_| *profiles.choose(&mut rng).expect("profile"))
            .collect();
        let racers: Vec<_> = wanted
            .iter()
            .enumerate()
            .map(|(i, profile)| {
                let (renter, offer, profile) =
                    (m.renter.clone(), offer.clone(), (*profile).to_owned());
                let key = format!("slice-{seed}-{i}-{}", rng.r#gen::<u32>());
                tokio::spawn(async move { order_slice(&renter, &offer, &profile, &key).await })
            })
            .collect();
        let mut won = 0;
        for racer in racers {
            match racer.await.expect("join") {
                Ok(placed) => {
                    assert!(placed["migProfile"].is_string(), "{placed}");
                    won += 1;
                }
                Err(e) => assert_eq!(e.code, "INSUFFICIENT_CAPACITY", "{e}"),
            }
        }
        assert!(won >= gpus, "seed {seed}: each empty GPU takes a slice");
        assert_eq!(m.env.count(OVERLAPS), 0, "seed {seed}: overlapping slices");
        assert_eq!(
            m.env.count(HOLDS_DISAGREE),
            0,
            "seed {seed}: holds differ from placements"
        );
        assert_eq!(
            m.env.count(&format!(
                "SELECT count(*) AS n FROM catalog.allocations WHERE released_at IS NULL AND machine_id = '{offer}'"
            )),
            i64::from(won),
            "seed {seed}"
        );
        // Slices never count on the whole-GPU counter.
        assert_eq!(
            m.env.count(&format!(
                "SELECT gpus_allocated::bigint AS n FROM catalog.machines WHERE id = '{offer}'"
            )),
            0
        );
        // The offer's free counts are the placements still possible.
        let used: i64 = m.env.count(&format!(
            "SELECT coalesce(sum(mig_size), 0)::bigint AS n FROM catalog.allocations \
             WHERE released_at IS NULL AND machine_id = '{offer}'"
        ));
        assert!(
            used <= 8 * i64::from(gpus),
            "seed {seed}: {used} memory slices"
        );
        println!(
            "seed {seed}: {won} of 20 slice orders placed on {gpus} GPUs, {used} of {} memory slices in use",
            8 * gpus
        );
    }
    m.stack.stop().await;
    m.env.cleanup().await;
}

/// Whole-GPU orders, slice orders and a host switching a GPU's mode, all at
/// once on one machine: no GPU ever holds a whole rental and a slice, whole
/// rentals never land on a MIG GPU, and a GPU in use never changes mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn whole_and_slice_orders_racing_never_mix_on_a_gpu() {
    let m = market(Parts::SERVICES).await;
    for seed in [3u64, 99] {
        let offer = listed_machine(&m.host, "A100 80GB SXM", 4, "1.60").await;
        set_mode(&m.host, &offer, 0, "MIG_AUTO")
            .await
            .expect("gpu 0 MIG");
        set_mode(&m.host, &offer, 1, "MIG_AUTO")
            .await
            .expect("gpu 1 MIG");
        m.env.heartbeat_all();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut racers = Vec::new();
        for i in 0..24 {
            let (renter, host, offer) = (m.renter.clone(), m.host.clone(), offer.clone());
            let key = format!("mix-{seed}-{i}");
            let pick = rng.gen_range(0..4);
            racers.push(tokio::spawn(async move {
                match pick {
                    0 => order(&renter, &offer, 1, &key).await.map(|_| "whole"),
                    1 => set_mode(&host, &offer, 0, "WHOLE").await.map(|_| "mode"),
                    2 => order_slice(&renter, &offer, "3g.40gb", &key)
                        .await
                        .map(|_| "slice"),
                    _ => order_slice(&renter, &offer, "1g.10gb", &key)
                        .await
                        .map(|_| "slice"),
                }
            }));
        }
        for racer in racers {
            match racer.await.expect("join") {
                Ok(_) => {}
                Err(e) => assert!(
                    ["INSUFFICIENT_CAPACITY", "CONFLICT"].contains(&e.code.as_str()),
                    "{e}"
                ),
            }
        }
        assert_eq!(
            m.env.count(MIXED),
            0,
            "seed {seed}: a GPU holds a whole rental and a slice"
        );
        assert_eq!(m.env.count(OVERLAPS), 0, "seed {seed}");
        // Whole rentals only on GPUs not in MIG mode.
        assert_eq!(
            m.env.count(&format!(
                "SELECT count(*) AS n FROM catalog.gpu_holds h JOIN catalog.allocations a ON a.order_id = h.holder \
                 JOIN catalog.mig_gpus g ON g.machine_id = h.machine_id AND g.gpu_index = h.gpu_index \
                 WHERE a.mig_profile IS NULL AND h.machine_id = '{offer}'"
            )),
            0,
            "seed {seed}: a whole rental on a MIG GPU"
        );
        // The counter agrees with the holds.
        assert_eq!(
            m.env.count(&format!(
                "SELECT (gpus_allocated - (SELECT count(DISTINCT h.gpu_index) FROM catalog.gpu_holds h \
                   JOIN catalog.allocations a ON a.order_id = h.holder \
                   WHERE h.machine_id = m.id AND a.mig_profile IS NULL))::bigint AS n \
                 FROM catalog.machines m WHERE id = '{offer}'"
            )),
            0
        );
    }
    m.stack.stop().await;
    m.env.cleanup().await;
}

/// End to end through GraphQL on simulated MIG GPUs: the host prices a
/// profile, the renter finds the slice in search, orders it, runs, stops,
/// and is billed the slice's price to the second; the quota counts half a
/// GPU; the portal's view shows the slice; bad input is refused clearly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slice_runs_and_is_billed_the_slice_price_to_the_second() {
    let mut env_only = TestEnv::new().await;
    env_only.settlement_interval_ms(3_600_000);
    let stack = env_only.start(Parts::ALL).await;
    let env = env_only;
    let api = Client::new(&stack.gateway_url);
    let (host, _) = sign_up(&api, &["HOST"]).await;
    let (renter, tenant) = sign_up(&api, &["RENTER"]).await;
    let operator = env.operator(&api).await;
    grant(&operator, &tenant, "100").await;

    let offer = listed_machine(&host, "H100 80GB SXM", 2, "2.40").await;
    env.heartbeat_all();
    // Not MIG yet: no slices for sale.
    let refused = order_slice(&renter, &offer, "3g.40gb", "too-early")
        .await
        .expect_err("no MIG GPU");
    assert_eq!(refused.code, "VALIDATION", "{refused}");

    let gpus = set_mode(&host, &offer, 0, "MIG_AUTO").await.expect("MIG");
    assert_eq!(gpus[0]["mode"], "MIG_AUTO");
    assert_eq!(gpus[1]["mode"], "WHOLE");
    let bad = set_mode(&host, &offer, 7, "MIG_AUTO")
        .await
        .expect_err("no GPU 7");
    assert_eq!(bad.code, "VALIDATION", "{bad}");
    host.run(
        "mutation($input: SetMigPricesInput!) { setMigPrices(input: $input) { profile pricePerHour } }",
        json!({ "input": { "machineId": offer, "prices": [{ "profile": "3g.40gb", "pricePerHour": "1.08" }] } }),
    )
    .await
    .expect("setMigPrices");
    let unknown = host
        .run(
            "mutation($input: SetMigPricesInput!) { setMigPrices(input: $input) { profile } }",
            json!({ "input": { "machineId": offer, "prices": [{ "profile": "9g.900gb", "pricePerHour": "1" }] } }),
        )
        .await
        .expect_err("unknown profile");
    assert_eq!(unknown.code, "VALIDATION", "{unknown}");

    // Search finds the slice by profile, with its free count and price; a
    // profile nobody sells explains itself.
    let found = renter
        .run(
            "query($f: OfferFilter!) { offers(filter: $f) { nodes { id gpusFree migSlices { profile free pricePerHour memoryGib } } noOffers { constraints { constraint eliminated } } } }",
            json!({ "f": { "migProfile": "3g.40gb" } }),
        )
        .await
        .expect("offers")["offers"]
        .clone();
    let node = found["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .find(|n| n["id"] == json!(offer))
        .expect("the MIG offer")
        .clone();
    assert_eq!(node["gpusFree"], 1, "one GPU left whole");
    let slice = node["migSlices"]
        .as_array()
        .expect("slices")
        .iter()
        .find(|s| s["profile"] == "3g.40gb")
        .expect("3g.40gb")
        .clone();
    assert_eq!(
        (slice["free"].clone(), dec(&slice["pricePerHour"])),
        (json!(2), "1.08".parse().expect("d"))
    );
    let derived = node["migSlices"]
        .as_array()
        .expect("slices")
        .iter()
        .find(|s| s["profile"] == "1g.10gb")
        .expect("1g.10gb")
        .clone();
    assert_eq!(
        dec(&derived["pricePerHour"]),
        "0.3".parse().expect("d"),
        "2.40 × 1/8"
    );
    // The compact query language says the same.
    let compact = renter
        .run(
            "{ offers(query: \"mig=3g.40gb dph<=1.10\") { nodes { id } } }",
            json!({}),
        )
        .await
        .expect("offers by query")["offers"]["nodes"]
        .clone();
    assert!(compact.to_string().contains(&offer), "{compact}");
    let dearer = renter
        .run(
            "{ offers(query: \"mig=3g.40gb dph<=1.00\") { nodes { id } } }",
            json!({}),
        )
        .await
        .expect("offers by query")["offers"]["nodes"]
        .clone();
    assert!(
        !dearer.to_string().contains(&offer),
        "1.08 is above 1.00: {dearer}"
    );
    let none = renter
        .run(
            "query($f: OfferFilter!) { offers(filter: $f) { nodes { id } noOffers { constraints { constraint eliminated } } } }",
            json!({ "f": { "migProfile": "7g.80gb", "gpuModel": "A100 80GB SXM" } }),
        )
        .await
        .expect("offers")["offers"]
        .clone();
    assert_eq!(none["nodes"], json!([]));
    assert!(
        none["noOffers"]["constraints"]
            .to_string()
            .contains("mig_profile"),
        "{none}"
    );

    // Order, run, stop.
    let placed = order_slice(&renter, &offer, "3g.40gb", "slice-e2e")
        .await
        .expect("order");
    assert_eq!(placed["migProfile"], "3g.40gb");
    assert_eq!(dec(&placed["pricePerGpuHour"]), "1.08".parse().expect("d"));
    assert_eq!(
        dec(&placed["pricePerHourTotal"]),
        "1.08".parse().expect("d")
    );
    let id = placed["id"].as_str().expect("id").to_owned();
    let running = wait_running(&renter, &id, Duration::from_secs(30)).await;
    // The quota counts half a GPU.
    let usage = renter
        .run(
            "{ tenantQuota { gpusInUse quota { usage { gpus gpuEquivalents } } } }",
            json!({}),
        )
        .await
        .expect("tenantQuota");
    assert_eq!(
        dec(&usage["tenantQuota"]["quota"]["usage"]["gpuEquivalents"]),
        "0.5".parse().expect("d"),
        "{usage}"
    );
    // The host sees the slice on GPU 0; GPU 0 cannot change mode now.
    let view = host
        .run(
            "query { myMachines { id gpus { index mode rentedWhole slices { profile start size } } } }",
            json!({}),
        )
        .await
        .expect("machines");
    let mine = view["myMachines"]
        .as_array()
        .expect("machines")
        .iter()
        .find(|m| m["id"] == json!(offer))
        .expect("machine")
        .clone();
    assert_eq!(mine["gpus"][0]["slices"][0]["profile"], "3g.40gb", "{mine}");
    assert_eq!(mine["gpus"][0]["slices"][0]["size"], 4);
    // The host's rented event names the slice.
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM catalog.outbox WHERE routing_key = 'catalog.machine.rented' \
             AND body->'payload'->>'machine_id' = '{offer}' \
             AND body->'payload'->'mig'->>'profile' = '3g.40gb' AND (body->'payload'->'mig'->>'size')::int = 4"
        )),
        1
    );
    let busy = set_mode(&host, &offer, 0, "WHOLE").await.expect_err("busy");
    assert_eq!(busy.code, "CONFLICT", "{busy}");

    tokio::time::sleep(Duration::from_millis(1500)).await;
    let stopped = renter
        .run(
            "mutation($id: ID!) { stopInstance(id: $id) { id status runningAt stoppedAt } }",
            json!({ "id": id }),
        )
        .await
        .expect("stop")["stopInstance"]
        .clone();
    let at =
        |v: &Value| -> chrono::DateTime<chrono::Utc> { v.as_str().expect("t").parse().expect("t") };
    let seconds = (at(&stopped["stoppedAt"]) - at(&running["runningAt"]))
        .num_microseconds()
        .expect("micros")
        .div_euclid(1_000_000);
    let gpu_postings = format!(
        "SELECT count(*) AS n FROM billing.usage_details d \
         JOIN billing.transactions t ON t.id = d.transaction_id \
         WHERE t.instance_id = '{id}' AND d.meter = 'gpu'"
    );
    eventually("the run posted", Duration::from_secs(30), || async {
        (env.count(&gpu_postings) == 1).then_some(())
    })
    .await;
    let charges = renter
        .run(
            "query($id: ID!) { instance(id: $id) { charges { gpuSeconds gpuCost } } }",
            json!({ "id": id }),
        )
        .await
        .expect("charges")["instance"]["charges"]
        .clone();
    assert_eq!(charges["gpuSeconds"], json!(seconds), "{charges}");
    assert_eq!(
        dec(&charges["gpuCost"]),
        contracts::money::rate(seconds, "1.08".parse::<Decimal>().expect("d")),
        "the slice's price per hour, to the second"
    );
    // Destroyed: the slice is given back and the offer shows it free again.
    renter
        .run(
            "mutation($id: ID!) { destroyInstance(id: $id) { id } }",
            json!({ "id": id }),
        )
        .await
        .expect("destroy");
    eventually("slice released", Duration::from_secs(30), || async {
        (env.count(&format!(
            "SELECT count(*) AS n FROM catalog.gpu_holds WHERE machine_id = '{offer}'"
        )) == 0)
            .then_some(())
    })
    .await;
    assert_eq!(
        env.count(&format!(
            "SELECT free::bigint AS n FROM catalog.mig_free WHERE machine_id = '{offer}' AND profile = '3g.40gb'"
        )),
        2
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM catalog.outbox WHERE routing_key = 'catalog.machine.released' \
             AND body->'payload'->>'machine_id' = '{offer}' AND body->'payload'->'mig'->>'profile' = '3g.40gb'"
        )),
        1,
        "the release names the slice too"
    );
    let _ = &api;
    stack.stop().await;
    env.cleanup().await;
}

/// A fixed layout is checked when set and followed when ordering: slices
/// land only in its slots, a profile it has no slot for is refused, and a
/// slice order's bad input is refused clearly before anything is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_layout_takes_only_its_slots_and_bad_slice_orders_are_refused() {
    let m = market(Parts::SERVICES).await;
    let offer = listed_machine(&m.host, "H200 141GB SXM", 1, "3.20").await;
    m.env.heartbeat_all();
    let layout = |slots: Value| {
        let host = m.host.clone();
        let offer = offer.clone();
        async move {
            host.run(
                "mutation($input: SetGpuModeInput!) { setGpuMode(input: $input) { index mode layout { profile start } } }",
                json!({ "input": { "machineId": offer, "gpuIndex": 0, "mode": "MIG_FIXED", "layout": slots } }),
            )
            .await
        }
    };
    // Overlapping slots and a start the profile cannot take are refused.
    let overlap =
        layout(json!([{ "profile": "4g.71gb", "start": 0 }, { "profile": "2g.35gb", "start": 2 }]))
            .await
            .expect_err("overlap");
    assert_eq!(overlap.code, "VALIDATION", "{overlap}");
    let bad_start = layout(json!([{ "profile": "3g.71gb", "start": 2 }]))
        .await
        .expect_err("start 2");
    assert_eq!(bad_start.code, "VALIDATION", "{bad_start}");
    // One 3g at 0 and two 1g.18gb at 4 and 5.
    layout(json!([
        { "profile": "3g.71gb", "start": 0 },
        { "profile": "1g.18gb", "start": 4 },
        { "profile": "1g.18gb", "start": 5 }
    ]))
    .await
    .expect("layout");

    order_slice(&m.renter, &offer, "3g.71gb", "fixed-3g")
        .await
        .expect("3g slot");
    let second = order_slice(&m.renter, &offer, "3g.71gb", "fixed-3g-2")
        .await
        .expect_err("one 3g slot");
    assert_eq!(second.code, "INSUFFICIENT_CAPACITY", "{second}");
    let off_layout = order_slice(&m.renter, &offer, "2g.35gb", "fixed-2g")
        .await
        .expect_err("no 2g slot");
    assert_eq!(off_layout.code, "INSUFFICIENT_CAPACITY", "{off_layout}");
    order_slice(&m.renter, &offer, "1g.18gb", "fixed-1g-a")
        .await
        .expect("1g slot");
    order_slice(&m.renter, &offer, "1g.18gb", "fixed-1g-b")
        .await
        .expect("1g slot");
    assert_eq!(
        m.env.count(&format!(
            "SELECT count(*) AS n FROM catalog.allocations WHERE released_at IS NULL AND machine_id = '{offer}' \
             AND (mig_profile, mig_start) NOT IN (('3g.71gb', 0), ('1g.18gb', 4), ('1g.18gb', 5))"
        )),
        0,
        "every slice in a slot of the layout"
    );
    assert_eq!(m.env.count(OVERLAPS), 0);

    // Bad slice orders: refused before anything is held.
    let held = m.env.count("SELECT count(*) AS n FROM catalog.allocations");
    for (input, field) in [
        (
            json!({ "offerId": offer, "gpuCount": 2, "migProfile": "1g.18gb" }),
            "gpuCount",
        ),
        (
            json!({ "offerId": offer, "gpuCount": 1, "migProfile": "1g.18gb", "rentalType": "INTERRUPTIBLE", "bidPerGpuHour": "1" }),
            "on demand",
        ),
        (
            json!({ "offerId": offer, "gpuCount": 1, "migProfile": "nine gigs; DROP TABLE" }),
            "migProfile",
        ),
        (
            json!({ "offerId": offer, "gpuCount": 1, "migProfile": "3g.40gb" }),
            "migProfile",
        ),
    ] {
        let mut input = input;
        input["idempotencyKey"] = json!(uuid::Uuid::now_v7().to_string());
        input["sshPublicKey"] = json!(SSH_KEY);
        let refused = m
            .renter
            .run(
                "mutation($input: CreateOrderInput!) { createOrder(input: $input) { id } }",
                json!({ "input": input }),
            )
            .await
            .expect_err("refused");
        assert_eq!(refused.code, "VALIDATION", "{input}: {refused}");
        assert!(refused.message.contains(field), "{input}: {refused}");
    }
    assert_eq!(
        m.env.count("SELECT count(*) AS n FROM catalog.allocations"),
        held
    );
    m.stack.stop().await;
    m.env.cleanup().await;
}

/// A slice ordered by constraints goes to the cheapest free slice of its
/// profile that matches, under the order's maximum per slice-hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slice_ordered_by_constraints_takes_the_cheapest_free_slice() {
    let m = market(Parts::SERVICES).await;
    let h100 = listed_machine(&m.host, "H100 80GB SXM", 1, "2.40").await;
    let a100 = listed_machine(&m.host, "A100 80GB SXM", 1, "1.60").await;
    for machine in [&h100, &a100] {
        set_mode(&m.host, machine, 0, "MIG_AUTO")
            .await
            .expect("MIG");
    }
    m.env.heartbeat_all();
    let by_constraints = |key: &str, max: &str| {
        let renter = m.renter.clone();
        let (key, max) = (key.to_owned(), max.to_owned());
        async move {
            renter
                .run(
                    "mutation($input: CreateOrderInput!) { createOrder(input: $input) { id migProfile pricePerGpuHour } }",
                    json!({ "input": {
                        "constraints": { "gpuModels": ["H100 80GB SXM", "A100 80GB SXM"] },
                        "gpuCount": 1, "migProfile": "3g.40gb", "maxPricePerGpuHour": max,
                        "idempotencyKey": key, "sshPublicKey": SSH_KEY } }),
                )
                .await
                .map(|d| d["createOrder"].clone())
        }
    };
    // The A100's 3g.40gb costs 1.60 × 4/8 = 0.80, the H100's 1.20.
    for key in ["c-1", "c-2"] {
        let placed = by_constraints(key, "1.00").await.expect("placed");
        assert_eq!(
            dec(&placed["pricePerGpuHour"]),
            "0.8".parse().expect("d"),
            "{placed}"
        );
    }
    assert_eq!(
        m.env.count(&format!(
            "SELECT count(*) AS n FROM catalog.allocations WHERE released_at IS NULL AND machine_id = '{a100}'"
        )),
        2
    );
    // The A100 is full; the H100's slice is above the maximum.
    let refused = by_constraints("c-3", "1.00")
        .await
        .expect_err("none left under 1.00");
    assert_eq!(refused.code, "INSUFFICIENT_CAPACITY", "{refused}");
    assert!(refused.message.contains("3g.40gb"), "{refused}");
    let placed = by_constraints("c-4", "1.50")
        .await
        .expect("the H100's slice");
    assert_eq!(dec(&placed["pricePerGpuHour"]), "1.2".parse().expect("d"));
    assert_eq!(m.env.count(OVERLAPS), 0);
    // Quota: three half-GPU slices are 1.5 GPU-equivalents.
    assert_eq!(
        m.env.count(
            "SELECT sum(gpu_eighths)::bigint AS n FROM quota.reservations WHERE released_at IS NULL"
        ),
        12
    );
    m.stack.stop().await;
    m.env.cleanup().await;
}

/// A machine whose agent reported no MIG capability (an agent from before
/// slices, which would bind a whole GPU per slice, or a real host built
/// without NVML) cannot be put in MIG mode or sell a slice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_whose_agent_cannot_make_slices_sells_none() {
    let m = market(Parts::SERVICES).await;
    let offer = listed_machine(&m.host, "H100 80GB SXM", 2, "2.40").await;
    m.env.heartbeat_all();
    set_mode(&m.host, &offer, 0, "MIG_AUTO")
        .await
        .expect("no agent report yet");
    // Its agent reports in: an older one, without capabilities.
    m.env.exec(&format!(
        "INSERT INTO catalog.agent_reports (machine_id, inventory, inventory_at) VALUES \
         ('{offer}', '{{\"agent_version\": \"0.1.0\", \"simulated\": false, \"gpus\": []}}', now()) \
         ON CONFLICT (machine_id) DO UPDATE SET inventory = EXCLUDED.inventory"
    ));
    let refused = set_mode(&m.host, &offer, 1, "MIG_AUTO")
        .await
        .expect_err("old agent");
    assert_eq!(refused.code, "VALIDATION", "{refused}");
    assert!(refused.message.contains("0.1.0"), "{refused}");
    let refused = order_slice(&m.renter, &offer, "1g.10gb", "old-agent")
        .await
        .expect_err("old agent");
    assert_eq!(refused.code, "VALIDATION", "{refused}");
    assert_eq!(
        m.env.count(&format!(
            "SELECT count(*) AS n FROM catalog.gpu_holds WHERE machine_id = '{offer}'"
        )),
        0
    );
    // The upgraded agent says it makes slices: the same order goes through.
    m.env.exec(&format!(
        "UPDATE catalog.agent_reports SET inventory = inventory || '{{\"capabilities\": [\"gpu_indices\", \"mig\"]}}' \
         WHERE machine_id = '{offer}'"
    ));
    order_slice(&m.renter, &offer, "1g.10gb", "new-agent")
        .await
        .expect("upgraded agent");
    m.stack.stop().await;
    m.env.cleanup().await;
}
