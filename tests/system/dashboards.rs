//! Billing dashboards end to end: two rentals on two GPU models, settled as
//! they run, plus usage placed across an hour and a day boundary (with a
//! correction) and a downtime credit; the usage series (hour and day
//! buckets, by instance, GPU model and meter) add up to the ledger to the
//! last decimal, the host's earnings by machine and day add up to its
//! earnings postings, the balance history's running balance ends at the
//! balance, and bad input is refused with a code.

use contracts::ids::TenantId;
use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use contracts::events::{INSTANCE_DOWNTIME, InstanceDowntime, USAGE_RECORDED, UsageRecorded};
use contracts::{Envelope, money};
use diesel::Connection;
use gpumarket::client::Client;
use gpumarket::dev::Parts;
use rust_decimal::Decimal;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::harness::*;

fn at(s: &str) -> DateTime<Utc> {
    s.parse().expect("instant")
}

/// The renter's usage charges in the ledger (positive), for one instance or
/// all.
fn charged(env: &TestEnv, tenant: &str, instance: Option<&str>) -> Decimal {
    let only = instance
        .map(|i| format!("AND t.instance_id = '{i}'"))
        .unwrap_or_default();
    sql_decimal(
        env,
        &format!(
            "SELECT coalesce(-sum(e.amount), 0) AS d FROM billing.transactions t \
             JOIN billing.entries e ON e.transaction_id = t.id \
             JOIN billing.accounts a ON a.id = e.account_id \
             WHERE t.kind = 'usage' AND a.kind = 'renter_balance' AND a.tenant_id = '{tenant}' {only}"
        ),
    )
}

/// The host's earnings legs (net) of postings of `kind`, for one instance
/// or all.
fn host_legs(env: &TestEnv, host: &str, kind: &str, instance: Option<&str>) -> Decimal {
    let only = instance
        .map(|i| format!("AND t.instance_id = '{i}'"))
        .unwrap_or_default();
    sql_decimal(
        env,
        &format!(
            "SELECT coalesce(sum(e.amount), 0) AS d FROM billing.transactions t \
             JOIN billing.entries e ON e.transaction_id = t.id \
             JOIN billing.accounts a ON a.id = e.account_id \
             WHERE t.kind = '{kind}' AND a.kind = 'host_earnings' AND a.tenant_id = '{host}' {only}"
        ),
    )
}

fn apply(
    env: &TestEnv,
    kind: &str,
    at: DateTime<Utc>,
    tenant: Uuid,
    payload: &impl serde::Serialize,
) {
    let envelope =
        Envelope::named(kind, at, Some(TenantId(tenant)), None, payload).expect("envelope");
    let settings = billing::Settings::from_config(&env.config).expect("settings");
    env.conn()
        .transaction::<_, diesel::result::Error, _>(|c| {
            billing::apply_event(c, &envelope, &settings)
                .map_err(|e| diesel::result::Error::QueryBuilderError(e.to_string().into()))
        })
        .expect("apply event");
}

/// What seconds `[offset, offset + seconds)` of an interval cost, as billing
/// rates them (cumulatively).
fn segment_amount(offset: i64, seconds: i64, price: Decimal) -> Decimal {
    money::rate(offset + seconds, price) - money::rate(offset, price)
}

async fn stop(renter: &Client, id: &str) -> i64 {
    let stopped = renter
        .run(
            "mutation($id: ID!) { stopInstance(id: $id) { runningAt stoppedAt } }",
            json!({ "id": id }),
        )
        .await
        .expect("stop")["stopInstance"]
        .clone();
    let t = |v: &Value| at(v.as_str().expect("instant")).timestamp_micros();
    money::billed_seconds(t(&stopped["runningAt"]), t(&stopped["stoppedAt"]))
}

const SERIES: &str =
    "query($b: UsageBucket!, $g: UsageGroupBy!, $f: String!, $t: String!, $tenant: ID) {
    usageSeries(bucket: $b, groupBy: $g, from: $f, to: $t, tenantId: $tenant) {
        from to currency totalSeconds totalSpend points { bucketStart key seconds spend postings }
    } }";

async fn series(client: &Client, bucket: &str, group: &str, from: &str, to: &str) -> Value {
    client
        .run(
            SERIES,
            json!({ "b": bucket, "g": group, "f": from, "t": to }),
        )
        .await
        .unwrap_or_else(|e| panic!("usageSeries {bucket} {group}: {e:?}"))["usageSeries"]
        .clone()
}

/// Spend per key, and the points' total, which must be the series' total.
fn by_key(series: &Value) -> BTreeMap<String, Decimal> {
    let mut sums: BTreeMap<String, Decimal> = BTreeMap::new();
    let mut total = Decimal::ZERO;
    for p in series["points"].as_array().expect("points") {
        let key = p["key"].as_str().unwrap_or("<none>").to_owned();
        *sums.entry(key).or_default() += dec(&p["spend"]);
        total += dec(&p["spend"]);
    }
    assert_eq!(total, dec(&series["totalSpend"]), "{series}");
    sums
}

fn point<'a>(series: &'a Value, bucket: &str, key: &str) -> &'a Value {
    series["points"]
        .as_array()
        .expect("points")
        .iter()
        .find(|p| p["bucketStart"] == bucket && p["key"] == key)
        .unwrap_or_else(|| panic!("no point {bucket} {key} in {series}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_series_and_earnings_add_up_to_the_ledger_exactly() {
    let mut env = TestEnv::new().await;
    env.settlement_interval_ms(300);
    let stack = env.start(Parts::ALL).await;
    let api = Client::new(&stack.gateway_url);
    let (host, host_tenant) = sign_up(&api, &["HOST"]).await;
    // Prices whose per-second rate is far below the cent, so the ledger's 9
    // decimals are what a series has to add up to.
    let (price_a, price_b): (Decimal, Decimal) = ("0.97".parse().unwrap(), "1.33".parse().unwrap());
    let machine_a = listed_machine(&host, "RTX 4090", 1, "0.97").await;
    let machine_b = listed_machine(&host, "L40S", 1, "1.33").await;
    env.heartbeat_all();
    let (renter, tenant) = sign_up(&api, &["RENTER"]).await;
    let operator = env.operator(&api).await;
    grant(&operator, &tenant, "100").await;

    let a = running_instance(&renter, &machine_a, 1, "dash-a").await;
    let b = running_instance(&renter, &machine_b, 1, "dash-b").await;
    eventually(
        "both settled while running",
        Duration::from_secs(30),
        || async {
            (charged(&env, &tenant, Some(&a)) > Decimal::ZERO
                && charged(&env, &tenant, Some(&b)) > Decimal::ZERO)
                .then_some(())
        },
    )
    .await;
    let (seconds_a, seconds_b) = (stop(&renter, &a).await, stop(&renter, &b).await);
    let (whole_a, whole_b) = (
        money::rate(seconds_a, price_a),
        money::rate(seconds_b, price_b),
    );
    eventually(
        "both runs settled in full",
        Duration::from_secs(30),
        || async {
            (charged(&env, &tenant, Some(&a)) == whole_a
                && charged(&env, &tenant, Some(&b)) == whole_b)
                .then_some(())
        },
    )
    .await;

    // Usage of instance A placed across a day (and hour) boundary, then a
    // correction: a segment counts, whole, where it started.
    let (tenant_id, host_id): (Uuid, Uuid) =
        (tenant.parse().unwrap(), host_tenant.parse().unwrap());
    let interval = Uuid::now_v7();
    let segment = |offset: i64, seconds: i64, start: &str, end: &str| UsageRecorded {
        interval_id: interval,
        instance_id: a.parse().unwrap(),
        tenant_id: TenantId(tenant_id),
        host_tenant_id: TenantId(host_id),
        meter: contracts::states::Meter::Gpu,
        started_at: at(start),
        ended_at: at(end),
        seconds,
        price_per_hour: price_a,
        currency: "USD".into(),
        offset_seconds: offset,
        machine_id: Some(machine_a.parse().unwrap()),
        gpu_model: Some("RTX 4090".into()),
    };
    let placed = [
        segment(0, 10, "2026-11-30T23:59:55Z", "2026-12-01T00:00:05Z"),
        segment(10, 10, "2026-12-01T00:00:05Z", "2026-12-01T00:00:15Z"),
        segment(20, -4, "2026-12-01T00:00:11Z", "2026-12-01T00:00:15Z"),
    ];
    for usage in &placed {
        apply(&env, USAGE_RECORDED, usage.ended_at, tenant_id, usage);
    }
    let first_segment = segment_amount(0, 10, price_a);
    let after_midnight = segment_amount(10, 10, price_a) + segment_amount(20, -4, price_a);
    assert_eq!(first_segment + after_midnight, money::rate(16, price_a));
    // A downtime credit, paid from the host's earnings on machine A.
    let now = Utc::now();
    let down = InstanceDowntime {
        instance_id: a.parse().unwrap(),
        tenant_id: TenantId(tenant_id),
        host_tenant_id: TenantId(host_id),
        machine_id: machine_a.parse().unwrap(),
        run_seq: 99,
        down_from: now - chrono::Duration::seconds(120),
        down_until: now,
        seconds: 120,
        price_per_hour: price_a,
        currency: "USD".into(),
        ended_by: "host_back".into(),
    };
    apply(&env, INSTANCE_DOWNTIME, now, tenant_id, &down);
    let credit = -host_legs(&env, &host_tenant, "downtime_credit", None);
    assert!(credit > Decimal::ZERO);

    let (from, to) = (
        "2026-11-30T00:00:00Z".to_owned(),
        (now + chrono::Duration::days(1)).to_rfc3339(),
    );
    let total = charged(&env, &tenant, None);
    let (total_a, total_b) = (
        charged(&env, &tenant, Some(&a)),
        charged(&env, &tenant, Some(&b)),
    );
    assert_eq!(total_a, whole_a + first_segment + after_midnight);
    assert_eq!(total_b, whole_b);
    let seconds: i64 = env.count(&format!(
        "SELECT sum(d.seconds)::bigint AS n FROM billing.usage_details d \
         JOIN billing.transactions t ON t.id = d.transaction_id WHERE t.tenant_id = '{tenant}'"
    ));

    // Hour and day buckets, by every key: the points add up to the ledger.
    for bucket in ["HOUR", "DAY"] {
        let by_instance = series(&renter, bucket, "INSTANCE", &from, &to).await;
        assert_eq!(dec(&by_instance["totalSpend"]), total, "{by_instance}");
        assert_eq!(by_instance["totalSeconds"], seconds);
        assert_eq!(by_instance["currency"], "USD");
        let sums = by_key(&by_instance);
        assert_eq!(sums.len(), 2, "{by_instance}");
        assert_eq!(sums[&a], total_a);
        assert_eq!(sums[&b], total_b);

        let by_model = series(&renter, bucket, "GPU_MODEL", &from, &to).await;
        assert_eq!(dec(&by_model["totalSpend"]), total);
        let sums = by_key(&by_model);
        assert_eq!(sums["RTX 4090"], total_a, "{by_model}");
        assert_eq!(sums["L40S"], total_b, "{by_model}");

        let by_meter = series(&renter, bucket, "METER", &from, &to).await;
        assert_eq!(dec(&by_meter["totalSpend"]), total);
        let sums = by_key(&by_meter);
        assert_eq!(sums.values().copied().sum::<Decimal>(), total);
        assert!(sums.contains_key("gpu"), "{by_meter}");
    }
    // The placed usage: the segment that started before midnight is all in
    // the day (and hour) it started in; the rest, correction included, in
    // the next.
    let hours = series(&renter, "HOUR", "INSTANCE", &from, &to).await;
    let before = point(&hours, "2026-11-30T23:00:00.000000Z", &a);
    assert_eq!(dec(&before["spend"]), first_segment);
    assert_eq!(before["seconds"], 10);
    let after = point(&hours, "2026-12-01T00:00:00.000000Z", &a);
    assert_eq!(dec(&after["spend"]), after_midnight);
    assert_eq!(after["seconds"], 6);
    assert_eq!(after["postings"], 2);
    let days = series(&renter, "DAY", "GPU_MODEL", &from, &to).await;
    assert_eq!(
        dec(&point(&days, "2026-11-30T00:00:00.000000Z", "RTX 4090")["spend"]),
        first_segment
    );
    assert_eq!(
        dec(&point(&days, "2026-12-01T00:00:00.000000Z", "RTX 4090")["spend"]),
        after_midnight
    );
    // A window that leaves the placed usage out leaves exactly it out.
    let live = series(&renter, "DAY", "INSTANCE", "2026-12-02T00:00:00Z", &to).await;
    assert_eq!(dec(&live["totalSpend"]), whole_a + whole_b, "{live}");
    // An operator may read the renter's dashboard; the numbers are the same.
    let seen = operator
        .run(
            SERIES,
            json!({ "b": "DAY", "g": "INSTANCE", "f": from, "t": to, "tenant": tenant }),
        )
        .await
        .expect("operator's view")["usageSeries"]
        .clone();
    assert_eq!(dec(&seen["totalSpend"]), total);

    // The host's earnings by machine and day add up to its postings.
    let earnings = host
        .run(
            "query($f: String!, $t: String!) { earningsByMachine(from: $f, to: $t) {
                currency totalGross totalFee totalNet totalDowntimeCredits total
                days { day machineId gpuModel seconds gross fee net downtimeCredits total } } }",
            json!({ "f": from, "t": to }),
        )
        .await
        .expect("earningsByMachine")["earningsByMachine"]
        .clone();
    // What usage and downtime credits did to the host's earnings account
    // (payouts, which also move it, are not part of this read).
    let postings = host_legs(&env, &host_tenant, "usage", None)
        + host_legs(&env, &host_tenant, "downtime_credit", None);
    assert_eq!(dec(&earnings["total"]), postings, "{earnings}");
    assert_eq!(
        dec(&earnings["totalNet"]),
        host_legs(&env, &host_tenant, "usage", None)
    );
    assert_eq!(dec(&earnings["totalDowntimeCredits"]), credit);
    assert_eq!(
        dec(&earnings["totalGross"]),
        total,
        "gross is what renters paid"
    );
    assert_eq!(
        dec(&earnings["totalGross"]),
        dec(&earnings["totalNet"]) + dec(&earnings["totalFee"])
    );
    let mut net_by_machine: BTreeMap<String, Decimal> = BTreeMap::new();
    let mut credits_by_machine: BTreeMap<String, Decimal> = BTreeMap::new();
    for d in earnings["days"].as_array().expect("days") {
        assert_eq!(dec(&d["gross"]), dec(&d["net"]) + dec(&d["fee"]), "{d}");
        assert_eq!(
            dec(&d["total"]),
            dec(&d["net"]) - dec(&d["downtimeCredits"])
        );
        let machine = d["machineId"].as_str().expect("machine").to_owned();
        *net_by_machine.entry(machine.clone()).or_default() += dec(&d["net"]);
        *credits_by_machine.entry(machine).or_default() += dec(&d["downtimeCredits"]);
    }
    assert_eq!(
        net_by_machine[&machine_a],
        host_legs(&env, &host_tenant, "usage", Some(&a))
    );
    assert_eq!(
        net_by_machine[&machine_b],
        host_legs(&env, &host_tenant, "usage", Some(&b))
    );
    assert_eq!(credits_by_machine[&machine_a], credit);
    let nov30 = earnings["days"]
        .as_array()
        .expect("days")
        .iter()
        .find(|d| d["day"] == "2026-11-30T00:00:00.000000Z")
        .expect("the day before midnight");
    assert_eq!(nov30["machineId"], machine_a.as_str());
    assert_eq!(nov30["gpuModel"], "RTX 4090");
    assert_eq!(nov30["seconds"], 10);
    assert_eq!(dec(&nov30["gross"]), first_segment);

    // The balance history: newest first, each entry's running balance is the
    // one after it less its amount, the newest is the balance, the oldest
    // the first credit.
    let balance = dec(&renter
        .run("{ balance { amount } }", json!({}))
        .await
        .expect("balance")["balance"]["amount"]);
    let mut entries: Vec<Value> = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = renter
            .run(
                "query($a: String) { balanceHistory(first: 3, after: $a) {
                    balance currency pageInfo { endCursor hasNextPage }
                    nodes { transactionId kind description instanceId amount balanceAfter postedAt cursor } } }",
                json!({ "a": after }),
            )
            .await
            .expect("balanceHistory")["balanceHistory"]
            .clone();
        assert_eq!(dec(&page["balance"]), balance);
        let nodes = page["nodes"].as_array().expect("nodes");
        assert!(nodes.len() <= 3);
        entries.extend(nodes.iter().cloned());
        if page["pageInfo"]["hasNextPage"] != true {
            break;
        }
        after = page["pageInfo"]["endCursor"].as_str().map(str::to_owned);
        assert_eq!(
            after.as_deref(),
            nodes.last().and_then(|n| n["cursor"].as_str())
        );
    }
    let renter_entries = env.count(&format!(
        "SELECT count(*) AS n FROM billing.entries e JOIN billing.accounts a ON a.id = e.account_id \
         WHERE a.kind = 'renter_balance' AND a.tenant_id = '{tenant}'"
    ));
    assert_eq!(entries.len() as i64, renter_entries);
    assert!(entries.len() > 3, "more than one page");
    assert_eq!(dec(&entries[0]["balanceAfter"]), balance);
    for pair in entries.windows(2) {
        assert_eq!(
            dec(&pair[1]["balanceAfter"]),
            dec(&pair[0]["balanceAfter"]) - dec(&pair[0]["amount"]),
            "{pair:?}"
        );
    }
    let oldest = entries.last().expect("oldest");
    assert_eq!(oldest["kind"], "credit");
    assert_eq!(dec(&oldest["balanceAfter"]), Decimal::from(100));
    assert_eq!(dec(&oldest["amount"]), Decimal::from(100));
    assert!(
        entries
            .iter()
            .any(|e| e["kind"] == "downtime_credit" && dec(&e["amount"]) == credit)
    );
    let usage_sum: Decimal = entries
        .iter()
        .filter(|e| e["kind"] == "usage")
        .map(|e| dec(&e["amount"]))
        .sum();
    assert_eq!(-usage_sum, total);

    // Bad input is refused with a code, before or by billing.
    let refused = |client: &Client, query: &str, vars: Value| {
        let (client, query) = (client.clone(), query.to_owned());
        async move { client.run(&query, vars).await.expect_err("refused") }
    };
    let e = refused(
        &renter,
        SERIES,
        json!({ "b": "HOUR", "g": "INSTANCE", "f": to, "t": from }),
    )
    .await;
    assert_eq!(e.code, "VALIDATION");
    assert!(e.message.contains("to"), "{e:?}");
    let e = refused(
        &renter,
        SERIES,
        json!({ "b": "HOUR", "g": "INSTANCE", "f": from, "t": from }),
    )
    .await;
    assert_eq!(e.code, "VALIDATION");
    let e = refused(
        &renter,
        SERIES,
        json!({ "b": "HOUR", "g": "INSTANCE", "f": "2026-01-01T00:00:00Z", "t": "2026-12-01T00:00:00Z" }),
    )
    .await;
    assert_eq!(e.code, "VALIDATION");
    assert!(e.message.contains("at most 2000"), "{e:?}");
    let e = refused(
        &renter,
        SERIES,
        json!({ "b": "DAY", "g": "INSTANCE", "f": "yesterday", "t": to }),
    )
    .await;
    assert_eq!(e.code, "VALIDATION");
    // A host may not read a renter's series, nor a renter a host's earnings.
    let e = refused(
        &host,
        SERIES,
        json!({ "b": "DAY", "g": "INSTANCE", "f": from, "t": to, "tenant": tenant }),
    )
    .await;
    assert_eq!(e.code, "FORBIDDEN");
    let e = refused(
        &renter,
        "query($f: String!, $t: String!) { earningsByMachine(from: $f, to: $t) { total } }",
        json!({ "f": from, "t": to }),
    )
    .await;
    assert_eq!(e.code, "FORBIDDEN");
    for (first, after) in [
        (json!(0), json!(null)),
        (json!(500), json!(null)),
        (json!(5), json!("nope")),
    ] {
        let e = refused(
            &renter,
            "query($n: Int, $a: String) { balanceHistory(first: $n, after: $a) { balance } }",
            json!({ "n": first, "a": after }),
        )
        .await;
        assert_eq!(e.code, "VALIDATION", "first {first} after {after}");
    }

    stack.stop().await;
    env.cleanup().await;
}
