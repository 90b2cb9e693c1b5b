//! Reserved capacity (issue 20, docs/reservations.md), through the public
//! GraphQL API, read back from PostgreSQL: racing reservations never
//! double-book a GPU in time, an on-demand rental gives way when a block
//! starts, resale moves the hours and the money exactly once, a host's
//! cancellation refunds with the penalty, escrow is released to the host
//! (or refunded for silent seconds) to the last decimal, and an instance
//! that asked goes on on demand after its block when its GPU is free.
//!
//! Blocks are whole future hours, so a test that needs a block to start or
//! end moves the block's instants in every table that keeps them
//! ([`shift`]): the services read their clocks against those columns, so
//! moving them is the same to them as time passing.

use std::time::Duration;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use futures_util::future::join_all;
use gpumarket::client::{Client, GraphQlError};
use gpumarket::dev::Parts;
use rand::{Rng, SeedableRng};
use rust_decimal::Decimal;
use serde_json::{Value, json};

use crate::harness::*;

const RESERVATION_FIELDS: &str = "id machineId gpuCount gpuIndices startsAt endsAt pricePerGpuHour amount state parentId sold { startsAt endsAt } escrow { amount released fees refunded penalty remaining silentSeconds state }";

struct Market {
    env: TestEnv,
    _stack: gpumarket::dev::Stack,
    api: Client,
    host: Client,
    operator: Client,
}

async fn market(configure: impl FnOnce(&mut TestEnv)) -> Market {
    let mut env = TestEnv::new().await;
    configure(&mut env);
    let stack = env.start(Parts::ALL).await;
    let api = Client::new(&stack.gateway_url);
    let (host, _) = sign_up(&api, &["HOST"]).await;
    let operator = env.operator(&api).await;
    Market {
        env,
        _stack: stack,
        api,
        host,
        operator,
    }
}

/// A funded renter without a GPU limit that matters here.
async fn renter(m: &Market, credit: &str) -> (Client, String) {
    let (renter, tenant) = sign_up(&m.api, &["RENTER"]).await;
    grant(&m.operator, &tenant, credit).await;
    m.operator
        .run(
            "mutation($t: ID!) { setTenantQuota(tenantId: $t, maxGpus: 1000) { maxGpus } }",
            json!({ "t": tenant }),
        )
        .await
        .expect("setTenantQuota");
    (renter, tenant)
}

async fn set_terms(host: &Client, machine: &str, price: &str) {
    host.run(
        "mutation($m: ID!, $t: ReservedTermsInput) { setReservedTerms(machineId: $m, terms: $t) { pricePerGpuHour } }",
        json!({ "m": machine, "t": { "pricePerGpuHour": price, "maxLeadDays": 60, "minBlockHours": 1 } }),
    )
    .await
    .expect("setReservedTerms");
}

fn next_hour() -> DateTime<Utc> {
    Utc::now()
        .duration_trunc(TimeDelta::hours(1))
        .expect("truncate")
        + TimeDelta::hours(1)
}

async fn reserve(
    renter: &Client,
    machine: &str,
    gpus: i32,
    starts: DateTime<Utc>,
    ends: DateTime<Utc>,
    key: &str,
) -> Result<Value, GraphQlError> {
    renter
        .run(
            &format!("mutation($input: ReserveInput!) {{ reserve(input: $input) {{ {RESERVATION_FIELDS} }} }}"),
            json!({ "input": { "offerId": machine, "gpuCount": gpus,
                               "startsAt": starts.to_rfc3339(), "endsAt": ends.to_rfc3339(),
                               "idempotencyKey": key } }),
        )
        .await
        .map(|d| d["reserve"].clone())
}

async fn reservation(renter: &Client, id: &str) -> Value {
    renter
        .run(
            &format!("query($id: ID!) {{ reservation(id: $id) {{ {RESERVATION_FIELDS} }} }}"),
            json!({ "id": id }),
        )
        .await
        .expect("reservation")["reservation"]
        .clone()
}

async fn balance(renter: &Client) -> Decimal {
    dec(&renter
        .run("{ balance { amount } }", json!({}))
        .await
        .expect("balance")["balance"]["amount"])
}

/// Moves reservation `id`'s block (and what was carved out of it) so that
/// it starts at `starts`, in every service's table that keeps its instants.
fn shift(env: &TestEnv, id: &str, starts: DateTime<Utc>) {
    let sql = format!(
        "DO $$ DECLARE d interval; BEGIN \
           SELECT '{starts}'::timestamptz - starts_at INTO d FROM ordering.reservations WHERE id = '{id}'; \
           CREATE TEMP TABLE moved ON COMMIT DROP AS \
             WITH RECURSIVE t AS (SELECT id FROM ordering.reservations WHERE id = '{id}' \
               UNION SELECT r.id FROM ordering.reservations r JOIN t ON r.parent_id = t.id) SELECT id FROM t; \
           UPDATE ordering.reservations SET starts_at = starts_at + d, ends_at = ends_at + d WHERE id IN (SELECT id FROM moved); \
           UPDATE ordering.resale_listings SET starts_at = starts_at + d, ends_at = ends_at + d WHERE reservation_id IN (SELECT id FROM moved); \
           UPDATE catalog.bookings SET starts_at = starts_at + d, ends_at = ends_at + d WHERE reservation_id IN (SELECT id FROM moved); \
           UPDATE catalog.booked_gpus SET period = tstzrange(lower(period) + d, upper(period) + d, '[)') WHERE reservation_id IN (SELECT id FROM moved); \
           UPDATE billing.escrows SET starts_at = starts_at + d, ends_at = ends_at + d, settled_until = settled_until + d WHERE reservation_id IN (SELECT id FROM moved); \
           UPDATE billing.escrow_holders SET period = tstzrange(lower(period) + d, upper(period) + d, '[)') WHERE reservation_id IN (SELECT id FROM moved); \
         END $$",
        starts = starts.to_rfc3339(),
    );
    env.exec(&sql);
}

fn code(e: &GraphQlError) -> &str {
    e.code.as_str()
}

/// Many renters race random overlapping blocks on one machine, for several
/// seeds: read from PostgreSQL, no GPU is booked twice for any instant,
/// every booked reservation holds exactly its GPUs for exactly its block,
/// every refusal was for want of capacity (the final bookings, which only
/// grow, leave fewer GPUs free for the whole block than it asked), and each
/// renter was charged exactly its blocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_reservations_never_double_book_a_gpu_in_time() {
    let m = market(|_| {}).await;
    let machine = listed_machine(&m.host, "RTX 4090", 4, "0.50").await;
    m.env.heartbeat_all();
    set_terms(&m.host, &machine, "0.40").await;
    let mut renters = Vec::new();
    for _ in 0..3 {
        renters.push(renter(&m, "100000").await);
    }
    let base = next_hour() + TimeDelta::hours(1);
    let mut booked: Vec<(usize, Value)> = Vec::new();
    let mut refused: Vec<(i32, DateTime<Utc>, DateTime<Utc>)> = Vec::new();
    for (round, seed) in [7u64, 21, 1234].into_iter().enumerate() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let day = base + TimeDelta::days(round as i64);
        let asks: Vec<(usize, i32, DateTime<Utc>, DateTime<Utc>)> = (0..16)
            .map(|_| {
                let start = rng.gen_range(0..10i64);
                let len = rng.gen_range(1..5i64);
                (
                    rng.gen_range(0..renters.len()),
                    rng.gen_range(1..=4),
                    day + TimeDelta::hours(start),
                    day + TimeDelta::hours(start + len),
                )
            })
            .collect();
        let results = join_all(asks.iter().enumerate().map(|(i, (who, gpus, s, e))| {
            let renter = renters[*who].0.clone();
            let machine = machine.clone();
            async move {
                reserve(
                    &renter,
                    &machine,
                    *gpus,
                    *s,
                    *e,
                    &format!("race-{seed}-{i}"),
                )
                .await
            }
        }))
        .await;
        for ((who, gpus, s, e), result) in asks.into_iter().zip(results) {
            match result {
                Ok(r) => {
                    assert_eq!(r["state"], "BOOKED", "{r}");
                    assert_eq!(r["gpuCount"], gpus);
                    booked.push((who, r));
                }
                Err(e2) => {
                    assert_eq!(code(&e2), "INSUFFICIENT_CAPACITY", "{e2:?}");
                    refused.push((gpus, s, e));
                }
            }
        }
        println!(
            "seed {seed}: {} booked, {} refused so far",
            booked.len(),
            refused.len()
        );
    }
    assert!(!booked.is_empty() && !refused.is_empty());

    // No two booked periods of one GPU overlap.
    assert_eq!(
        m.env.count(
            "SELECT count(*) AS n FROM catalog.booked_gpus a JOIN catalog.booked_gpus b \
             ON a.machine_id = b.machine_id AND a.gpu_index = b.gpu_index \
             AND a.ctid < b.ctid AND a.period && b.period"
        ),
        0
    );
    // Each reservation holds exactly its GPUs for its block.
    for (_, r) in &booked {
        let id = r["id"].as_str().unwrap();
        let gpus = r["gpuCount"].as_i64().unwrap();
        assert_eq!(
            m.env.count(&format!(
                "SELECT count(DISTINCT gpu_index) AS n FROM catalog.booked_gpus WHERE reservation_id = '{id}' \
                 AND lower(period) = '{}'::timestamptz AND upper(period) = '{}'::timestamptz",
                r["startsAt"].as_str().unwrap(),
                r["endsAt"].as_str().unwrap()
            )),
            gpus,
            "{r}"
        );
    }
    // Every refusal was for want of capacity: a block needs the same GPUs
    // for all its hours, so fewer GPUs than asked were free for the whole
    // block (the final bookings only grow, so they were not free then).
    for (gpus, s, e) in refused {
        let taken = m.env.count(&format!(
            "SELECT count(DISTINCT gpu_index) AS n FROM catalog.booked_gpus \
             WHERE machine_id = '{machine}' AND period && tstzrange('{}', '{}', '[)')",
            s.to_rfc3339(),
            e.to_rfc3339()
        ));
        assert!(
            4 - taken < i64::from(gpus),
            "refused {gpus} GPUs for {s}..{e} although {} were free for the whole block",
            4 - taken
        );
    }
    // Each renter paid exactly its blocks.
    for (i, (renter, _)) in renters.iter().enumerate() {
        let paid: Decimal = booked
            .iter()
            .filter(|(who, _)| *who == i)
            .map(|(_, r)| dec(&r["amount"]))
            .sum();
        assert_eq!(balance(renter).await, Decimal::from(100_000) - paid);
    }
    m.env.cleanup().await;
}

/// An on-demand rental on GPUs reserved later: the offer says until when it
/// may run, the instance is warned, and at the block's start it is stopped
/// (billed to that instant, its disk kept) and the block's holder gets every
/// GPU, at no GPU charge; at the block's end the holder's instance is
/// stopped too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_on_demand_rental_gives_way_when_a_block_starts() {
    let m = market(|_| {}).await;
    let machine = listed_machine(&m.host, "RTX 4090", 2, "1.00").await;
    m.env.heartbeat_all();
    set_terms(&m.host, &machine, "0.80").await;
    let (early, _) = renter(&m, "1000").await;
    let (holder, _) = renter(&m, "1000").await;

    let running = running_instance(&early, &machine, 2, "on-demand").await;
    let starts = next_hour() + TimeDelta::hours(2);
    let block = reserve(
        &holder,
        &machine,
        2,
        starts,
        starts + TimeDelta::hours(2),
        "block",
    )
    .await
    .expect("reserve");
    let block_id = block["id"].as_str().unwrap().to_owned();
    assert_eq!(dec(&block["amount"]), Decimal::new(320, 2));

    let offer = m
        .api
        .run(
            "query($id: ID!) { offer(id: $id) { availableUntil reserved { pricePerGpuHour } } }",
            json!({ "id": machine }),
        )
        .await;
    if let Ok(offer) = offer {
        assert_eq!(
            dec(&offer["offer"]["reserved"]["pricePerGpuHour"]),
            Decimal::new(80, 2)
        );
    }

    // Too early: the block has not started.
    let early_launch = holder
        .run(
            "mutation($input: CreateOrderInput!) { createOrder(input: $input) { id } }",
            json!({ "input": { "reservationId": block_id, "gpuCount": 2, "idempotencyKey": "launch-early",
                               "sshPublicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpumarketTestKey test@gpumarket" } }),
        )
        .await
        .expect_err("before the block");
    assert_eq!(code(&early_launch), "CONFLICT", "{early_launch:?}");

    // The block starts in a few seconds.
    let start = Utc::now() + TimeDelta::seconds(4);
    shift(&m.env, &block_id, start);
    let stopped = eventually(
        "the on-demand instance preempted",
        Duration::from_secs(30),
        || async {
            let i = instance_status(&early, &running).await;
            (i["status"] == "preempted").then_some(i)
        },
    )
    .await;
    assert!(
        stopped["statusReason"]
            .as_str()
            .unwrap_or_default()
            .contains("reserved"),
        "{stopped}"
    );
    assert_eq!(
        m.env.count(&format!(
            "SELECT count(*) AS n FROM ordering.instance_events WHERE instance_id = '{running}' \
             AND kind = 'rule_warning' AND reason LIKE '%reserved block starts%'"
        )),
        1,
        "the instance was warned once"
    );
    // Billed to the block's start, not beyond (metering's interval, to the
    // second the preemption recorded).
    let late = m.env.count(&format!(
        "SELECT count(*) AS n FROM metering.intervals WHERE instance_id = '{running}' AND meter = 'gpu' \
         AND ended_at > '{}'::timestamptz + interval '2 seconds'",
        start.to_rfc3339()
    ));
    assert_eq!(late, 0);

    // The holder gets both GPUs, at no GPU charge.
    let launched = eventually("the holder's launch", Duration::from_secs(30), || async {
        holder
            .run(
                "mutation($input: CreateOrderInput!) { createOrder(input: $input) { id pricePerGpuHour reservationId } }",
                json!({ "input": { "reservationId": block_id, "gpuCount": 2, "idempotencyKey": "launch",
                                   "sshPublicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpumarketTestKey test@gpumarket" } }),
            )
            .await
            .ok()
    })
    .await;
    let inside = launched["createOrder"]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        dec(&launched["createOrder"]["pricePerGpuHour"]),
        Decimal::ZERO
    );
    wait_running(&holder, &inside, Duration::from_secs(30)).await;
    // No GPU of the machine is left for anyone else.
    let (other, _) = renter(&m, "1000").await;
    let refused = order(&other, &machine, 1, "other")
        .await
        .expect_err("no GPU left");
    assert_eq!(code(&refused), "INSUFFICIENT_CAPACITY", "{refused:?}");

    // The block ends: the holder's instance is stopped, its disk kept.
    m.env.exec(&format!(
        "DO $$ BEGIN UPDATE ordering.reservations SET ends_at = now() + interval '2 seconds' WHERE id = '{block_id}'; \
         UPDATE catalog.bookings SET ends_at = now() + interval '2 seconds' WHERE reservation_id = '{block_id}'; \
         UPDATE catalog.booked_gpus SET period = tstzrange(lower(period), now() + interval '2 seconds', '[)') WHERE reservation_id = '{block_id}'; \
         UPDATE billing.escrows SET ends_at = now() + interval '2 seconds' WHERE reservation_id = '{block_id}'; \
         UPDATE billing.escrow_holders SET period = tstzrange(lower(period), now() + interval '2 seconds', '[)') WHERE reservation_id = '{block_id}'; END $$"
    ));
    let ended = eventually(
        "the holder's instance stopped at the block's end",
        Duration::from_secs(30),
        || async {
            let i = instance_status(&holder, &inside).await;
            (i["status"] == "preempted").then_some(i)
        },
    )
    .await;
    assert!(
        ended["statusReason"]
            .as_str()
            .unwrap_or_default()
            .contains("ended"),
        "{ended}"
    );
    m.env.cleanup().await;
}

/// A renter lists two hours of a block; six buyers race for them: exactly
/// one gets them, its money moves once (one resale posting; the seller gets
/// the price less the published resale fee), and the hours move from the
/// seller's booking to the buyer's on the same GPUs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resale_moves_the_hours_and_the_money_exactly_once() {
    let m = market(|_| {}).await;
    let machine = listed_machine(&m.host, "RTX 4090", 2, "1.00").await;
    m.env.heartbeat_all();
    set_terms(&m.host, &machine, "0.40").await;
    let (seller, _) = renter(&m, "100").await;
    let starts = next_hour() + TimeDelta::hours(3);
    let block = reserve(
        &seller,
        &machine,
        2,
        starts,
        starts + TimeDelta::hours(4),
        "block",
    )
    .await
    .expect("reserve");
    let block_id = block["id"].as_str().unwrap().to_owned();
    assert_eq!(dec(&block["amount"]), Decimal::new(320, 2));
    assert_eq!(balance(&seller).await, Decimal::new(9680, 2));

    // Hours that are not the block's, or have started, are refused.
    let outside = seller
        .run(
            "mutation($input: ListReservationHoursInput!) { listReservationHours(input: $input) { id } }",
            json!({ "input": { "reservationId": block_id, "startsAt": (starts - TimeDelta::hours(1)).to_rfc3339(),
                               "endsAt": (starts + TimeDelta::hours(1)).to_rfc3339(), "pricePerGpuHour": "0.50" } }),
        )
        .await
        .expect_err("outside the block");
    assert_eq!(code(&outside), "VALIDATION", "{outside:?}");

    let listing = seller
        .run(
            "mutation($input: ListReservationHoursInput!) { listReservationHours(input: $input) { id amount state } }",
            json!({ "input": { "reservationId": block_id, "startsAt": (starts + TimeDelta::hours(1)).to_rfc3339(),
                               "endsAt": (starts + TimeDelta::hours(3)).to_rfc3339(), "pricePerGpuHour": "0.50" } }),
        )
        .await
        .expect("listReservationHours")["listReservationHours"]
        .clone();
    let listing_id = listing["id"].as_str().unwrap().to_owned();
    assert_eq!(dec(&listing["amount"]), Decimal::new(200, 2));
    // The same hours cannot be listed twice.
    let twice = seller
        .run(
            "mutation($input: ListReservationHoursInput!) { listReservationHours(input: $input) { id } }",
            json!({ "input": { "reservationId": block_id, "startsAt": (starts + TimeDelta::hours(2)).to_rfc3339(),
                               "endsAt": (starts + TimeDelta::hours(4)).to_rfc3339(), "pricePerGpuHour": "0.45" } }),
        )
        .await
        .expect_err("listed twice");
    assert_eq!(code(&twice), "CONFLICT", "{twice:?}");
    let open = m
        .api
        .run(
            "query { resaleListings(filter: {}) { id amount } }",
            json!({}),
        )
        .await;
    // Anyone signed in may search; the anonymous API may refuse.
    if let Ok(open) = open {
        assert!(
            open["resaleListings"]
                .as_array()
                .unwrap()
                .iter()
                .any(|l| l["id"] == listing_id.as_str())
        );
    }

    let mut buyers = Vec::new();
    for _ in 0..6 {
        buyers.push(renter(&m, "100").await.0);
    }
    let results = join_all(buyers.iter().enumerate().map(|(i, b)| {
        let b = b.clone();
        let listing_id = listing_id.clone();
        async move {
            b.run(
                &format!("mutation($input: BuyReservationHoursInput!) {{ buyReservationHours(input: $input) {{ {RESERVATION_FIELDS} }} }}"),
                json!({ "input": { "listingId": listing_id, "idempotencyKey": format!("buy-{i}") } }),
            )
            .await
        }
    }))
    .await;
    let winners: Vec<usize> = results
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.is_ok().then_some(i))
        .collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    for r in results.iter().filter_map(|r| r.as_ref().err()) {
        assert_eq!(code(r), "CONFLICT", "{r:?}");
    }
    let winner = winners[0];
    let child = results[winner].as_ref().unwrap()["buyReservationHours"].clone();
    assert_eq!(child["parentId"], block_id.as_str());
    assert_eq!(child["state"], "BOOKED");
    // Repeating the purchase with its key answers the same reservation.
    let again = buyers[winner]
        .run(
            "mutation($input: BuyReservationHoursInput!) { buyReservationHours(input: $input) { id } }",
            json!({ "input": { "listingId": listing_id, "idempotencyKey": format!("buy-{winner}") } }),
        )
        .await
        .expect("repeat");
    assert_eq!(again["buyReservationHours"]["id"], child["id"]);

    // The money moved once.
    assert_eq!(
        m.env.count(&format!(
            "SELECT count(*) AS n FROM billing.transactions WHERE id = 'resale:{listing_id}'"
        )),
        1
    );
    for (i, b) in buyers.iter().enumerate() {
        let expected = if i == winner {
            Decimal::from(98)
        } else {
            Decimal::from(100)
        };
        assert_eq!(balance(b).await, expected, "buyer {i}");
    }
    // 2.00 less the 5 % resale fee.
    assert_eq!(
        balance(&seller).await,
        Decimal::new(9680, 2) + Decimal::new(190, 2)
    );

    // The hours moved, on the same GPUs, and still nothing overlaps.
    let child_id = child["id"].as_str().unwrap();
    assert_eq!(
        m.env.count(&format!(
            "SELECT count(*) AS n FROM catalog.booked_gpus WHERE reservation_id = '{child_id}' \
             AND lower(period) = '{}'::timestamptz AND upper(period) = '{}'::timestamptz",
            (starts + TimeDelta::hours(1)).to_rfc3339(),
            (starts + TimeDelta::hours(3)).to_rfc3339()
        )),
        2
    );
    assert_eq!(
        m.env.count(&format!(
            "SELECT coalesce(sum(extract(epoch FROM upper(period) - lower(period)) / 3600), 0)::bigint AS n \
             FROM catalog.booked_gpus WHERE reservation_id = '{block_id}'"
        )),
        4,
        "the seller keeps 2 hours on each of 2 GPUs"
    );
    assert_eq!(
        m.env.count(
            "SELECT count(*) AS n FROM catalog.booked_gpus a JOIN catalog.booked_gpus b \
             ON a.machine_id = b.machine_id AND a.gpu_index = b.gpu_index \
             AND a.ctid < b.ctid AND a.period && b.period"
        ),
        0
    );
    let after = reservation(&seller, &block_id).await;
    assert_eq!(after["sold"].as_array().unwrap().len(), 1, "{after}");
    m.env.cleanup().await;
}

/// A host cancels a booked block: the renter gets the whole amount back
/// plus the published penalty (10 % of the refund) from the host; another
/// host cannot cancel it and another renter cannot see it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_host_cancellation_refunds_everything_plus_the_penalty() {
    let m = market(|_| {}).await;
    let machine = listed_machine(&m.host, "RTX 4090", 2, "1.00").await;
    m.env.heartbeat_all();
    set_terms(&m.host, &machine, "0.50").await;
    let (renter_a, _) = renter(&m, "100").await;
    let (renter_b, _) = renter(&m, "100").await;
    let (other_host, _) = sign_up(&m.api, &["HOST"]).await;
    let starts = next_hour() + TimeDelta::hours(2);
    let block = reserve(
        &renter_a,
        &machine,
        2,
        starts,
        starts + TimeDelta::hours(10),
        "block",
    )
    .await
    .expect("reserve");
    let id = block["id"].as_str().unwrap().to_owned();
    assert_eq!(dec(&block["amount"]), Decimal::from(10));
    assert_eq!(balance(&renter_a).await, Decimal::from(90));

    let hidden = renter_b
        .run(
            "query($id: ID!) { reservation(id: $id) { id } }",
            json!({ "id": id }),
        )
        .await;
    match hidden {
        Ok(d) => assert!(d["reservation"].is_null(), "{d}"),
        Err(e) => assert_eq!(code(&e), "NOT_FOUND", "{e:?}"),
    }
    let stranger = other_host
        .run(
            "mutation($id: ID!) { cancelReservation(id: $id, reason: \"mine now\") { id } }",
            json!({ "id": id }),
        )
        .await
        .expect_err("another host");
    assert_eq!(code(&stranger), "NOT_FOUND", "{stranger:?}");

    let cancelled = m
        .host
        .run(
            &format!("mutation($id: ID!) {{ cancelReservation(id: $id, reason: \"maintenance\") {{ {RESERVATION_FIELDS} }} }}"),
            json!({ "id": id }),
        )
        .await
        .expect("cancelReservation")["cancelReservation"]
        .clone();
    assert_eq!(cancelled["state"], "CANCELLED", "{cancelled}");
    assert_eq!(balance(&renter_a).await, Decimal::from(101));
    let after = reservation(&renter_a, &id).await;
    let escrow = &after["escrow"];
    assert_eq!(dec(&escrow["refunded"]), Decimal::from(10), "{after}");
    assert_eq!(dec(&escrow["penalty"]), Decimal::from(1));
    assert_eq!(dec(&escrow["remaining"]), Decimal::ZERO);
    // The GPU time is free again.
    assert_eq!(
        m.env.count(&format!(
            "SELECT count(*) AS n FROM catalog.booked_gpus WHERE reservation_id = '{id}' AND NOT isempty(period)"
        )),
        0
    );
    let again = reserve(
        &renter_b,
        &machine,
        2,
        starts,
        starts + TimeDelta::hours(10),
        "again",
    )
    .await;
    assert!(again.is_ok(), "{again:?}");
    m.env.cleanup().await;
}

/// A block that ran with ten silent minutes: billing releases the heard
/// seconds to the host less the fee and refunds the silent ones from
/// escrow; to the last decimal, what the renter paid is what the host got
/// plus the fee plus the refund, and nothing remains.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn escrow_is_released_to_the_host_and_silence_refunded_to_the_decimal() {
    let m = market(|env| env.settlement_interval_ms(200)).await;
    let machine = listed_machine(&m.host, "RTX 4090", 1, "1.00").await;
    m.env.heartbeat_all();
    set_terms(&m.host, &machine, "0.37").await;
    let (renter_a, _) = renter(&m, "100").await;
    let starts = next_hour() + TimeDelta::hours(2);
    let block = reserve(
        &renter_a,
        &machine,
        1,
        starts,
        starts + TimeDelta::hours(1),
        "block",
    )
    .await
    .expect("reserve");
    let id = block["id"].as_str().unwrap().to_owned();
    let amount = dec(&block["amount"]);
    assert_eq!(amount, Decimal::new(37, 2));

    // The block ran from three hours ago to two hours ago, and the machine
    // was silent for ten minutes of it.
    // The gap goes in before the block moves into the past: the release
    // loop may settle the block the moment it is behind `now - lag`, and in
    // production the offline sweeper opens a gap well within that lag.
    let ran = Utc::now().duration_trunc(TimeDelta::seconds(1)).unwrap() - TimeDelta::hours(3);
    m.env.exec(&format!(
        "INSERT INTO catalog.heartbeat_gaps (machine_id, started_at, ended_at, detected_by) \
         VALUES ('{machine}', '{}', '{}', 'sweeper')",
        (ran + TimeDelta::minutes(20)).to_rfc3339(),
        (ran + TimeDelta::minutes(30)).to_rfc3339()
    ));
    shift(&m.env, &id, ran);
    let settled = eventually("the escrow settled", Duration::from_secs(60), || async {
        let r = reservation(&renter_a, &id).await;
        (r["escrow"]["state"] == "SETTLED").then_some(r)
    })
    .await;
    let escrow = &settled["escrow"];
    let (released, fees, refunded) = (
        dec(&escrow["released"]),
        dec(&escrow["fees"]),
        dec(&escrow["refunded"]),
    );
    assert_eq!(escrow["silentSeconds"], 600, "{settled}");
    // f(s) = round_half_even(0.37 × s / 3600, 9): the silence [1200, 1800).
    let f = |s: i64| {
        (amount * Decimal::from(s) / Decimal::from(3600))
            .round_dp_with_strategy(9, rust_decimal::RoundingStrategy::MidpointNearestEven)
    };
    assert_eq!(refunded, f(1800) - f(1200));
    assert_eq!(released + fees + refunded, amount);
    assert_eq!(dec(&escrow["remaining"]), Decimal::ZERO);
    assert_eq!(
        balance(&renter_a).await,
        Decimal::from(100) - amount + refunded
    );
    // The host's earnings are the release, from the ledger.
    let earned = sql_decimal(
        &m.env,
        "SELECT coalesce(sum(balance), 0) AS d FROM billing.accounts WHERE kind = 'host_earnings'",
    );
    assert_eq!(earned, released);
    m.env.cleanup().await;
}

/// Hostile inputs on reservations: another tenant's reservation, listing
/// or block answers like a random id and changes nothing; a renter cannot
/// buy its own listing; a block outside the host's terms is refused; and the
/// quota counts a reservation's GPUs from booking on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reservations_refuse_strangers_and_count_against_quota() {
    let m = market(|_| {}).await;
    let machine = listed_machine(&m.host, "RTX 4090", 4, "1.00").await;
    m.env.heartbeat_all();
    set_terms(&m.host, &machine, "0.50").await;
    let (owner, owner_tenant) = renter(&m, "100").await;
    let (stranger, _) = renter(&m, "100").await;
    let starts = next_hour() + TimeDelta::hours(2);
    let block = reserve(
        &owner,
        &machine,
        1,
        starts,
        starts + TimeDelta::hours(3),
        "mine",
    )
    .await
    .expect("reserve");
    let id = block["id"].as_str().unwrap().to_owned();
    let random = uuid::Uuid::now_v7().to_string();

    // Listing, launching on and reading another tenant's reservation: as
    // for an id that does not exist.
    for target in [id.as_str(), random.as_str()] {
        let listed = stranger
            .run(
                "mutation($input: ListReservationHoursInput!) { listReservationHours(input: $input) { id } }",
                json!({ "input": { "reservationId": target, "startsAt": (starts + TimeDelta::hours(1)).to_rfc3339(),
                                   "endsAt": (starts + TimeDelta::hours(2)).to_rfc3339(), "pricePerGpuHour": "0.60" } }),
            )
            .await
            .expect_err("not the caller's");
        assert_eq!(code(&listed), "NOT_FOUND", "{listed:?}");
        let launched = stranger
            .run(
                "mutation($input: CreateOrderInput!) { createOrder(input: $input) { id } }",
                json!({ "input": { "reservationId": target, "gpuCount": 1, "idempotencyKey": format!("steal-{target}"),
                                   "sshPublicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpumarketTestKey test@gpumarket" } }),
            )
            .await
            .expect_err("not the caller's");
        assert_eq!(code(&launched), "NOT_FOUND", "{launched:?}");
    }

    // The owner's listing: a stranger cannot withdraw it, the owner cannot buy it.
    let listing = owner
        .run(
            "mutation($input: ListReservationHoursInput!) { listReservationHours(input: $input) { id } }",
            json!({ "input": { "reservationId": id, "startsAt": (starts + TimeDelta::hours(1)).to_rfc3339(),
                               "endsAt": (starts + TimeDelta::hours(2)).to_rfc3339(), "pricePerGpuHour": "0.60" } }),
        )
        .await
        .expect("listReservationHours")["listReservationHours"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let withdrawn = stranger
        .run(
            "mutation($id: ID!) { withdrawListing(id: $id) { id } }",
            json!({ "id": listing }),
        )
        .await
        .expect_err("not the stranger's listing");
    assert_eq!(code(&withdrawn), "NOT_FOUND", "{withdrawn:?}");
    let own = owner
        .run(
            "mutation($input: BuyReservationHoursInput!) { buyReservationHours(input: $input) { id } }",
            json!({ "input": { "listingId": listing, "idempotencyKey": "self" } }),
        )
        .await
        .expect_err("own listing");
    assert_eq!(code(&own), "VALIDATION", "{own:?}");
    assert_eq!(
        m.env.count(&format!(
            "SELECT count(*) AS n FROM ordering.resale_listings WHERE id = '{listing}' AND state = 'open'"
        )),
        1
    );

    // Outside the host's terms: not whole hours, in the past, too far ahead.
    for (s, e) in [
        (
            starts + TimeDelta::minutes(30),
            starts + TimeDelta::hours(2),
        ),
        (starts - TimeDelta::hours(48), starts - TimeDelta::hours(46)),
        (
            starts + TimeDelta::days(90),
            starts + TimeDelta::days(90) + TimeDelta::hours(1),
        ),
    ] {
        let refused = reserve(&owner, &machine, 1, s, e, &format!("bad-{}", s.timestamp()))
            .await
            .expect_err("outside the terms");
        assert_eq!(code(&refused), "VALIDATION", "{refused:?}");
    }

    // The quota counts the reserved GPU from booking on: with a limit of
    // 2, one more GPU fits and a second does not.
    m.operator
        .run(
            "mutation($t: ID!) { setTenantQuota(tenantId: $t, maxGpus: 2) { maxGpus } }",
            json!({ "t": owner_tenant }),
        )
        .await
        .expect("setTenantQuota");
    let more = reserve(
        &owner,
        &machine,
        2,
        starts,
        starts + TimeDelta::hours(1),
        "over",
    )
    .await
    .expect_err("over the GPU limit");
    assert_eq!(code(&more), "QUOTA_EXCEEDED", "{more:?}");
    reserve(
        &owner,
        &machine,
        1,
        starts,
        starts + TimeDelta::hours(1),
        "fits",
    )
    .await
    .expect("within the limit");
    // A refused reservation holds nothing.
    assert_eq!(
        m.env.count(
            "SELECT count(*) AS n FROM catalog.booked_gpus b JOIN ordering.reservations r \
             ON r.id = b.reservation_id WHERE r.status <> 'booked' AND NOT isempty(b.period)"
        ),
        0
    );
    m.env.cleanup().await;
}

/// Hostile and mistaken inputs on every reservation field answer a clear
/// code with a message, never INTERNAL; and a purchase refused for want of
/// money leaves the listing buyable by someone else.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_reservation_inputs_get_clear_errors_and_a_refused_purchase_reopens_the_listing() {
    let m = market(|_| {}).await;
    let machine = listed_machine(&m.host, "RTX 4090", 2, "1.00").await;
    m.env.heartbeat_all();
    set_terms(&m.host, &machine, "0.50").await;
    let (owner, _) = renter(&m, "100").await;
    let starts = next_hour() + TimeDelta::hours(2);
    let block = reserve(
        &owner,
        &machine,
        2,
        starts,
        starts + TimeDelta::hours(4),
        "block",
    )
    .await
    .expect("reserve");
    let id = block["id"].as_str().unwrap().to_owned();
    let random = uuid::Uuid::now_v7().to_string();
    let rfc = |t: DateTime<Utc>| t.to_rfc3339();
    let probes: Vec<(&Client, String, Value)> = vec![
        (&owner, "mutation($input: ReserveInput!) { reserve(input: $input) { id } }".into(),
         json!({ "input": { "offerId": random, "gpuCount": 1, "startsAt": rfc(starts), "endsAt": rfc(starts + TimeDelta::hours(1)), "idempotencyKey": "p1" } })),
        (&owner, "mutation($input: ReserveInput!) { reserve(input: $input) { id } }".into(),
         json!({ "input": { "offerId": machine, "gpuCount": 1, "teamId": random, "startsAt": rfc(starts), "endsAt": rfc(starts + TimeDelta::hours(1)), "idempotencyKey": "p2" } })),
        (&owner, "mutation($input: ReserveInput!) { reserve(input: $input) { id } }".into(),
         json!({ "input": { "constraints": { "gpuModels": ["H200 141GB SXM"] }, "gpuCount": 1, "startsAt": rfc(starts), "endsAt": rfc(starts + TimeDelta::hours(1)), "idempotencyKey": "p3" } })),
        (&owner, "mutation($input: ReserveInput!) { reserve(input: $input) { id } }".into(),
         json!({ "input": { "offerId": machine, "gpuCount": 3, "startsAt": rfc(starts), "endsAt": rfc(starts + TimeDelta::hours(1)), "idempotencyKey": "p4" } })),
        (&owner, "query($m: ID!, $f: DateTime!, $t: DateTime!) { machineCalendar(machineId: $m, from: $f, to: $t) { gpuCount } }".into(),
         json!({ "m": random, "f": rfc(starts), "t": rfc(starts + TimeDelta::hours(3)) })),
        (&owner, "query($m: ID!, $f: DateTime!, $t: DateTime!) { machineCalendar(machineId: $m, from: $f, to: $t) { gpuCount } }".into(),
         json!({ "m": machine, "f": rfc(starts + TimeDelta::minutes(7)), "t": rfc(starts + TimeDelta::hours(3)) })),
        (&owner, "query($m: ID!, $f: DateTime!, $t: DateTime!) { machineCalendar(machineId: $m, from: $f, to: $t) { gpuCount } }".into(),
         json!({ "m": machine, "f": rfc(starts), "t": rfc(starts + TimeDelta::days(40)) })),
        (&owner, "mutation($input: ListReservationHoursInput!) { listReservationHours(input: $input) { id } }".into(),
         json!({ "input": { "reservationId": id, "startsAt": rfc(starts), "endsAt": rfc(starts + TimeDelta::hours(1)), "pricePerGpuHour": "-1" } })),
        (&owner, "mutation($input: BuyReservationHoursInput!) { buyReservationHours(input: $input) { id } }".into(),
         json!({ "input": { "listingId": random, "idempotencyKey": "p5" } })),
        (&owner, "mutation($id: ID!) { withdrawListing(id: $id) { id } }".into(), json!({ "id": random })),
        (&owner, "mutation($input: CreateOrderInput!) { createOrder(input: $input) { id } }".into(),
         json!({ "input": { "reservationId": id, "gpuCount": 3, "idempotencyKey": "p6",
                            "sshPublicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpumarketTestKey test@gpumarket" } })),
        (&m.host, "mutation($m: ID!, $t: ReservedTermsInput) { setReservedTerms(machineId: $m, terms: $t) { pricePerGpuHour } }".into(),
         json!({ "m": random, "t": { "pricePerGpuHour": "0.4", "maxLeadDays": 30, "minBlockHours": 1 } })),
        (&m.host, "mutation($m: ID!, $t: ReservedTermsInput) { setReservedTerms(machineId: $m, terms: $t) { pricePerGpuHour } }".into(),
         json!({ "m": machine, "t": { "pricePerGpuHour": "0.4", "maxLeadDays": 1, "minBlockHours": 48 } })),
        (&m.host, "mutation($id: ID!) { cancelReservation(id: $id, reason: \"\") { id } }".into(), json!({ "id": id })),
    ];
    for (client, query, vars) in probes {
        let error = client
            .run(&query, vars.clone())
            .await
            .expect_err(&format!("{query} {vars}"));
        assert_ne!(error.code, "INTERNAL", "{query} {vars}: {error:?}");
        assert!(!error.message.is_empty(), "{query}: {error:?}");
    }

    // A purchase refused for want of money reopens the listing for others.
    let listing = owner
        .run(
            "mutation($input: ListReservationHoursInput!) { listReservationHours(input: $input) { id } }",
            json!({ "input": { "reservationId": id, "startsAt": rfc(starts + TimeDelta::hours(1)),
                               "endsAt": rfc(starts + TimeDelta::hours(2)), "pricePerGpuHour": "30" } }),
        )
        .await
        .expect("listReservationHours")["listReservationHours"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (poor, _) = renter(&m, "1").await;
    let (rich, _) = renter(&m, "100").await;
    let buy = |who: &Client, key: &str| {
        let (who, listing, key) = (who.clone(), listing.clone(), key.to_owned());
        async move {
            who.run(
                "mutation($input: BuyReservationHoursInput!) { buyReservationHours(input: $input) { id state } }",
                json!({ "input": { "listingId": listing, "idempotencyKey": key } }),
            )
            .await
        }
    };
    let refused = buy(&poor, "poor").await.expect_err("60 is more than 1");
    assert_eq!(code(&refused), "INSUFFICIENT_FUNDS", "{refused:?}");
    // The same key answers the same refusal; the listing is open again.
    let again = buy(&poor, "poor").await.expect_err("recorded");
    assert_eq!(code(&again), "INSUFFICIENT_FUNDS", "{again:?}");
    let bought = buy(&rich, "rich").await.expect("bought after a refusal");
    assert_eq!(bought["buyReservationHours"]["state"], "BOOKED");
    assert_eq!(balance(&rich).await, Decimal::from(40));
    m.env.cleanup().await;
}

/// Three instances on a block ask to go on on demand when it ends; the
/// holder's quota was lowered to one GPU meanwhile. One GPU is booked by the
/// next renter from the block's end: the instance on it is stopped there and
/// says why. Of the other two, exactly one goes on (the quota admits one)
/// and the other is stopped at the block's end with the quota's reason. The
/// one that goes on keeps its GPU, its run inside the block closed at the
/// block's end at no GPU charge and the next opened at that instant at the
/// machine's on-demand price, with its quota held. Stopping it gives the GPU
/// back: the machine's counter is exactly the next block's hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_instance_that_asked_goes_on_on_demand_when_its_gpus_are_free() {
    let m = market(|_| {}).await;
    let machine = listed_machine(&m.host, "RTX 4090", 3, "1.00").await;
    m.env.heartbeat_all();
    set_terms(&m.host, &machine, "0.80").await;
    let (holder, holder_tenant) = renter(&m, "1000").await;
    let (next, _) = renter(&m, "1000").await;
    let base = next_hour() + TimeDelta::hours(2);
    let block = reserve(
        &holder,
        &machine,
        3,
        base,
        base + TimeDelta::hours(1),
        "block",
    )
    .await
    .expect("reserve");
    let block_id = block["id"].as_str().unwrap().to_owned();
    let after = reserve(
        &next,
        &machine,
        1,
        base + TimeDelta::hours(1),
        base + TimeDelta::hours(2),
        "after",
    )
    .await
    .expect("the next block");
    let after_id = after["id"].as_str().unwrap().to_owned();
    let booked_next = after["gpuIndices"][0]
        .as_i64()
        .expect("the next block's GPU");

    // ON_DEMAND needs a ceiling; outside a reservation it means nothing.
    let ssh = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpumarketTestKey test@gpumarket";
    let launch = |key: &'static str, extra: Value| {
        let holder = &holder;
        let block_id = block_id.clone();
        async move {
            let mut input = json!({ "reservationId": block_id, "gpuCount": 1, "idempotencyKey": key,
                                    "sshPublicKey": ssh, "whenBlockEnds": "ON_DEMAND" });
            for (k, v) in extra.as_object().cloned().unwrap_or_default() {
                input[k] = v;
            }
            holder
                .run(
                    "mutation($input: CreateOrderInput!) { createOrder(input: $input) { id pricePerGpuHour reservationId whenBlockEnds onDemandUpToPerGpuHour } }",
                    json!({ "input": input }),
                )
                .await
        }
    };
    let no_ceiling = launch("no-ceiling", json!({}))
        .await
        .expect_err("no ceiling");
    assert_eq!(code(&no_ceiling), "VALIDATION", "{no_ceiling:?}");
    assert!(
        no_ceiling.message.contains("maxPricePerGpuHour"),
        "{no_ceiling:?}"
    );
    let stray = holder
        .run(
            "mutation($input: CreateOrderInput!) { createOrder(input: $input) { id } }",
            json!({ "input": { "offerId": machine, "gpuCount": 1, "idempotencyKey": "stray",
                               "sshPublicKey": ssh, "whenBlockEnds": "ON_DEMAND" } }),
        )
        .await
        .expect_err("not on a reservation");
    assert_eq!(code(&stray), "VALIDATION", "{stray:?}");

    // The block runs (from half an hour ago); both instances launch in it.
    let started =
        Utc::now().duration_trunc(TimeDelta::seconds(1)).unwrap() - TimeDelta::minutes(30);
    shift(&m.env, &block_id, started);
    shift(&m.env, &after_id, started + TimeDelta::hours(1));
    // Launched once the block holds its GPUs (a launch refused before that
    // would be the key's answer for good).
    eventually("the block holds its GPUs", Duration::from_secs(60), || async {
        (m.env.count(&format!(
            "SELECT count(*) AS n FROM catalog.allocations WHERE block_reservation_id = '{block_id}' \
             AND released_at IS NULL"
        )) == 1)
            .then_some(())
    })
    .await;
    let mut inside = Vec::new();
    for key in ["first", "second", "third"] {
        let placed = launch(key, json!({ "maxPricePerGpuHour": "1.50" }))
            .await
            .expect("a launch in the block");
        assert_eq!(
            dec(&placed["createOrder"]["pricePerGpuHour"]),
            Decimal::ZERO
        );
        assert_eq!(placed["createOrder"]["whenBlockEnds"], "ON_DEMAND");
        assert_eq!(
            dec(&placed["createOrder"]["onDemandUpToPerGpuHour"]),
            Decimal::new(15, 1)
        );
        let id = placed["createOrder"]["id"].as_str().unwrap().to_owned();
        wait_running(&holder, &id, Duration::from_secs(30)).await;
        inside.push(id);
    }
    let gpu_of = |id: &str| {
        m.env.count(&format!(
            "SELECT gpu_indices[1]::int8 AS n FROM ordering.instances WHERE id = '{id}'"
        ))
    };
    let (stops, free): (Vec<String>, Vec<String>) = inside
        .iter()
        .cloned()
        .partition(|id| gpu_of(id) == booked_next);
    assert_eq!((stops.len(), free.len()), (1, 2));
    let stops = stops[0].clone();
    // The holder's quota now admits one GPU: one of the two goes on.
    m.operator
        .run(
            "mutation($t: ID!) { setTenantQuota(tenantId: $t, maxGpus: 1) { maxGpus } }",
            json!({ "t": holder_tenant }),
        )
        .await
        .expect("setTenantQuota");

    // The block ends in a few seconds, the next one starts there.
    let ends = Utc::now().duration_trunc(TimeDelta::seconds(1)).unwrap() + TimeDelta::seconds(4);
    shift(&m.env, &block_id, ends - TimeDelta::hours(1));
    shift(&m.env, &after_id, ends);

    let stopped = eventually(
        "the instance on the booked GPU stopped",
        Duration::from_secs(30),
        || async {
            let i = instance_status(&holder, &stops).await;
            (i["status"] == "preempted").then_some(i)
        },
    )
    .await;
    let why = stopped["statusReason"].as_str().unwrap_or_default();
    assert!(
        why.contains("not continued on demand") && why.contains("reserved"),
        "{stopped}"
    );
    let outcomes = eventually("both others decided", Duration::from_secs(30), || async {
        let mut seen = Vec::new();
        for id in &free {
            let i = holder
                .run(
                    "query($id: ID!) { instance(id: $id) { id status statusReason pricePerGpuHour reservationId } }",
                    json!({ "id": id }),
                )
                .await
                .expect("instance")["instance"]
                .clone();
            let decided = i["status"] == "preempted" || i["reservationId"].is_null();
            if !decided {
                return None;
            }
            seen.push(i);
        }
        Some(seen)
    })
    .await;
    let (went_on, refused): (Vec<Value>, Vec<Value>) =
        outcomes.into_iter().partition(|i| i["status"] == "running");
    assert_eq!(
        (went_on.len(), refused.len()),
        (1, 1),
        "{went_on:?} {refused:?}"
    );
    let reason = refused[0]["statusReason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("not continued on demand") && reason.contains("quota"),
        "{reason}"
    );
    let goes_on = went_on[0]["id"].as_str().unwrap().to_owned();
    let continued = eventually(
        "the other goes on on demand",
        Duration::from_secs(30),
        || async {
            let i = holder
            .run(
                "query($id: ID!) { instance(id: $id) { status pricePerGpuHour reservationId whenBlockEnds } }",
                json!({ "id": goes_on }),
            )
            .await
            .expect("instance")["instance"]
            .clone();
            (i["reservationId"].is_null()).then_some(i)
        },
    )
    .await;
    assert_eq!(continued["status"], "running", "{continued}");
    assert!(continued["whenBlockEnds"].is_null(), "{continued}");
    assert_eq!(dec(&continued["pricePerGpuHour"]), Decimal::ONE);
    assert_eq!(
        m.env.count(&format!(
            "SELECT count(*) AS n FROM ordering.instance_events WHERE instance_id = '{goes_on}' \
             AND reason LIKE '%goes on on demand at 1 %'"
        )),
        1
    );
    // Metering: the run inside the block ends at the block's end at no GPU
    // price, the next starts at that very instant at the on-demand price.
    let end = ends.to_rfc3339();
    eventually("the two runs metered", Duration::from_secs(30), || async {
        let inside_run = m.env.count(&format!(
            "SELECT count(*) AS n FROM metering.intervals WHERE instance_id = '{goes_on}' AND meter = 'gpu' \
             AND run_seq = 1 AND ended_at = '{end}'::timestamptz AND coalesce(price_per_hour, 0) = 0"
        ));
        let on_demand = m.env.count(&format!(
            "SELECT count(*) AS n FROM metering.intervals WHERE instance_id = '{goes_on}' AND meter = 'gpu' \
             AND run_seq = 2 AND started_at = '{end}'::timestamptz AND price_per_hour > 0"
        ));
        (inside_run >= 1 && on_demand >= 1).then_some(())
    })
    .await;
    assert_eq!(
        m.env.count(&format!(
            "SELECT count(*) AS n FROM metering.intervals WHERE instance_id = '{goes_on}' AND meter = 'gpu' \
             AND run_seq = 1 AND ended_at > '{end}'::timestamptz"
        )),
        0,
        "nothing of the free run after the block's end"
    );
    // Its GPU counts against the holder's quota like any rental.
    let quota = m.env.count(&format!(
        "SELECT count(*) AS n FROM quota.reservations r JOIN ordering.instances i ON i.order_id = r.order_id \
         WHERE i.id = '{goes_on}' AND r.tenant_id = '{holder_tenant}' AND r.released_at IS NULL"
    ));
    assert_eq!(quota, 1, "the on-demand instance holds quota");

    // Stopped: its GPU goes back; the machine holds exactly the next block.
    holder
        .run(
            "mutation($id: ID!) { stopInstance(id: $id) { id } }",
            json!({ "id": goes_on }),
        )
        .await
        .expect("stop");
    eventually("the GPU given back", Duration::from_secs(30), || async {
        let allocated = m.env.count(&format!(
            "SELECT gpus_allocated::int8 AS n FROM catalog.machines WHERE id = '{machine}'"
        ));
        let holds = m.env.count(&format!(
            "SELECT count(DISTINCT gpu_index) AS n FROM catalog.gpu_holds WHERE machine_id = '{machine}'"
        ));
        (allocated == 1 && holds == 1).then_some(())
    })
    .await;
    m.env.cleanup().await;
}

/// An instance inside a block whose host goes silent (`host_lost`) when the
/// block ends: its GPUs went back at the block's end, so it becomes
/// `preempted` (the outage credited up to then) and does not run again,
/// on GPUs it no longer holds and at the block's GPU price of 0, when the
/// host is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_hosts_instance_does_not_outlive_its_block() {
    let m = market(|env| {
        env.settings(|s: &mut ordering::OrderingSettings| {
            s.reconcile_interval = Duration::from_millis(200);
            s.reconcile_settle_seconds = 1;
        });
        env.settings(|s: &mut catalog::CatalogSettings| s.heartbeat_grace_seconds = 2);
    })
    .await;
    let machine = listed_machine(&m.host, "RTX 4090", 1, "1.00").await;
    m.env.heartbeat_all();
    set_terms(&m.host, &machine, "0.80").await;
    let (holder, _) = renter(&m, "1000").await;
    let base = next_hour() + TimeDelta::hours(2);
    let block = reserve(
        &holder,
        &machine,
        1,
        base,
        base + TimeDelta::hours(1),
        "block",
    )
    .await
    .expect("reserve");
    let block_id = block["id"].as_str().unwrap().to_owned();
    let started =
        Utc::now().duration_trunc(TimeDelta::seconds(1)).unwrap() - TimeDelta::minutes(30);
    shift(&m.env, &block_id, started);
    eventually("the block holds its GPU", Duration::from_secs(60), || async {
        (m.env.count(&format!(
            "SELECT count(*) AS n FROM catalog.allocations WHERE block_reservation_id = '{block_id}' \
             AND released_at IS NULL"
        )) == 1)
            .then_some(())
    })
    .await;
    let placed = holder
        .run(
            "mutation($input: CreateOrderInput!) { createOrder(input: $input) { id } }",
            json!({ "input": { "reservationId": block_id, "gpuCount": 1, "idempotencyKey": "inside",
                               "sshPublicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpumarketTestKey test@gpumarket" } }),
        )
        .await
        .expect("launch");
    let id = placed["createOrder"]["id"].as_str().unwrap().to_owned();
    wait_running(&holder, &id, Duration::from_secs(30)).await;

    // The host goes silent; then the block ends.
    m.env.exec(&format!(
        "UPDATE catalog.machines SET last_heartbeat_at = now() - interval '1 minute' WHERE id = '{machine}'"
    ));
    eventually("instance host_lost", Duration::from_secs(60), || async {
        let i = instance_status(&holder, &id).await;
        (i["status"] == "host_lost").then_some(i)
    })
    .await;
    let ends = Utc::now().duration_trunc(TimeDelta::seconds(1)).unwrap() + TimeDelta::seconds(2);
    shift(&m.env, &block_id, ends - TimeDelta::hours(1));
    let preempted = eventually("instance preempted", Duration::from_secs(60), || async {
        let i = instance_status(&holder, &id).await;
        (i["status"] == "preempted").then_some(i)
    })
    .await;
    assert!(
        preempted["statusReason"]
            .as_str()
            .unwrap_or_default()
            .contains("reservation ended"),
        "{preempted}"
    );
    assert_eq!(
        m.env.count(&format!(
            "SELECT count(*) AS n FROM ordering.outbox WHERE routing_key = 'ordering.instance.downtime' \
             AND body->'payload'->>'instance_id' = '{id}' AND body->'payload'->>'ended_by' = 'preempted'"
        )),
        1,
        "the outage ends at the preemption"
    );

    // The host is back: nothing runs again.
    m.env.heartbeat_all();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(instance_status(&holder, &id).await["status"], "preempted");
    assert_eq!(
        m.env.count(&format!(
            "SELECT count(*) AS n FROM ordering.instance_transitions \
             WHERE instance_id = '{id}' AND from_state = 'host_lost' AND to_state = 'running'"
        )),
        0
    );
    assert_eq!(
        m.env.count(&format!(
            "SELECT count(*) AS n FROM catalog.allocations WHERE machine_id = '{machine}' AND released_at IS NULL"
        )),
        0,
        "the machine holds nothing"
    );
    m.env.cleanup().await;
}
