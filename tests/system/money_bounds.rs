//! Every money input refuses an amount past its documented bound or with more
//! than 9 decimal places as VALIDATION naming the field (issue 15 item 10),
//! where a too-large amount used to fail as INTERNAL ("numeric field
//! overflow") and `1e-30` became 0. Nothing is written.

use gpumarket::client::Client;
use gpumarket::dev::Parts;
use serde_json::{Value, json};

use crate::harness::*;

/// Counts and sums of everything a refused money input could have written.
fn written(env: &TestEnv) -> Vec<i64> {
    [
        "SELECT count(*) AS n FROM ordering.orders",
        "SELECT count(*) AS n FROM billing.entries",
        "SELECT count(*) AS n FROM billing.top_ups",
        "SELECT count(*) AS n FROM billing.credit_notes",
        "SELECT count(*) AS n FROM catalog.machines WHERE price_per_gpu_hour <> 1.5 OR min_bid_per_gpu_hour IS NOT NULL",
        "SELECT count(*) AS n FROM quota.tenant_quotas WHERE monthly_budget IS NOT NULL",
    ]
    .iter()
    .map(|sql| env.count(sql))
    .collect()
}

#[tokio::test]
async fn every_money_input_is_bounded_and_refused_as_validation() {
    let env = TestEnv::new().await;
    let stack = env.start(Parts::SERVICES).await;
    let api = Client::new(&stack.gateway_url);
    let operator = env.operator(&api).await;
    let (host, _) = sign_up(&api, &["HOST"]).await;
    let (renter, renter_tenant) = sign_up(&api, &["RENTER"]).await;
    let machine = listed_machine(&host, "RTX 4090", 2, "1.5").await;
    grant(&operator, &renter_tenant, "100").await;
    let before = written(&env);

    // (caller, field named in the error, query taking the amount as $v, other variables)
    let cases: Vec<(&Client, &str, String, Value)> = vec![
        (
            &renter,
            "maxPricePerGpuHour",
            "mutation($v: Decimal, $o: ID) { createOrder(input: {offerId: $o, gpuCount: 1, idempotencyKey: \"bounds-1\", maxPricePerGpuHour: $v, sshPublicKey: \"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpumarketTestKey t@g\"}) { id } }".into(),
            json!({ "o": machine }),
        ),
        (
            &renter,
            "bidPerGpuHour",
            "mutation($v: Decimal, $o: ID) { createOrder(input: {offerId: $o, gpuCount: 1, idempotencyKey: \"bounds-2\", bidPerGpuHour: $v, sshPublicKey: \"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpumarketTestKey t@g\"}) { id } }".into(),
            json!({ "o": machine }),
        ),
        (
            &renter,
            "maxPricePerGpuHour",
            "query($v: Decimal) { offers(filter: {maxPricePerGpuHour: $v}) { nodes { id } } }".into(),
            json!({}),
        ),
        (
            &host,
            "pricePerGpuHour",
            "mutation($v: Decimal!, $m: ID!) { setMachinePricing(machineId: $m, pricePerGpuHour: $v) { id } }".into(),
            json!({ "m": machine }),
        ),
        (
            &host,
            "minBidPerGpuHour",
            "mutation($v: Decimal, $m: ID!) { setMachinePricing(machineId: $m, pricePerGpuHour: \"1.5\", minBidPerGpuHour: $v) { id } }".into(),
            json!({ "m": machine }),
        ),
        (
            &host,
            "storagePricePerGbMonth",
            "mutation($v: Decimal, $m: ID!) { setMachinePricing(machineId: $m, pricePerGpuHour: \"1.5\", storagePricePerGbMonth: $v) { id } }".into(),
            json!({ "m": machine }),
        ),
        (
            &host,
            "bandwidthUpPricePerTb",
            "mutation($v: Decimal, $m: ID!) { setMachinePricing(machineId: $m, pricePerGpuHour: \"1.5\", bandwidthUpPricePerTb: $v) { id } }".into(),
            json!({ "m": machine }),
        ),
        (
            &host,
            "bandwidthDownPricePerTb",
            "mutation($v: Decimal, $m: ID!) { setMachinePricing(machineId: $m, pricePerGpuHour: \"1.5\", bandwidthDownPricePerTb: $v) { id } }".into(),
            json!({ "m": machine }),
        ),
        (
            &operator,
            "amount",
            "mutation($v: Decimal!, $t: ID!) { grantCredit(tenantId: $t, amount: $v, idempotencyKey: \"bounds-3\", reason: \"r\") { amount } }".into(),
            json!({ "t": renter_tenant }),
        ),
        (
            &renter,
            "amount",
            "mutation($v: Decimal!) { createTopUp(amount: $v, idempotencyKey: \"bounds-4\") { id } }".into(),
            json!({}),
        ),
        (
            &operator,
            "amount",
            "mutation($v: Decimal!, $i: ID!) { issueCreditNote(invoiceId: $i, amount: $v, reason: \"r\", idempotencyKey: \"bounds-5\") { id } }".into(),
            json!({ "i": uuid::Uuid::now_v7().to_string() }),
        ),
        (
            &operator,
            "monthlyBudget",
            "mutation($v: Decimal, $t: ID!) { setTenantQuota(tenantId: $t, limits: {monthlyBudget: $v}) { tenantId } }".into(),
            json!({ "t": renter_tenant }),
        ),
    ];
    // Too large (the three), too many places, exponent forms.
    let bad: [Value; 7] = [
        json!("1000000000000000"),
        json!("9999999999999999"),
        json!("1e15"),
        json!("0.0000000001"),
        json!("1.0000000000"),
        json!("1e-30"),
        json!(1e-30),
    ];
    for (caller, field, query, vars) in &cases {
        for value in &bad {
            let mut vars = vars.clone();
            vars["v"] = value.clone();
            let err = caller
                .run(query, vars)
                .await
                .expect_err(&format!("{field} = {value} must be refused"));
            assert_eq!(err.code, "VALIDATION", "{field} = {value}: {}", err.message);
            // The string "1e-30" does not parse as a Decimal at all; the
            // scalar's own message says so. Every other refusal is ours.
            if value != &json!("1e-30") {
                assert!(
                    err.message.contains(field) && err.message.contains("9 decimal places"),
                    "{field} = {value}: {}",
                    err.message
                );
            }
            if value.is_string() && value.as_str().unwrap().len() > 12 {
                assert!(
                    err.message.contains("at most"),
                    "{field} = {value}: names the bound: {}",
                    err.message
                );
            }
        }
    }
    // A literal in the query text, as the probe sent it.
    let literal = renter
        .run(
            "mutation($o: ID) { createOrder(input: {offerId: $o, gpuCount: 1, idempotencyKey: \"bounds-6\", maxPricePerGpuHour: 1e-30, sshPublicKey: \"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpumarketTestKey t@g\"}) { id } }",
            json!({ "o": machine }),
        )
        .await
        .expect_err("1e-30 literal");
    assert_eq!(literal.code, "VALIDATION", "{}", literal.message);
    assert!(
        literal.message.contains("maxPricePerGpuHour"),
        "{}",
        literal.message
    );
    assert_eq!(written(&env), before, "a refused amount wrote nothing");

    // The bounds themselves are accepted.
    let at_max = host
        .run(
            "mutation($m: ID!) { setMachinePricing(machineId: $m, pricePerGpuHour: \"1000\", minBidPerGpuHour: \"0.000000001\") { id } }",
            json!({ "m": machine }),
        )
        .await;
    assert!(at_max.is_ok(), "{at_max:?}");
    env.cleanup().await;
}
