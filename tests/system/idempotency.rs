//! Every mutation of the public API that takes an idempotency key: the same
//! key with the same body answers the first result again, the same key with
//! a different body answers CONFLICT and changes nothing. The list of keyed
//! mutations is read from the schema, so a new one fails here until it is
//! added.

use std::collections::BTreeSet;

use gpumarket::client::Client;
use gpumarket::dev::Parts;
use serde_json::{Value, json};
use stripe_double::StripeDouble;

use crate::harness::*;

/// One keyed mutation: the request, its variables the first time, the
/// variables of a different body under the same key, and the part of the
/// answer a replay must repeat.
struct Keyed {
    field: &'static str,
    client: Client,
    query: String,
    first: Value,
    other: Value,
    /// A JSON pointer into the field's answer.
    same: &'static str,
}

/// The Mutation fields taking `idempotencyKey`, directly or in their input.
async fn keyed_mutations(client: &Client) -> BTreeSet<String> {
    let data = client
        .run(
            "{ __schema { mutationType { fields { name args { name type { kind name ofType { kind name ofType { kind name } } } } } } } }",
            json!({}),
        )
        .await
        .expect("introspection");
    let mut keyed = BTreeSet::new();
    for field in data["__schema"]["mutationType"]["fields"]
        .as_array()
        .expect("fields")
    {
        let name = field["name"].as_str().expect("name").to_owned();
        for arg in field["args"].as_array().expect("args") {
            if arg["name"] == "idempotencyKey" {
                keyed.insert(name.clone());
            }
            // The named type under NON_NULL wrappers.
            let mut ty = &arg["type"];
            while ty["name"].is_null() && !ty["ofType"].is_null() {
                ty = &ty["ofType"];
            }
            if ty["kind"] == "INPUT_OBJECT" {
                let input = client
                    .run(
                        "query($n: String!) { __type(name: $n) { inputFields { name } } }",
                        json!({ "n": ty["name"] }),
                    )
                    .await
                    .expect("input type");
                if input["__type"]["inputFields"]
                    .as_array()
                    .expect("input fields")
                    .iter()
                    .any(|f| f["name"] == "idempotencyKey")
                {
                    keyed.insert(name.clone());
                }
            }
        }
    }
    keyed
}

fn balances(env: &TestEnv) -> String {
    #[derive(diesel::QueryableByName)]
    struct S {
        #[diesel(sql_type = diesel::sql_types::Text)]
        s: String,
    }
    use diesel::RunQueryDsl;
    let sql = "SELECT coalesce(string_agg(id || ':' || balance, '|' ORDER BY id), '') AS s FROM billing.accounts";
    let rows: Vec<S> = diesel::sql_query(sql).load(&mut env.conn()).expect(sql);
    rows.into_iter().next().map(|r| r.s).unwrap_or_default()
}

/// Rows that keyed mutations create.
fn created_rows(env: &TestEnv) -> i64 {
    env.count(
        "SELECT ((SELECT count(*) FROM quota.api_keys) + (SELECT count(*) FROM quota.teams)
          + (SELECT count(*) FROM catalog.machines) + (SELECT count(*) FROM ordering.orders)
          + (SELECT count(*) FROM billing.top_ups) + (SELECT count(*) FROM billing.credit_notes)
          + (SELECT count(*) FROM billing.transactions)
          + (SELECT count(*) FROM ordering.reservations)
          + (SELECT count(*) FROM ordering.resale_listings WHERE state <> 'open')
          + (SELECT count(*) FROM catalog.booked_gpus))::bigint AS n",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_keyed_mutation_replays_the_same_body_and_refuses_another() {
    const STRIPE_KEY: &str = "sk_test_double_4242";
    let stripe = StripeDouble::start(STRIPE_KEY)
        .await
        .expect("Stripe double");
    let mut env = TestEnv::new().await;
    env.settings(|s: &mut billing::BillingSettings| {
        s.stripe_api_base = stripe.url.clone();
        s.stripe_secret_key = STRIPE_KEY.into();
    });
    // No provisioner: the order stays where the saga leaves it, so no
    // settlement moves money while the balances are compared.
    let stack = env
        .start(Parts {
            services: true,
            messaging: true,
            provisioner: false,
        })
        .await;
    let api = Client::new(&stack.gateway_url);
    let operator = env.operator(&api).await;
    let (host, _) = sign_up(&api, &["HOST"]).await;
    let offer = listed_machine(&host, "RTX 4090", 4, "0.50").await;
    env.heartbeat_all();
    let (renter, tenant) = sign_up(&api, &["RENTER"]).await;
    let (_, other_tenant) = sign_up(&api, &["RENTER"]).await;
    grant(&operator, &tenant, "100").await;
    let key_to_rotate = renter
        .run(
            "mutation { createApiKey(input: {name: \"old\", scopes: [READ], idempotencyKey: \"to-rotate\"}) { apiKey { id } } }",
            json!({}),
        )
        .await
        .expect("createApiKey")["createApiKey"]["apiKey"]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let other_key = renter
        .run(
            "mutation { createApiKey(input: {name: \"other\", scopes: [READ], idempotencyKey: \"other\"}) { apiKey { id } } }",
            json!({}),
        )
        .await
        .expect("createApiKey")["createApiKey"]["apiKey"]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    // A finalized invoice of the renter to credit.
    let invoice = uuid::Uuid::now_v7().to_string();
    env.exec(&format!(
        "INSERT INTO billing.invoices (id, tenant_id, number, period_start, period_end, status,
           currency, subtotal, total, exact_total, rounding, finalized_at)
         VALUES ('{invoice}', '{tenant}', 1, '2026-11-01', '2026-12-01', 'finalized', 'USD',
           10, 10, 10, 0, now())"
    ));
    let machine = |name: &str| {
        json!({ "input": { "name": name, "gpuModel": "RTX 4090", "gpuCount": 2, "cpuCores": 8,
                           "ramGib": 32, "diskGib": 500, "country": "US", "idempotencyKey": "m-1" } })
    };
    let team = |max: i32| json!({ "input": { "name": "ml", "limits": { "maxGpus": max }, "idempotencyKey": "t-1" } });
    let order = |gpus: i32| {
        json!({ "input": { "offerId": offer, "gpuCount": gpus, "idempotencyKey": "o-1",
                           "sshPublicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpumarketTestKey test@gpumarket" } })
    };
    // Reserved capacity (issue 20): the host's terms, and a seller's block
    // with two listings of its hours for the renter to buy.
    host.run(
        "mutation($m: ID!, $t: ReservedTermsInput) { setReservedTerms(machineId: $m, terms: $t) { pricePerGpuHour } }",
        json!({ "m": offer, "t": { "pricePerGpuHour": "0.40", "maxLeadDays": 30, "minBlockHours": 1 } }),
    )
    .await
    .expect("setReservedTerms");
    let (seller, seller_tenant) = sign_up(&api, &["RENTER"]).await;
    grant(&operator, &seller_tenant, "100").await;
    let hour = |h: i64| {
        use chrono::DurationRound;
        (chrono::Utc::now()
            .duration_trunc(chrono::TimeDelta::hours(1))
            .expect("hour")
            + chrono::TimeDelta::hours(h))
        .to_rfc3339()
    };
    let block = seller
        .run(
            "mutation($input: ReserveInput!) { reserve(input: $input) { id } }",
            json!({ "input": { "offerId": offer, "gpuCount": 1, "startsAt": hour(3), "endsAt": hour(7),
                               "idempotencyKey": "seller-block" } }),
        )
        .await
        .expect("reserve")["reserve"]["id"]
        .clone();
    let listing = |from: i64, to: i64| {
        let (seller, block) = (seller.clone(), block.clone());
        let (starts, ends) = (hour(from), hour(to));
        async move {
            seller
                .run(
                    "mutation($input: ListReservationHoursInput!) { listReservationHours(input: $input) { id } }",
                    json!({ "input": { "reservationId": block, "startsAt": starts, "endsAt": ends,
                                       "pricePerGpuHour": "0.50" } }),
                )
                .await
                .expect("listReservationHours")["listReservationHours"]["id"]
                .clone()
        }
    };
    let (listing_a, listing_b) = (listing(4, 5).await, listing(5, 6).await);
    let reserve = |gpus: i32| {
        json!({ "input": { "offerId": offer, "gpuCount": gpus, "startsAt": hour(27), "endsAt": hour(29),
                           "idempotencyKey": "v-1" } })
    };
    let cases = vec![
        Keyed {
            field: "createApiKey",
            client: renter.clone(),
            query: "mutation($input: CreateApiKeyInput!) { createApiKey(input: $input) { apiKey { id } } }".into(),
            first: json!({ "input": { "name": "ci", "scopes": ["READ"], "idempotencyKey": "k-1" } }),
            other: json!({ "input": { "name": "ci", "scopes": ["READ", "RENT"], "idempotencyKey": "k-1" } }),
            same: "/apiKey/id",
        },
        Keyed {
            field: "rotateApiKey",
            client: renter.clone(),
            query: "mutation($id: ID!) { rotateApiKey(id: $id, idempotencyKey: \"r-1\") { apiKey { id } } }".into(),
            first: json!({ "id": key_to_rotate }),
            other: json!({ "id": other_key }),
            same: "/apiKey/id",
        },
        Keyed {
            field: "registerMachine",
            client: host.clone(),
            query: "mutation($input: RegisterMachineInput!) { registerMachine(input: $input) { machine { id } } }".into(),
            first: machine("rig-a"),
            other: machine("rig-b"),
            same: "/machine/id",
        },
        Keyed {
            field: "createTeam",
            client: renter.clone(),
            query: "mutation($input: CreateTeamInput!) { createTeam(input: $input) { id } }".into(),
            first: team(2),
            other: team(3),
            same: "/id",
        },
        Keyed {
            field: "createOrder",
            client: renter.clone(),
            query: "mutation($input: CreateOrderInput!) { createOrder(input: $input) { id } }".into(),
            first: order(1),
            other: order(2),
            same: "/id",
        },
        Keyed {
            field: "createTopUp",
            client: renter.clone(),
            query: "mutation($a: Decimal!) { createTopUp(amount: $a, idempotencyKey: \"u-1\") { id } }".into(),
            first: json!({ "a": "20" }),
            other: json!({ "a": "21" }),
            same: "/id",
        },
        Keyed {
            field: "grantCredit",
            client: operator.clone(),
            query: "mutation($t: ID!, $a: Decimal!, $r: String!) { grantCredit(tenantId: $t, amount: $a, idempotencyKey: \"g-1\", reason: $r) { amount } }".into(),
            first: json!({ "t": tenant, "a": "5", "r": "goodwill" }),
            // Another tenant, another amount, another reason: each a new body.
            other: json!({ "t": other_tenant, "a": "5", "r": "goodwill" }),
            // The balance after the grant: the same again, granted once.
            same: "/amount",
        },
        Keyed {
            field: "issueCreditNote",
            client: operator.clone(),
            query: "mutation($i: ID!, $a: Decimal!, $r: String!) { issueCreditNote(invoiceId: $i, amount: $a, reason: $r, idempotencyKey: \"n-1\") { id } }".into(),
            first: json!({ "i": invoice, "a": "1", "r": "SLA" }),
            other: json!({ "i": invoice, "a": "1", "r": "refund" }),
            same: "/id",
        },
        Keyed {
            field: "reserve",
            client: renter.clone(),
            query: "mutation($input: ReserveInput!) { reserve(input: $input) { id } }".into(),
            first: reserve(1),
            other: reserve(2),
            same: "/id",
        },
        Keyed {
            field: "buyReservationHours",
            client: renter.clone(),
            query: "mutation($input: BuyReservationHoursInput!) { buyReservationHours(input: $input) { id } }".into(),
            first: json!({ "input": { "listingId": listing_a, "idempotencyKey": "b-1" } }),
            other: json!({ "input": { "listingId": listing_b, "idempotencyKey": "b-1" } }),
            same: "/id",
        },
    ];

    // The walk covers every keyed mutation the schema has.
    let covered: BTreeSet<String> = cases.iter().map(|c| c.field.to_owned()).collect();
    assert_eq!(keyed_mutations(&operator).await, covered);

    for case in &cases {
        let run = |vars: &Value| {
            let (client, query, vars) = (case.client.clone(), case.query.clone(), vars.clone());
            async move { client.run(&query, vars).await }
        };
        let first = run(&case.first)
            .await
            .unwrap_or_else(|e| panic!("{}: first: {} {}", case.field, e.code, e.message))
            [case.field]
            .clone();
        let replay = run(&case.first)
            .await
            .unwrap_or_else(|e| panic!("{}: replay: {} {}", case.field, e.code, e.message))
            [case.field]
            .clone();
        let same = first.pointer(case.same).expect("answer");
        assert!(!same.is_null(), "{}: {first}", case.field);
        assert_eq!(replay.pointer(case.same), Some(same), "{}", case.field);

        let (rows, money) = (created_rows(&env), balances(&env));
        let error = run(&case.other)
            .await
            .expect_err(&format!("{}: another body under the same key", case.field));
        assert_eq!(error.code, "CONFLICT", "{}: {}", case.field, error.message);
        assert!(
            error.message.contains("idempotencyKey"),
            "{}: {}",
            case.field,
            error.message
        );
        assert_eq!(
            created_rows(&env),
            rows,
            "{}: a refused request wrote",
            case.field
        );
        assert_eq!(
            balances(&env),
            money,
            "{}: a refused request moved money",
            case.field
        );
        // And the first body still replays after the refusal.
        let again = run(&case.first).await.expect("replay after the conflict")[case.field].clone();
        assert_eq!(again.pointer(case.same), Some(same), "{}", case.field);
    }

    // grantCredit to a tenant that does not exist: NOT_FOUND, and billing
    // neither posts nor opens an account for it.
    let nobody = uuid::Uuid::now_v7().to_string();
    let (rows, money) = (created_rows(&env), balances(&env));
    let error = operator
        .run(
            "mutation($t: ID!) { grantCredit(tenantId: $t, amount: \"5\", idempotencyKey: \"g-nobody\", reason: \"x\") { amount } }",
            json!({ "t": nobody }),
        )
        .await
        .expect_err("no such tenant");
    assert_eq!(error.code, "NOT_FOUND", "{}", error.message);
    assert_eq!((created_rows(&env), balances(&env)), (rows, money));

    // grantCredit: another amount and another reason are new bodies too, and
    // the tenant was credited once.
    for (a, r) in [("6", "goodwill"), ("5", "other reason")] {
        let error = operator
            .run(
                "mutation($t: ID!, $a: Decimal!, $r: String!) { grantCredit(tenantId: $t, amount: $a, idempotencyKey: \"g-1\", reason: $r) { amount } }",
                json!({ "t": tenant, "a": a, "r": r }),
            )
            .await
            .expect_err("another body");
        assert_eq!(error.code, "CONFLICT");
    }
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM billing.credit_grants WHERE tenant_id = '{tenant}'"
        )),
        2
    );
    // A rotation's replay did not revoke or make anything more.
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM quota.api_keys WHERE rotated_from = '{key_to_rotate}'"
        )),
        1
    );
    drop(stack);
    env.cleanup().await;
}
