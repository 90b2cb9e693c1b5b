//! The operators' marketplace overview end to end: two renters rent GPUs on
//! agent-run machines while a third machine is listed but never heard from;
//! one renter holds its whole GPU quota, the other burns through its credit
//! and is stopped. The overview's GPU supply matches the catalog's machines
//! and allocations, the tenants near quota and out of credit are listed with
//! their numbers, and, once everything is destroyed and settled, the
//! volume equals what the renters were charged and the fees what the fee
//! account received, to the last decimal. A non-operator is refused.

use std::time::Duration;

use gpumarket::client::Client;
use gpumarket::dev::Parts;
use rust_decimal::Decimal;
use serde_json::{Value, json};

use crate::harness::*;

const OVERVIEW: &str = "query($f: String!, $t: String!, $b: UsageBucket, $p: Int) {
    marketplaceOverview(from: $f, to: $t, bucket: $b, nearQuotaPercent: $p) {
        from to bucket
        volume { currency totalVolume totalHostEarnings totalFees totalFeeAdjustments
                 totalFeeRevenue totalPostings totalSeconds
                 points { bucketStart volume hostEarnings fees feeAdjustments postings seconds } }
        gpuSupply { listedGpus onlineGpus rentedGpus rentedListedGpus
                    models { gpuModel listedMachines listedGpus onlineGpus rentedGpus rentedListedGpus } }
        nearQuota { thresholdPercent currency
                    tenants { tenantId tenantName dimensions { quota limit used percent } } }
        outOfCredit { currency warnBelowSeconds
                      tenants { tenantId tenantName reasons balance burnPerHour runwaySeconds
                                lowSince lastChargedAt } }
    } }";

/// The legs of usage postings on accounts of `kind` (all tenants), signed.
fn usage_legs(env: &TestEnv, kind: &str) -> Decimal {
    sql_decimal(
        env,
        &format!(
            "SELECT coalesce(sum(e.amount), 0) AS d FROM billing.transactions t \
             JOIN billing.entries e ON e.transaction_id = t.id \
             JOIN billing.accounts a ON a.id = e.account_id \
             WHERE t.kind = 'usage' AND a.kind = '{kind}'"
        ),
    )
}

/// One tenant's usage charges (positive).
fn charged(env: &TestEnv, tenant: &str) -> Decimal {
    -sql_decimal(
        env,
        &format!(
            "SELECT coalesce(sum(e.amount), 0) AS d FROM billing.transactions t \
             JOIN billing.entries e ON e.transaction_id = t.id \
             JOIN billing.accounts a ON a.id = e.account_id \
             WHERE t.kind = 'usage' AND a.kind = 'renter_balance' AND a.tenant_id = '{tenant}'"
        ),
    )
}

async fn overview(client: &Client, from: &str, to: &str) -> Value {
    client
        .run(OVERVIEW, json!({ "f": from, "t": to, "b": "DAY", "p": 80 }))
        .await
        .unwrap_or_else(|e| panic!("marketplaceOverview: {e:?}"))["marketplaceOverview"]
        .clone()
}

fn model<'a>(supply: &'a Value, name: &str) -> &'a Value {
    supply["models"]
        .as_array()
        .expect("models")
        .iter()
        .find(|m| m["gpuModel"] == name)
        .unwrap_or_else(|| panic!("no {name} in {supply}"))
}

fn listed<'a>(list: &'a Value, tenant: &str) -> Option<&'a Value> {
    list["tenants"]
        .as_array()
        .expect("tenants")
        .iter()
        .find(|t| t["tenantId"] == tenant)
}

async fn destroy(renter: &Client, id: &str) {
    renter
        .run(
            "mutation($id: ID!) { destroyInstance(id: $id) { id } }",
            json!({ "id": id }),
        )
        .await
        .expect("destroyInstance");
    eventually("instance destroyed", Duration::from_secs(60), || async {
        (instance_status(renter, id).await["status"] == "destroyed").then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_matches_the_ledger_the_catalog_and_the_quotas() {
    let mut env = TestEnv::new().await;
    env.settlement_interval_ms(300);
    // The poor renter's order needs a second of runway, no more.
    env.settings(|s: &mut ordering::OrderingSettings| s.min_runway_seconds = 1);
    let stack = env.start(Parts::ALL).await;
    let api = Client::new(&stack.gateway_url);
    let operator = env.operator(&api).await;
    let (host, _) = sign_up(&api, &["HOST"]).await;
    // Two machines run by agents (online), one listed and never heard from.
    let cheap = machine_with_agent(&stack, &host, "RTX 4090", 2, 24, "0.97").await;
    let dear = machine_with_agent(&stack, &host, "H100 80GB SXM", 1, 80, "900").await;
    let _silent = listed_machine(&host, "L40S", 4, "1.33").await;

    // The steady renter may hold one GPU and holds it.
    let (steady, steady_tenant) = sign_up(&api, &["RENTER"]).await;
    grant(&operator, &steady_tenant, "100").await;
    operator
        .run(
            "mutation($t: ID!) { setTenantQuota(tenantId: $t, maxGpus: 1) { maxGpus } }",
            json!({ "t": steady_tenant }),
        )
        .await
        .expect("setTenantQuota");
    let steady_id = running_instance(&steady, &cheap, 1, "op-steady").await;
    // The poor renter has 0.75 at 900 per GPU-hour: three seconds.
    let (poor, poor_tenant) = sign_up(&api, &["RENTER"]).await;
    grant(&operator, &poor_tenant, "0.75").await;
    let poor_id = running_instance(&poor, &dear, 1, "op-poor").await;
    eventually(
        "the poor renter stopped for lack of funds",
        Duration::from_secs(30),
        || async { (instance_status(&poor, &poor_id).await["status"] == "stopped").then_some(()) },
    )
    .await;

    let now = chrono::Utc::now();
    let (from, to) = (
        (now - chrono::Duration::days(30)).to_rfc3339(),
        (now + chrono::Duration::days(1)).to_rfc3339(),
    );

    // A non-operator is refused, whatever it is.
    for client in [&steady, &host] {
        let refused = client
            .run(OVERVIEW, json!({ "f": from, "t": to }))
            .await
            .expect_err("refused");
        assert_eq!(refused.code, "FORBIDDEN", "{refused:?}");
    }
    let bad = operator
        .run(OVERVIEW, json!({ "f": from, "t": to, "p": 0 }))
        .await
        .expect_err("bad threshold");
    assert_eq!(bad.code, "VALIDATION");
    let bad = operator
        .run(OVERVIEW, json!({ "f": to, "t": from }))
        .await
        .expect_err("empty range");
    assert_eq!(bad.code, "VALIDATION");

    // While the steady renter runs: supply, near quota, out of credit.
    let seen = overview(&operator, &from, &to).await;
    let supply = &seen["gpuSupply"];
    let rtx = model(supply, "RTX 4090");
    assert_eq!(
        (
            &rtx["listedMachines"],
            &rtx["listedGpus"],
            &rtx["onlineGpus"],
            &rtx["rentedGpus"]
        ),
        (&json!(1), &json!(2), &json!(2), &json!(1)),
        "{supply}"
    );
    // The poor renter's stop gave its GPU back.
    let h100 = model(supply, "H100 80GB SXM");
    assert_eq!(
        (
            &h100["listedGpus"],
            &h100["onlineGpus"],
            &h100["rentedGpus"]
        ),
        (&json!(1), &json!(1), &json!(0)),
        "{supply}"
    );
    let l40s = model(supply, "L40S");
    assert_eq!(
        (
            &l40s["listedGpus"],
            &l40s["onlineGpus"],
            &l40s["rentedGpus"]
        ),
        (&json!(4), &json!(0), &json!(0)),
        "{supply}"
    );
    assert_eq!(supply["listedGpus"], 7);
    assert_eq!(supply["onlineGpus"], 3);
    assert_eq!(supply["rentedGpus"], 1);
    assert_eq!(supply["rentedListedGpus"], 1);
    // The same numbers from the catalog's own tables.
    assert_eq!(
        env.count(
            "SELECT coalesce(sum(gpu_count), 0)::bigint AS n FROM catalog.allocations \
             WHERE released_at IS NULL"
        ),
        1
    );
    assert_eq!(
        env.count(
            "SELECT coalesce(sum(gpu_count), 0)::bigint AS n FROM catalog.machines WHERE listed"
        ),
        7
    );

    let near = &seen["nearQuota"];
    assert_eq!(near["thresholdPercent"], 80);
    let steady_row = listed(near, &steady_tenant).unwrap_or_else(|| panic!("{near}"));
    assert_eq!(steady_row["tenantName"], "Test Org");
    let gpus = &steady_row["dimensions"][0];
    assert_eq!(gpus["quota"], "max_gpus");
    assert_eq!(
        (
            dec(&gpus["used"]),
            dec(&gpus["limit"]),
            dec(&gpus["percent"])
        ),
        (Decimal::ONE, Decimal::ONE, Decimal::ONE_HUNDRED)
    );
    assert!(listed(near, &poor_tenant).is_none(), "{near}");

    let credit = &seen["outOfCredit"];
    assert_eq!(credit["currency"], "USD");
    assert_eq!(
        credit["warnBelowSeconds"],
        env.config
            .settings::<billing::BillingSettings>()
            .unwrap()
            .runway_warning_seconds
    );
    let poor_row = listed(credit, &poor_tenant).unwrap_or_else(|| panic!("{credit}"));
    assert!(
        poor_row["reasons"]
            .as_array()
            .expect("reasons")
            .contains(&json!("BALANCE_EXHAUSTED")),
        "{poor_row}"
    );
    assert!(dec(&poor_row["balance"]) <= Decimal::ZERO, "{poor_row}");
    assert!(poor_row["lastChargedAt"].is_string(), "{poor_row}");
    assert!(listed(credit, &steady_tenant).is_none(), "{credit}");

    // Everything destroyed and settled: the money matches the ledger.
    destroy(&steady, &steady_id).await;
    destroy(&poor, &poor_id).await;
    // The ledger may still take a last posting (a settlement racing the
    // destroy): compare with it only when it reads the same before and after
    // the overview and the renters' own views.
    let snapshot = || {
        (
            env.count("SELECT count(*) AS n FROM billing.transactions"),
            usage_legs(&env, "renter_balance"),
            usage_legs(&env, "host_earnings"),
            usage_legs(&env, "platform_fee"),
            charged(&env, &steady_tenant),
            charged(&env, &poor_tenant),
            env.count("SELECT count(*) AS n FROM billing.transactions WHERE kind = 'usage'"),
            // Everything the fee account ever received.
            sql_decimal(
                &env,
                "SELECT coalesce(sum(balance), 0) AS d FROM billing.accounts \
                 WHERE kind = 'platform_fee'",
            ),
        )
    };
    let (seen, series_total, poor_balance, ledger) =
        eventually("the ledger at rest", Duration::from_secs(60), || async {
            let before = snapshot();
            let seen = overview(&operator, &from, &to).await;
            let mut series_total = Decimal::ZERO;
            for renter in [&steady, &poor] {
                let series = renter
                    .run(
                        "query($f: String!, $t: String!) { usageSeries(bucket: DAY, groupBy: METER, from: $f, to: $t) { totalSpend } }",
                        json!({ "f": from, "t": to }),
                    )
                    .await
                    .expect("usageSeries");
                series_total += dec(&series["usageSeries"]["totalSpend"]);
            }
            let balance = poor
                .run("{ balance { amount } }", json!({}))
                .await
                .expect("balance");
            let poor_balance = dec(&balance["balance"]["amount"]);
            (snapshot() == before).then_some((seen, series_total, poor_balance, before))
        })
        .await;
    let (
        _,
        renter_legs,
        host_legs,
        fee_legs,
        charged_steady,
        charged_poor,
        usage_postings,
        fee_account,
    ) = ledger;
    let volume = &seen["volume"];
    assert!(charged_steady > Decimal::ZERO && charged_poor > Decimal::ZERO);
    assert_eq!(
        dec(&volume["totalVolume"]),
        charged_steady + charged_poor,
        "{volume}"
    );
    assert_eq!(dec(&volume["totalVolume"]), -renter_legs);
    assert_eq!(dec(&volume["totalHostEarnings"]), host_legs);
    assert_eq!(dec(&volume["totalFees"]), fee_legs);
    assert!(dec(&volume["totalFees"]) > Decimal::ZERO);
    assert_eq!(
        dec(&volume["totalVolume"]),
        dec(&volume["totalHostEarnings"]) + dec(&volume["totalFees"])
    );
    // Everything the fee account ever received is in the window.
    assert_eq!(dec(&volume["totalFeeRevenue"]), fee_account);
    assert_eq!(dec(&volume["totalFeeAdjustments"]), Decimal::ZERO);
    assert_eq!(volume["totalPostings"], usage_postings);
    // The days add up to the totals, and to what the renters' own series say.
    let points = volume["points"].as_array().expect("points");
    assert!(!points.is_empty());
    let sum = |field: &str| points.iter().map(|p| dec(&p[field])).sum::<Decimal>();
    assert_eq!(sum("volume"), dec(&volume["totalVolume"]));
    assert_eq!(sum("fees"), dec(&volume["totalFees"]));
    assert_eq!(series_total, dec(&volume["totalVolume"]));
    // Nothing rented any more; the poor renter is still out of credit.
    assert_eq!(seen["gpuSupply"]["rentedGpus"], 0);
    assert!(listed(&seen["nearQuota"], &steady_tenant).is_none());
    let poor_row = listed(&seen["outOfCredit"], &poor_tenant).expect("still listed");
    assert_eq!(dec(&poor_row["balance"]), poor_balance);
    assert_eq!(
        dec(&poor_row["balance"]),
        "0.75".parse::<Decimal>().unwrap() - charged_poor
    );

    stack.stop().await;
    env.cleanup().await;
}
