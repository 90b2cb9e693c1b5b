//! Multi-tenant quotas through the public API with every service real:
//! concurrent orders never push a tenant or a team past any of its limits,
//! every refusal is QUOTA_EXCEEDED naming the quota with its numbers, teams
//! borrow up to their limit and never past the tenant, and usage returns to
//! zero when instances end.

use contracts::ids::OrderId;
use std::time::Duration;

use chrono::{DateTime, Datelike, TimeZone, Utc};
use gpumarket::client::Client;
use gpumarket::dev::Parts;
use rust_decimal::Decimal;
use serde_json::{Value, json};

use crate::harness::*;
use contracts::api::{QuotaLimits, ReserveQuotaRequest, SetTenantQuotaRequest, SignUpRequest};

const SERVICES: Parts = Parts::SERVICES;

const H100: &str = "H100 80GB SXM";

const QUOTA: &str = "quota {
    limits { maxGpus maxGpusPerModel { gpuModel gpus } maxRunningInstances monthlyBudget }
    usage { gpus gpusByModel { gpuModel gpus } runningInstances monthToDateSpend projectedMonthSpend currency } }";

/// An order's instance, or the error object (message and extensions).
async fn place(
    renter: &Client,
    offer: &str,
    gpus: i32,
    key: &str,
    team: Option<&str>,
) -> Result<Value, Value> {
    let body = renter
        .raw(
            "mutation($input: CreateOrderInput!) { createOrder(input: $input) { id status pricePerHourTotal } }",
            json!({ "input": { "offerId": offer, "gpuCount": gpus, "idempotencyKey": key, "teamId": team,
                               "sshPublicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpumarketTestKey test@gpumarket" } }),
        )
        .await
        .expect("transport");
    match body["errors"].as_array().and_then(|e| e.first()) {
        Some(error) => Err(error.clone()),
        None => Ok(body["data"]["createOrder"].clone()),
    }
}

fn code(error: &Value) -> &str {
    error["extensions"]["code"].as_str().unwrap_or("none")
}

async fn set_limits(operator: &Client, tenant: &str, limits: Value) -> Value {
    operator
        .run(
            &format!("mutation($t: ID!, $l: QuotaLimitsInput!) {{ setTenantQuota(tenantId: $t, limits: $l) {{ {QUOTA} }} }}"),
            json!({ "t": tenant, "l": limits }),
        )
        .await
        .expect("setTenantQuota")["setTenantQuota"]
        .clone()
}

async fn tenant_quota(renter: &Client) -> Value {
    renter
        .run(
            &format!("{{ tenantQuota {{ maxGpus gpusInUse {QUOTA} teams {{ id name {QUOTA} borrowingLimit {{ maxGpus }} }} }} }}"),
            json!({}),
        )
        .await
        .expect("tenantQuota")["tenantQuota"]
        .clone()
}

fn by_model(usage: &Value, model: &str) -> i64 {
    usage["gpusByModel"]
        .as_array()
        .and_then(|all| all.iter().find(|m| m["gpuModel"] == model))
        .and_then(|m| m["gpus"].as_i64())
        .unwrap_or(0)
}

fn decimal(v: &Value) -> Decimal {
    v.as_str()
        .expect("decimal string")
        .parse()
        .expect("decimal")
}

/// The end of the calendar month (UTC) of `at`.
fn month_end(at: DateTime<Utc>) -> DateTime<Utc> {
    let (y, m) = if at.month() == 12 {
        (at.year() + 1, 1)
    } else {
        (at.year(), at.month() + 1)
    };
    Utc.with_ymd_and_hms(y, m, 1, 0, 0, 0).unwrap()
}

fn projected(rate: Decimal, from: DateTime<Utc>) -> Decimal {
    contracts::money::rate((month_end(from) - from).num_seconds(), rate)
}

async fn market(env: &TestEnv, api: &Client, machines: &[(&str, i32, &str)]) -> Vec<String> {
    let (host, _) = sign_up(api, &["HOST"]).await;
    let mut offers = Vec::new();
    for (model, gpus, price) in machines {
        offers.push(listed_machine(&host, model, *gpus, price).await);
    }
    env.heartbeat_all();
    offers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_racing_orders_never_pass_the_gpu_or_per_model_quota() {
    let env = TestEnv::new().await;
    let stack = env.start(SERVICES).await;
    let api = Client::new(&stack.gateway_url);
    // Capacity (32 GPUs) is never what refuses: only quota does.
    let offers = market(
        &env,
        &api,
        &[
            (H100, 8, "2.49"),
            (H100, 8, "2.59"),
            ("L40S", 8, "0.89"),
            ("L40S", 8, "0.99"),
        ],
    )
    .await;
    let (renter, tenant) = sign_up(&api, &["RENTER"]).await;
    let operator = env.operator(&api).await;
    grant(&operator, &tenant, "100000").await;
    let set = set_limits(
        &operator,
        &tenant,
        json!({ "maxGpus": 10, "maxGpusPerModel": [{ "gpuModel": H100, "maxGpus": 3 }] }),
    )
    .await;
    assert_eq!(set["quota"]["limits"]["maxGpus"], 10);
    assert_eq!(
        set["quota"]["limits"]["maxGpusPerModel"],
        json!([{ "gpuModel": H100, "gpus": 3 }])
    );

    let racers: Vec<_> = (0..50)
        .map(|i| {
            let renter = renter.clone();
            let offer = offers[i % offers.len()].clone();
            tokio::spawn(async move { place(&renter, &offer, 1, &format!("race-{i}"), None).await })
        })
        .collect();
    let (mut won, mut h100_won) = (0, 0);
    let mut named = std::collections::BTreeSet::new();
    for (i, racer) in racers.into_iter().enumerate() {
        match racer.await.expect("join") {
            Ok(_) => {
                won += 1;
                if i % 4 < 2 {
                    h100_won += 1;
                }
            }
            Err(error) => {
                assert_eq!(code(&error), "QUOTA_EXCEEDED", "{error}");
                let ext = &error["extensions"];
                let quota = ext["quota"].as_str().expect("extensions.quota").to_owned();
                assert!(
                    error["message"].as_str().unwrap().contains(&quota),
                    "{error}"
                );
                assert_eq!(ext["scope"], "TENANT", "{error}");
                match quota.as_str() {
                    "max_gpus" => assert_eq!(ext["limit"], 10, "{error}"),
                    q if q == format!("max_gpus_per_model:{H100}") => {
                        assert_eq!(ext["limit"], 3, "{error}");
                        assert!(i % 4 < 2, "only H100 orders hit the H100 quota");
                    }
                    other => panic!("unexpected quota {other}: {error}"),
                }
                assert_eq!(ext["requested"], 1);
                assert!(ext["used"].as_i64().unwrap() + 1 > ext["limit"].as_i64().unwrap());
                named.insert(quota);
            }
        }
    }
    // 25 orders of each model race for 10 GPUs, at most 3 of them H100.
    assert_eq!(won, 10);
    assert!(h100_won <= 3, "{h100_won} H100 GPUs granted");
    // Every refusal named one of the two quotas (checked above); the
    // total is always what runs out, so it is always among them.
    assert!(named.contains("max_gpus"), "{named:?}");
    assert_eq!(
        env.count("SELECT sum(gpus_allocated)::bigint AS n FROM catalog.machines"),
        10
    );
    assert_eq!(
        env.count("SELECT coalesce(sum(gpu_count), 0)::bigint AS n FROM quota.reservations WHERE released_at IS NULL"),
        10
    );
    let quota = tenant_quota(&renter).await;
    let usage = &quota["quota"]["usage"];
    assert_eq!(usage["gpus"], 10);
    assert_eq!(usage["runningInstances"], 10);
    assert_eq!(by_model(usage, H100), h100_won);
    assert_eq!(by_model(usage, "L40S"), 10 - h100_won);
    assert_eq!(
        (quota["maxGpus"].clone(), quota["gpusInUse"].clone()),
        (json!(10), json!(10))
    );

    stack.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_running_instance_limit_and_the_monthly_budget_refuse_by_name() {
    let env = TestEnv::new().await;
    let stack = env.start(SERVICES).await;
    let api = Client::new(&stack.gateway_url);
    let offers = market(&env, &api, &[(H100, 8, "2.5"), ("L40S", 8, "1")]).await;
    let (renter, tenant) = sign_up(&api, &["RENTER"]).await;
    let operator = env.operator(&api).await;
    grant(&operator, &tenant, "100000").await;
    set_limits(
        &operator,
        &tenant,
        json!({ "maxGpus": 16, "maxRunningInstances": 2 }),
    )
    .await;

    let before = Utc::now();
    place(&renter, &offers[0], 2, "a", None)
        .await
        .expect("first");
    place(&renter, &offers[1], 1, "b", None)
        .await
        .expect("second");
    let after = Utc::now();
    let refused = place(&renter, &offers[1], 1, "c", None)
        .await
        .expect_err("a third instance is over the limit");
    assert_eq!(code(&refused), "QUOTA_EXCEEDED");
    assert_eq!(refused["extensions"]["quota"], "max_running_instances");
    assert_eq!(refused["extensions"]["limit"], 2);
    assert_eq!(refused["extensions"]["used"], 2);
    // Refused orders hold nothing; the same key answers the same refusal.
    let again = place(&renter, &offers[1], 1, "c", None)
        .await
        .expect_err("replay");
    assert_eq!(code(&again), "QUOTA_EXCEEDED");
    assert_eq!(
        env.count("SELECT count(*) AS n FROM quota.reservations WHERE released_at IS NULL"),
        2
    );

    // Both rentals are projected at their rates to the end of the month
    // (5/h and 1/h), and nothing is spent yet beyond their seconds so far.
    let usage = tenant_quota(&renter).await["quota"]["usage"].clone();
    let spend = decimal(&usage["projectedMonthSpend"]);
    let rates = Decimal::from(6);
    // A hold projects whole seconds from its own creation: allow the second
    // `before` may share with it.
    assert!(
        spend <= projected(rates, before - chrono::Duration::seconds(1)),
        "{spend} vs {usage}"
    );
    assert!(
        spend >= projected(rates, after) - Decimal::ONE,
        "{spend} vs {usage}"
    );
    let to_date = decimal(&usage["monthToDateSpend"]);
    assert!(to_date >= Decimal::ZERO && to_date < spend);
    assert_eq!(usage["currency"], "USD");

    // A budget the projection already uses refuses any further order, with
    // the budget named and its numbers.
    set_limits(
        &operator,
        &tenant,
        json!({ "maxGpus": 16, "monthlyBudget": spend.to_string() }),
    )
    .await;
    let refused = place(&renter, &offers[1], 1, "d", None)
        .await
        .expect_err("over budget");
    assert_eq!(code(&refused), "QUOTA_EXCEEDED");
    let ext = &refused["extensions"];
    assert_eq!(ext["quota"], "monthly_budget", "{refused}");
    assert_eq!(decimal(&ext["limit"]), spend);
    assert!(decimal(&ext["requested"]) > Decimal::ZERO);
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("monthly_budget")
    );

    // A budget that covers the order's rate until the month ends admits it.
    let now = Utc::now();
    let budget = spend + projected(Decimal::ONE, now);
    set_limits(
        &operator,
        &tenant,
        json!({ "maxGpus": 16, "monthlyBudget": budget.to_string() }),
    )
    .await;
    place(&renter, &offers[1], 1, "e", None)
        .await
        .expect("within budget");
    let usage = tenant_quota(&renter).await["quota"]["usage"].clone();
    assert!(decimal(&usage["projectedMonthSpend"]) <= budget);
    assert_eq!(usage["runningInstances"], 3);

    // A team's budget counts only the team's holds, and is checked first.
    let lab = create_team(&renter, "lab", json!({ "monthlyBudget": "1.5" }), json!({})).await;
    let refused = place(&renter, &offers[1], 1, "lab-1", Some(&lab))
        .await
        .expect_err("over the team's budget");
    let ext = &refused["extensions"];
    assert_eq!(
        (
            ext["quota"].clone(),
            ext["scope"].clone(),
            ext["teamName"].clone()
        ),
        (json!("monthly_budget"), json!("TEAM"), json!("lab")),
        "{refused}"
    );
    assert_eq!(decimal(&ext["used"]), Decimal::ZERO);
    assert_eq!(decimal(&ext["limit"]), Decimal::new(15, 1));

    stack.stop().await;
    env.cleanup().await;
}

async fn create_team(renter: &Client, name: &str, limits: Value, borrowing: Value) -> String {
    let team = renter
        .run(
            "mutation($i: CreateTeamInput!) { createTeam(input: $i) { id name quota { limits { maxGpus } } borrowingLimit { maxGpus } } }",
            json!({ "i": { "name": name, "idempotencyKey": name, "limits": limits, "borrowingLimit": borrowing } }),
        )
        .await
        .expect("createTeam")["createTeam"]
        .clone();
    assert_eq!(team["name"], name);
    team["id"].as_str().expect("id").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teams_borrow_up_to_their_limit_and_never_past_the_tenant() {
    let env = TestEnv::new().await;
    let stack = env.start(SERVICES).await;
    let api = Client::new(&stack.gateway_url);
    let offers = market(&env, &api, &[("L40S", 8, "0.89"), ("L40S", 8, "0.99")]).await;
    let (renter, tenant) = sign_up(&api, &["RENTER"]).await;
    let operator = env.operator(&api).await;
    grant(&operator, &tenant, "100000").await;
    set_limits(&operator, &tenant, json!({ "maxGpus": 8 })).await;

    // Nominal 2 GPUs, borrowing up to 2 more of the tenant's unused quota.
    let ml = create_team(
        &renter,
        "ml",
        json!({ "maxGpus": 2 }),
        json!({ "maxGpus": 2 }),
    )
    .await;
    let web = create_team(&renter, "web", json!({ "maxGpus": 8 }), json!({})).await;
    // The same key answers the same team.
    assert_eq!(
        create_team(
            &renter,
            "ml",
            json!({ "maxGpus": 2 }),
            json!({ "maxGpus": 2 })
        )
        .await,
        ml
    );

    // A team's quota above the tenant's is refused and changes nothing.
    let refused = renter
        .run(
            "mutation($t: ID!) { setTeamQuota(teamId: $t, limits: { maxGpus: 9 }) { id } }",
            json!({ "t": web }),
        )
        .await
        .expect_err("above the tenant");
    assert_eq!(refused.code, "VALIDATION");
    assert!(refused.message.contains("maxGpus"), "{}", refused.message);
    let quota = tenant_quota(&renter).await;
    let web_limits = &quota["teams"][1]["quota"]["limits"];
    assert_eq!(web_limits["maxGpus"], 8);
    // Creating one above the tenant's is refused too.
    let refused = renter
        .run(
            "mutation { createTeam(input: { name: \"big\", idempotencyKey: \"big\", limits: { maxGpus: 9 } }) { id } }",
            json!({}),
        )
        .await
        .expect_err("above the tenant");
    assert_eq!(refused.code, "VALIDATION");

    // Twenty racing orders of team ml: its 2 GPUs plus 2 borrowed, no more.
    let racers: Vec<_> = (0..20)
        .map(|i| {
            let renter = renter.clone();
            let offer = offers[i % 2].clone();
            let ml = ml.clone();
            tokio::spawn(
                async move { place(&renter, &offer, 1, &format!("ml-{i}"), Some(&ml)).await },
            )
        })
        .collect();
    let mut won = 0;
    for racer in racers {
        match racer.await.expect("join") {
            Ok(_) => won += 1,
            Err(error) => {
                assert_eq!(code(&error), "QUOTA_EXCEEDED", "{error}");
                let ext = &error["extensions"];
                assert_eq!(ext["scope"], "TEAM", "{error}");
                assert_eq!(ext["teamId"], ml.as_str());
                assert_eq!(ext["quota"], "max_gpus");
                assert_eq!(ext["limit"], 4, "nominal plus borrowing");
            }
        }
    }
    assert_eq!(won, 4);

    // Team web may hold 8 by its own quota, but the tenant has 4 left.
    for i in 0..4 {
        place(&renter, &offers[i % 2], 1, &format!("web-{i}"), Some(&web))
            .await
            .expect("within the tenant");
    }
    let refused = place(&renter, &offers[0], 1, "web-4", Some(&web))
        .await
        .expect_err("tenant full");
    assert_eq!(refused["extensions"]["scope"], "TENANT", "{refused}");
    assert_eq!(refused["extensions"]["quota"], "max_gpus");
    // An order of no team counts against the tenant alone: full as well.
    let refused = place(&renter, &offers[0], 1, "none", None)
        .await
        .expect_err("tenant full");
    assert_eq!(refused["extensions"]["scope"], "TENANT");

    // Usage per team and for the tenant, as the API shows it.
    let quota = tenant_quota(&renter).await;
    assert_eq!(quota["quota"]["usage"]["gpus"], 8);
    let teams = quota["teams"].as_array().expect("teams");
    assert_eq!(teams.len(), 2);
    assert_eq!(teams[0]["name"], "ml");
    assert_eq!(teams[0]["quota"]["usage"]["gpus"], 4);
    assert_eq!(teams[0]["borrowingLimit"]["maxGpus"], 2);
    assert_eq!(teams[1]["quota"]["usage"]["gpus"], 4);
    let listed = renter
        .run(
            "{ teams { id quota { usage { gpus runningInstances } } } }",
            json!({}),
        )
        .await
        .expect("teams");
    assert_eq!(listed["teams"][0]["quota"]["usage"]["runningInstances"], 4);

    // An unknown team (or another tenant's) is not found, and holds nothing.
    let (stranger, stranger_tenant) = sign_up(&api, &["RENTER"]).await;
    grant(&operator, &stranger_tenant, "1000").await;
    let refused = place(&stranger, &offers[0], 1, "steal", Some(&ml))
        .await
        .expect_err("another tenant's team");
    assert_eq!(code(&refused), "NOT_FOUND", "{refused}");

    // An operator shrinking the tenant lowers its teams' quotas to fit.
    let shrunk = operator
        .run(
            "mutation($t: ID!) { setTenantQuota(tenantId: $t, maxGpus: 3) { maxGpus } }",
            json!({ "t": tenant }),
        )
        .await
        .expect("setTenantQuota");
    assert_eq!(shrunk["setTenantQuota"]["maxGpus"], 3);
    let quota = tenant_quota(&renter).await;
    assert_eq!(quota["teams"][1]["quota"]["limits"]["maxGpus"], 3);
    assert_eq!(quota["teams"][0]["quota"]["limits"]["maxGpus"], 2);

    // Only the tenant's owners and admins manage teams.
    env.exec(&format!(
        "UPDATE quota.users SET role = 'member' WHERE tenant_id = '{tenant}'"
    ));
    let refused = renter
        .run(
            "mutation($t: ID!) { setTeamQuota(teamId: $t, limits: { maxGpus: 1 }) { id } }",
            json!({ "t": ml }),
        )
        .await
        .expect_err("a member");
    assert_eq!(refused.code, "FORBIDDEN");
    let quota = tenant_quota(&renter).await;
    assert_eq!(quota["teams"][0]["quota"]["limits"]["maxGpus"], 2);

    stack.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_follows_stop_start_and_returns_to_zero_after_destroy() {
    let env = TestEnv::new().await;
    let stack = env.start(Parts::ALL).await;
    let api = Client::new(&stack.gateway_url);
    let offers = market(&env, &api, &[("RTX 4090", 2, "0.42")]).await;
    let (renter, tenant) = sign_up(&api, &["RENTER"]).await;
    let operator = env.operator(&api).await;
    grant(&operator, &tenant, "100").await;
    let team = create_team(&renter, "research", json!({ "maxGpus": 2 }), json!({})).await;

    let placed = place(&renter, &offers[0], 2, "life", Some(&team))
        .await
        .expect("order");
    let id = placed["id"].as_str().expect("id").to_owned();
    wait_running(&renter, &id, Duration::from_secs(30)).await;
    let team_gpus = |q: &Value| q["teams"][0]["quota"]["usage"]["gpus"].clone();
    assert_eq!(team_gpus(&tenant_quota(&renter).await), 2);

    // Stopped holds only the disk: GPUs and the instance go back.
    let act = |action: &'static str| {
        let renter = renter.clone();
        let id = id.clone();
        async move {
            renter
                .run(
                    &format!("mutation($id: ID!) {{ {action}(id: $id) {{ status }} }}"),
                    json!({ "id": id }),
                )
                .await
                .expect(action)
        }
    };
    act("stopInstance").await;
    let quota = tenant_quota(&renter).await;
    assert_eq!(quota["quota"]["usage"]["gpus"], 0);
    assert_eq!(quota["quota"]["usage"]["runningInstances"], 0);
    assert_eq!(team_gpus(&quota), 0);

    // A start holds them again, for the same team.
    act("startInstance").await;
    wait_running(&renter, &id, Duration::from_secs(30)).await;
    assert_eq!(team_gpus(&tenant_quota(&renter).await), 2);

    act("destroyInstance").await;
    eventually("instance destroyed", Duration::from_secs(30), || async {
        (instance_status(&renter, &id).await["status"] == "destroyed").then_some(())
    })
    .await;
    let quota = tenant_quota(&renter).await;
    let usage = &quota["quota"]["usage"];
    assert_eq!(
        (usage["gpus"].clone(), usage["runningInstances"].clone()),
        (json!(0), json!(0))
    );
    assert_eq!(usage["gpusByModel"], json!([]));
    assert_eq!(team_gpus(&quota), 0);
    // Nothing live is projected; what was held stays in this month's spend.
    assert_eq!(usage["projectedMonthSpend"], usage["monthToDateSpend"]);
    assert_eq!(
        env.count("SELECT count(*) AS n FROM quota.reservations WHERE released_at IS NULL"),
        0
    );

    stack.stop().await;
    env.cleanup().await;
}

/// Admission straight against the quota service's code with eight
/// connections racing (the services' test pools have two, which rarely
/// overlap two transactions): without the tenant's row lock this overshoots.
async fn race_holds(db: &platform::Db, limits: QuotaLimits, racers: usize) -> (i32, i32) {
    let tenant = quota::sign_up(
        db,
        SignUpRequest {
            email: format!("q-{}@test.dev", uuid::Uuid::now_v7().simple()),
            password: PASSWORD.into(),
            tenant_name: "Racers".into(),
            roles: vec![contracts::api::TenantRole::Renter],
        },
        16,
    )
    .await
    .expect("sign up")
    .tenant_id;
    quota::set_quota(
        db,
        "USD".into(),
        tenant,
        SetTenantQuotaRequest {
            max_gpus: None,
            limits: Some(limits),
        },
    )
    .await
    .expect("set quota");
    let tasks: Vec<_> = (0..racers)
        .map(|i| {
            let db = db.clone();
            tokio::spawn(async move {
                let model = if i % 2 == 0 { H100 } else { "L40S" };
                let hold = quota::reserve(
                    &db,
                    "USD".into(),
                    ReserveQuotaRequest {
                        gpu_eighths: None,
                        order_id: OrderId(uuid::Uuid::now_v7()),
                        tenant_id: tenant,
                        gpu_count: 1,
                        gpu_model: model.into(),
                        hourly_rate: Decimal::ONE,
                        team_id: None,
                        renews: None,
                        moves: None,
                    },
                )
                .await;
                (model, hold)
            })
        })
        .collect();
    let (mut won, mut h100) = (0, 0);
    for task in tasks {
        match task.await.expect("join") {
            (model, Ok(_)) => {
                won += 1;
                if model == H100 {
                    h100 += 1;
                }
            }
            (_, Err(quota::Error::QuotaExceeded(_))) => {}
            (_, Err(other)) => panic!("unexpected {other}"),
        }
    }
    (won, h100)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn holds_racing_on_eight_connections_never_pass_any_limit() {
    let env = TestEnv::new().await;
    let db = platform::Db::connect(&env.config.database_url_for("quota"), 8).expect("pool");

    let gpus = QuotaLimits {
        max_gpus: Some(10),
        max_gpus_per_model: [(H100.to_owned(), 3)].into(),
        ..QuotaLimits::default()
    };
    let (won, h100) = race_holds(&db, gpus, 50).await;
    assert_eq!(won, 10);
    assert!(h100 <= 3, "{h100} H100 holds");

    let instances = QuotaLimits {
        max_gpus: Some(100),
        max_running_instances: Some(6),
        ..QuotaLimits::default()
    };
    assert_eq!(race_holds(&db, instances, 50).await.0, 6);

    // Room for seven holds at 1/h until the month ends, not eight (their
    // projections shrink by the seconds the race takes, far under 1/15).
    let one = projected(Decimal::ONE, Utc::now());
    let budget = QuotaLimits {
        max_gpus: Some(100),
        monthly_budget: Some(one * Decimal::new(75, 1)),
        ..QuotaLimits::default()
    };
    assert_eq!(race_holds(&db, budget, 50).await.0, 7);
    assert_eq!(
        env.count("SELECT count(*) AS n FROM quota.reservations WHERE released_at IS NULL"),
        10 + 6 + 7
    );

    drop(db);
    env.cleanup().await;
}
