//! Host statements and Stripe Connect payouts end to end: a host earns from
//! real rentals on two machines; its statement has a line per machine whose
//! sums are exactly the ledger's postings; a payout run pays the minor-unit
//! floor of the earnings through the Stripe test double, posts once and
//! never pays twice (a second run, a pending payout left from before the
//! Stripe call, an answer lost after Stripe made the transfer); a host below
//! the minimum is not paid; a refused transfer leaves the earnings intact.

use std::time::Duration;

use contracts::Envelope;
use contracts::events::InstanceDowntime;
use diesel::{Connection, RunQueryDsl};
use gpumarket::client::Client;
use gpumarket::dev::Parts;
use rust_decimal::Decimal;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::harness::*;
use stripe_double::{StripeDouble, TransferMode};

const SECRET_KEY: &str = "sk_test_double_payouts";

const STATEMENT: &str = "id number status periodStart periodEnd currency seconds gross fee net
    downtimeCredits earnings adjustments payouts openingBalance closingBalance finalizedAt
    lines { machineId gpuModel meter earlierPeriod seconds gross fee net downtimeCredits amount postings }";

const PAYOUT: &str = "id amount currency status stripeAccountId stripeTransferId postingId failureReason createdAt paidAt";

fn earnings_balance(env: &TestEnv, host: &str) -> Decimal {
    sql_decimal(
        env,
        &format!(
            "SELECT coalesce(sum(balance), 0) AS d FROM billing.accounts \
             WHERE kind = 'host_earnings' AND tenant_id = '{host}'"
        ),
    )
}

/// The exact sum of `leg` (an account kind) over the usage postings of
/// `machine` that paid `host`.
fn machine_leg(env: &TestEnv, host: &str, machine: &str, leg: &str) -> Decimal {
    sql_decimal(
        env,
        &format!(
            "SELECT coalesce(sum(e.amount), 0) AS d FROM billing.usage_details d \
             JOIN billing.entries e ON e.transaction_id = d.transaction_id \
             JOIN billing.accounts a ON a.id = e.account_id AND a.kind = '{leg}' \
             WHERE d.host_tenant_id = '{host}' AND d.machine_id = '{machine}'"
        ),
    )
}

fn payout_postings(env: &TestEnv, host: &str) -> i64 {
    env.count(&format!(
        "SELECT count(*) AS n FROM billing.transactions WHERE kind = 'payout' AND tenant_id = '{host}'"
    ))
}

/// `amount` rounded down to whole cents.
fn floor_cents(amount: Decimal) -> Decimal {
    let mut cents = (amount * Decimal::from(100)).floor() / Decimal::from(100);
    cents.rescale(2);
    cents
}

/// Runs an instance on `offer` until at least three seconds of it were
/// settled (so a round earns well above the test's 0.10 minimum); its id.
async fn earn(env: &TestEnv, renter: &Client, offer: &str, key: &str) -> String {
    let id = running_instance(renter, offer, 1, key).await;
    eventually("settled while running", Duration::from_secs(30), || async {
        (env.count(&format!(
            "SELECT coalesce(sum(d.seconds), 0)::bigint AS n FROM billing.usage_details d \
             JOIN billing.transactions t ON t.id = d.transaction_id WHERE t.instance_id = '{id}'"
        )) >= 3)
            .then_some(())
    })
    .await;
    id
}

async fn stop_and_settle(env: &TestEnv, renter: &Client, ids: &[&str]) {
    for id in ids {
        renter
            .run(
                "mutation($id: ID!) { stopInstance(id: $id) { id } }",
                json!({ "id": id }),
            )
            .await
            .expect("stop");
    }
    for id in ids {
        eventually("interval recorded", Duration::from_secs(30), || async {
            (env.count(&format!(
                "SELECT count(*) AS n FROM metering.intervals \
                 WHERE instance_id = '{id}' AND recorded_at IS NOT NULL"
            )) >= 1)
                .then_some(())
        })
        .await;
    }
    // The close's posting reaches billing through the broker: wait until the
    // ledger holds as many seconds as metering recorded.
    for id in ids {
        eventually("usage posted in full", Duration::from_secs(30), || async {
            let metered = env.count(&format!(
                "SELECT coalesce(sum(seconds), 0)::bigint AS n FROM metering.intervals \
                 WHERE instance_id = '{id}' AND recorded_at IS NOT NULL"
            ));
            let posted = env.count(&format!(
                "SELECT coalesce(sum(d.seconds), 0)::bigint AS n FROM billing.usage_details d \
                 JOIN billing.transactions t ON t.id = d.transaction_id WHERE t.instance_id = '{id}'"
            ));
            (metered == posted && posted > 0).then_some(())
        })
        .await;
    }
}

/// The statement run for `host` up to `end` (now when None).
async fn run_statements(operator: &Client, host: &str, end: Option<&Value>) -> Value {
    let end = end
        .cloned()
        .unwrap_or_else(|| json!(chrono::Utc::now().to_rfc3339()));
    operator
        .run(
            &format!(
                "mutation($e: String, $h: ID) {{ runStatements(periodEnd: $e, hostTenantId: $h) {{ periodEnd statements {{ {STATEMENT} }} }} }}"
            ),
            json!({ "e": end, "h": host }),
        )
        .await
        .expect("runStatements")["runStatements"]
        .clone()
}

async fn run_payouts(operator: &Client, host: Option<&str>) -> Vec<Value> {
    operator
        .run(
            &format!(
                "mutation($h: ID) {{ runPayouts(hostTenantId: $h) {{ outcomes {{ hostTenantId outcome available reason payout {{ {PAYOUT} }} }} }} }}"
            ),
            json!({ "h": host }),
        )
        .await
        .expect("runPayouts")["runPayouts"]["outcomes"]
        .as_array()
        .expect("outcomes")
        .clone()
}

fn outcome_of<'a>(outcomes: &'a [Value], host: &str) -> &'a Value {
    outcomes
        .iter()
        .find(|o| o["hostTenantId"] == host)
        .unwrap_or_else(|| panic!("no outcome for {host} in {outcomes:?}"))
}

fn lines_for<'a>(statement: &'a Value, machine: &str) -> &'a Value {
    statement["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .find(|l| l["machineId"] == machine)
        .unwrap_or_else(|| panic!("no line for machine {machine}: {statement}"))
}

fn sql_refused(env: &TestEnv, sql: &str) -> bool {
    diesel::sql_query(sql).execute(&mut env.conn()).is_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_get_statements_and_are_paid_once_through_stripe_connect() {
    let stripe = StripeDouble::start(SECRET_KEY)
        .await
        .expect("Stripe double");
    let mut env = TestEnv::new().await;
    env.settlement_interval_ms(300);
    env.settings(|s: &mut billing::BillingSettings| {
        s.stripe_api_base = stripe.url.clone();
        s.stripe_secret_key = SECRET_KEY.into();
        s.payout_minimum = "0.10".into();
        s.payout_hold_seconds = 0;
        s.payout_interval_secs = 0;
    });
    env.settings(|s: &mut gateway::GatewaySettings| s.public_url = "https://market.test".into());
    // Billing on its own database role: the new tables must be granted to it.
    env.config.db_role_per_service = true;
    let stack = env.start(Parts::ALL).await;
    let api = Client::new(&stack.gateway_url);
    let (host, host_id) = sign_up(&api, &["HOST"]).await;
    // 999.97 an hour: a second earns 0.236... net, so the ledger holds
    // amounts far below the cent and payouts leave a residue.
    let m1 = listed_machine(&host, "RTX 4090", 1, "999.97").await;
    let m2 = listed_machine(&host, "RTX 4090", 1, "999.97").await;
    env.heartbeat_all();
    let (renter, renter_id) = sign_up(&api, &["RENTER"]).await;
    let operator = env.operator(&api).await;
    grant(&operator, &renter_id, "10000").await;
    let (idle_host, idle_host_id) = sign_up(&api, &["HOST"]).await;

    // Earnings from real rentals on both machines.
    let i1 = earn(&env, &renter, &m1, "pay-1").await;
    let i2 = earn(&env, &renter, &m2, "pay-2").await;
    stop_and_settle(&env, &renter, &[&i1, &i2]).await;
    let earned = earnings_balance(&env, &host_id);
    assert!(earned > Decimal::ZERO);

    // The statement: a line per machine, each the exact sum of its postings.
    let preview = host
        .run(
            &format!("{{ statementPreview {{ {STATEMENT} }} }}"),
            json!({}),
        )
        .await
        .expect("preview")["statementPreview"]
        .clone();
    assert_eq!(preview["status"], "draft");
    assert_eq!(dec(&preview["closingBalance"]), earned);
    assert_eq!(env.count("SELECT count(*) AS n FROM billing.statements"), 0);
    let run = run_statements(&operator, &host_id, None).await;
    let statements = run["statements"].as_array().expect("statements");
    assert_eq!(statements.len(), 1, "{run}");
    let s1 = statements[0].clone();
    assert_eq!(s1["number"], 1);
    assert_eq!(s1["status"], "finalized");
    let lines = s1["lines"].as_array().expect("lines");
    assert_eq!(lines.len(), 2, "{s1}");
    let mut lines_net = Decimal::ZERO;
    for machine in [&m1, &m2] {
        let line = lines
            .iter()
            .find(|l| l["machineId"] == machine.as_str())
            .unwrap_or_else(|| panic!("no line for machine {machine}: {s1}"));
        assert_eq!(line["meter"], "gpu");
        assert_eq!(line["gpuModel"], "RTX 4090");
        assert_eq!(line["earlierPeriod"], false);
        let net = machine_leg(&env, &host_id, machine, "host_earnings");
        let fee = machine_leg(&env, &host_id, machine, "platform_fee");
        let paid_by_renter = -machine_leg(&env, &host_id, machine, "renter_balance");
        assert_eq!(dec(&line["net"]), net);
        assert_eq!(dec(&line["fee"]), fee);
        assert_eq!(dec(&line["gross"]), paid_by_renter);
        assert_eq!(dec(&line["gross"]), net + fee);
        assert_eq!(dec(&line["downtimeCredits"]), Decimal::ZERO);
        assert_eq!(dec(&line["amount"]), net);
        assert!(line["seconds"].as_i64().expect("seconds") > 0);
        lines_net += net;
    }
    assert_eq!(lines_net, earned);
    assert_eq!(dec(&s1["earnings"]), earned);
    assert_eq!(dec(&s1["net"]), earned);
    assert_eq!(dec(&s1["openingBalance"]), Decimal::ZERO);
    assert_eq!(dec(&s1["closingBalance"]), earned);
    assert_eq!(dec(&s1["payouts"]), Decimal::ZERO);
    // Every earnings posting is on it, once.
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM billing.statement_items WHERE statement_id = '{}'",
            s1["id"].as_str().expect("id")
        )),
        env.count(&format!(
            "SELECT count(*) AS n FROM billing.entries e JOIN billing.accounts a ON a.id = e.account_id \
             WHERE a.kind = 'host_earnings' AND a.tenant_id = '{host_id}'"
        ))
    );
    // Finalizing again returns it; the host reads it; nobody else does.
    let again = run_statements(&operator, &host_id, Some(&s1["periodEnd"])).await;
    assert_eq!(again["statements"][0]["id"], s1["id"]);
    assert_eq!(again["statements"][0]["number"], 1);
    let listed = host
        .run("{ statements { id number } }", json!({}))
        .await
        .expect("statements")["statements"]
        .clone();
    assert_eq!(listed.as_array().map(Vec::len), Some(1));
    let one = host
        .run(
            &format!("query($id: ID!) {{ statement(id: $id) {{ {STATEMENT} }} }}"),
            json!({ "id": s1["id"] }),
        )
        .await
        .expect("statement")["statement"]
        .clone();
    assert_eq!(one, s1);
    let other = idle_host
        .run(
            "query($id: ID!) { statement(id: $id) { id } }",
            json!({ "id": s1["id"] }),
        )
        .await
        .expect_err("another host's statement");
    assert_eq!(other.code, "NOT_FOUND");
    let forbidden = renter
        .run("{ statements { id } }", json!({}))
        .await
        .expect_err("a renter has no statements");
    assert_eq!(forbidden.code, "FORBIDDEN");
    let not_operator = host
        .run(
            "mutation { runPayouts { outcomes { outcome } } }",
            json!({}),
        )
        .await
        .expect_err("a host cannot run payouts");
    assert_eq!(not_operator.code, "FORBIDDEN");
    // Immutable, as the database enforces.
    let s1_id = s1["id"].as_str().expect("id").to_owned();
    for sql in [
        format!("UPDATE billing.statements SET net = 0 WHERE id = '{s1_id}'"),
        format!("DELETE FROM billing.statements WHERE id = '{s1_id}'"),
        format!("UPDATE billing.statement_lines SET net = 0 WHERE statement_id = '{s1_id}'"),
        format!("DELETE FROM billing.statement_items WHERE statement_id = '{s1_id}'"),
    ] {
        assert!(sql_refused(&env, &sql), "{sql} was accepted");
    }

    // The connected account: made once at Stripe, however often asked for.
    assert_eq!(
        host.run("{ payoutAccount { stripeAccountId } }", json!({}))
            .await
            .expect("no account yet")["payoutAccount"],
        Value::Null
    );
    let create = "mutation { createPayoutAccount(country: \"us\", email: \"host@test.dev\") {
        stripeAccountId country email transfersStatus payoutsEnabled detailsSubmitted createdAt } }";
    let account =
        host.run(create, json!({})).await.expect("account")["createPayoutAccount"].clone();
    let acct = account["stripeAccountId"]
        .as_str()
        .expect("acct")
        .to_owned();
    assert!(acct.starts_with("acct_"), "{account}");
    assert_eq!(account["country"], "US");
    assert_eq!(account["transfersStatus"], "active");
    let repeat = host.run(create, json!({})).await.expect("repeat")["createPayoutAccount"].clone();
    assert_eq!(repeat["stripeAccountId"], acct.as_str());
    assert_eq!(stripe.created("/v1/accounts"), 1);
    let at_stripe = stripe.account(&acct).expect("account at Stripe");
    assert_eq!(at_stripe["metadata"]["host_tenant_id"], host_id.as_str());
    assert_eq!(at_stripe["type"], "express");
    assert_eq!(
        host.run(
            "{ payoutAccount { stripeAccountId transfersStatus } }",
            json!({})
        )
        .await
        .expect("account")["payoutAccount"]["stripeAccountId"],
        acct.as_str()
    );
    idle_host
        .run(
            "mutation { createPayoutAccount(country: \"DE\") { stripeAccountId } }",
            json!({}),
        )
        .await
        .expect("idle host's account");

    // Until onboarding activates the account's transfers, nothing is paid.
    stripe.set_transfers_capability(&acct, "pending");
    assert_eq!(
        host.run("{ payoutAccount { transfersStatus } }", json!({}))
            .await
            .expect("account")["payoutAccount"]["transfersStatus"],
        "pending"
    );
    let outcomes = run_payouts(&operator, Some(&host_id)).await;
    let waiting = outcome_of(&outcomes, &host_id);
    assert_eq!(waiting["outcome"], "skipped", "{waiting}");
    assert!(
        waiting["reason"]
            .as_str()
            .expect("reason")
            .contains("transfers capability: pending"),
        "{waiting}"
    );
    assert_eq!(stripe.created("/v1/transfers"), 0);

    // Onboarding: a link to Stripe's hosted page (the double's stand-in),
    // which sends the browser back to the portal under the public URL, never
    // a URL the client chose; once done, the account reads as active.
    let onboard = "mutation { createPayoutOnboardingLink { url expiresAt } }";
    let (no_account, _) = sign_up(&api, &["HOST"]).await;
    let refused = no_account
        .run(onboard, json!({}))
        .await
        .expect_err("no account");
    assert_eq!(refused.code, "NOT_FOUND", "{refused:?}");
    let link =
        host.run(onboard, json!({})).await.expect("link")["createPayoutOnboardingLink"].clone();
    let url = link["url"].as_str().expect("url").to_owned();
    assert!(url.starts_with(&stripe.url), "{link}");
    assert!(link["expiresAt"].as_str().is_some(), "{link}");
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let back = browser.get(&url).send().await.expect("onboarding page");
    assert_eq!(back.status(), 303);
    assert_eq!(
        back.headers()["location"],
        "https://market.test/portal/profile?payouts=done"
    );
    let used = browser.get(&url).send().await.expect("used link");
    assert_eq!(used.status(), 404, "an account link is single use");
    let onboarded = host
        .run(
            "{ payoutAccount { transfersStatus payoutsEnabled detailsSubmitted } }",
            json!({}),
        )
        .await
        .expect("account")["payoutAccount"]
        .clone();
    assert_eq!(
        onboarded,
        json!({"transfersStatus": "active", "payoutsEnabled": true, "detailsSubmitted": true})
    );

    // Payout 1: the floor of the earnings, in cents, once.
    let outcomes = run_payouts(&operator, None).await;
    let paid = outcome_of(&outcomes, &host_id);
    assert_eq!(paid["outcome"], "paid", "{paid}");
    assert_eq!(dec(&paid["available"]), earned);
    let p1 = paid["payout"].clone();
    let amount1 = dec(&p1["amount"]);
    assert_eq!(amount1, floor_cents(earned));
    assert_eq!(p1["status"], "paid");
    assert_eq!(p1["currency"], "USD");
    let p1_id = p1["id"].as_str().expect("payout id").to_owned();
    assert_eq!(p1["postingId"], format!("payout:{p1_id}"));
    let idle = outcome_of(&outcomes, &idle_host_id);
    assert_eq!(idle["outcome"], "skipped");
    assert!(
        idle["reason"].as_str().expect("reason").contains("minimum"),
        "{idle}"
    );
    let transfers = stripe.transfers();
    assert_eq!(transfers.len(), 1);
    assert_eq!(transfers[0]["id"], p1["stripeTransferId"]);
    assert_eq!(transfers[0]["destination"], acct.as_str());
    assert_eq!(transfers[0]["currency"], "usd");
    assert_eq!(
        Decimal::from(transfers[0]["amount"].as_i64().expect("amount")),
        amount1 * Decimal::from(100)
    );
    assert_eq!(transfers[0]["metadata"]["payout_id"], p1_id.as_str());
    assert_eq!(payout_postings(&env, &host_id), 1);
    let residue = earnings_balance(&env, &host_id);
    assert_eq!(residue, earned - amount1);
    assert!(residue >= Decimal::ZERO && residue < Decimal::new(1, 2));

    // A second run: the residue is below the minimum; nothing is paid.
    let outcomes = run_payouts(&operator, None).await;
    assert_eq!(outcome_of(&outcomes, &host_id)["outcome"], "skipped");
    assert_eq!(stripe.created("/v1/transfers"), 1);
    assert_eq!(payout_postings(&env, &host_id), 1);
    assert_eq!(earnings_balance(&env, &host_id), residue);

    // More earnings; a crash left a payout pending before Stripe was called.
    let i3 = earn(&env, &renter, &m1, "pay-3").await;
    stop_and_settle(&env, &renter, &[&i3]).await;
    let before_crash = earnings_balance(&env, &host_id);
    let amount2 = floor_cents(before_crash);
    assert!(amount2 >= Decimal::new(10, 2), "{before_crash}");
    let p2_id = Uuid::now_v7();
    env.exec(&format!(
        "INSERT INTO billing.payouts (id, host_tenant_id, stripe_account_id, amount, amount_minor, currency, status) \
         VALUES ('{p2_id}', '{host_id}', '{acct}', {amount2}, {}, 'USD', 'pending')",
        amount2 * Decimal::from(100)
    ));
    let outcomes = run_payouts(&operator, Some(&host_id)).await;
    let resumed = outcome_of(&outcomes, &host_id);
    assert_eq!(resumed["outcome"], "paid", "{resumed}");
    assert_eq!(resumed["payout"]["id"], p2_id.to_string());
    assert_eq!(dec(&resumed["payout"]["amount"]), amount2);
    assert_eq!(stripe.created("/v1/transfers"), 2);
    assert_eq!(payout_postings(&env, &host_id), 2);
    assert_eq!(earnings_balance(&env, &host_id), before_crash - amount2);
    let outcomes = run_payouts(&operator, Some(&host_id)).await;
    assert_eq!(outcome_of(&outcomes, &host_id)["outcome"], "skipped");
    assert_eq!(stripe.created("/v1/transfers"), 2);

    // A downtime credit for the first rental on machine 1 (as billing gets it
    // from ordering): taken from the host's earnings, shown on that
    // machine's line.
    let down = InstanceDowntime {
        instance_id: i1.parse().expect("uuid"),
        tenant_id: renter_id.parse().expect("uuid"),
        host_tenant_id: host_id.parse().expect("uuid"),
        machine_id: m1.parse().expect("uuid"),
        run_seq: 1,
        down_from: chrono::Utc::now() - chrono::Duration::seconds(2),
        down_until: chrono::Utc::now(),
        seconds: 2,
        price_per_hour: Decimal::from(9),
        currency: "USD".into(),
        ended_by: "host_back".into(),
    };
    let credit = contracts::money::rate(2, Decimal::from(9));
    let envelope = Envelope::new(
        contracts::events::kinds::INSTANCE_DOWNTIME,
        down.down_until,
        Some(down.tenant_id),
        None,
        &down,
    )
    .expect("envelope");
    let settings = billing::Settings::from_config(&env.config).expect("settings");
    env.conn()
        .transaction::<_, diesel::result::Error, _>(|c| {
            billing::apply_event(c, &envelope, &settings)
                .map_err(|e| diesel::result::Error::QueryBuilderError(e.to_string().into()))
        })
        .expect("downtime credit");
    let m1_net_since =
        machine_leg(&env, &host_id, &m1, "host_earnings") - dec(&lines_for(&s1, &m1)["net"]);

    // The next period's statement: the payouts, the new usage and the
    // downtime credit, carried on from statement 1's closing balance.
    let s2 = run_statements(&operator, &host_id, None).await["statements"][0].clone();
    assert_eq!(s2["number"], 2);
    assert_eq!(dec(&s2["openingBalance"]), earned);
    assert_eq!(dec(&s2["payouts"]), amount1 + amount2);
    assert_eq!(dec(&s2["closingBalance"]), earnings_balance(&env, &host_id));
    assert_eq!(s2["periodStart"], s1["periodEnd"]);
    assert_eq!(s2["lines"].as_array().map(Vec::len), Some(1), "{s2}");
    assert_eq!(s2["lines"][0]["machineId"], m1.as_str());
    assert_eq!(dec(&s2["lines"][0]["downtimeCredits"]), credit);
    assert_eq!(dec(&s2["lines"][0]["net"]), m1_net_since);
    assert_eq!(dec(&s2["lines"][0]["amount"]), m1_net_since - credit);
    assert_eq!(dec(&s2["downtimeCredits"]), credit);
    assert_eq!(
        dec(&s2["closingBalance"]),
        dec(&s2["openingBalance"]) + dec(&s2["earnings"]) + dec(&s2["adjustments"])
            - dec(&s2["payouts"])
    );

    // More earnings; Stripe refuses the transfer: the earnings stay.
    let i4 = earn(&env, &renter, &m2, "pay-4").await;
    stop_and_settle(&env, &renter, &[&i4]).await;
    let before_failure = earnings_balance(&env, &host_id);
    stripe.set_transfer_mode(TransferMode::Refuse);
    let outcomes = run_payouts(&operator, Some(&host_id)).await;
    let failed = outcome_of(&outcomes, &host_id);
    assert_eq!(failed["outcome"], "failed", "{failed}");
    assert_eq!(failed["payout"]["status"], "failed");
    assert!(
        failed["payout"]["failureReason"]
            .as_str()
            .expect("reason")
            .contains("balance_insufficient"),
        "{failed}"
    );
    assert_eq!(failed["payout"]["postingId"], Value::Null);
    assert_eq!(earnings_balance(&env, &host_id), before_failure);
    assert_eq!(payout_postings(&env, &host_id), 2);
    assert_eq!(stripe.created("/v1/transfers"), 2);

    // Stripe makes the transfer but its answer is lost: pending, then the
    // next run gets the same transfer back and posts it once.
    stripe.set_transfer_mode(TransferMode::LoseAnswerOnce);
    let outcomes = run_payouts(&operator, Some(&host_id)).await;
    let lost = outcome_of(&outcomes, &host_id).clone();
    assert_eq!(lost["outcome"], "pending", "{lost}");
    assert_eq!(stripe.created("/v1/transfers"), 3);
    assert_eq!(payout_postings(&env, &host_id), 2);
    assert_eq!(earnings_balance(&env, &host_id), before_failure);
    // And the retry comes after Stripe forgot the key (24 hours later): the
    // transfer is found by its group rather than made again.
    stripe.forget_idempotency_keys();
    let outcomes = run_payouts(&operator, Some(&host_id)).await;
    let recovered = outcome_of(&outcomes, &host_id);
    assert_eq!(recovered["outcome"], "paid", "{recovered}");
    assert_eq!(recovered["payout"]["id"], lost["payout"]["id"]);
    let amount3 = dec(&recovered["payout"]["amount"]);
    assert_eq!(amount3, floor_cents(before_failure));
    assert_eq!(stripe.created("/v1/transfers"), 3);
    let last = stripe.transfers().pop().expect("transfer");
    assert_eq!(recovered["payout"]["stripeTransferId"], last["id"]);
    assert_eq!(payout_postings(&env, &host_id), 3);
    assert_eq!(earnings_balance(&env, &host_id), before_failure - amount3);
    let outcomes = run_payouts(&operator, None).await;
    assert_eq!(outcome_of(&outcomes, &host_id)["outcome"], "skipped");
    assert_eq!(stripe.created("/v1/transfers"), 3);

    // What the host sees, newest first; the ledger agrees with Stripe.
    let list = host
        .run(&format!("{{ payouts {{ {PAYOUT} }} }}"), json!({}))
        .await
        .expect("payouts")["payouts"]
        .clone();
    let statuses: Vec<&str> = list
        .as_array()
        .expect("list")
        .iter()
        .map(|p| p["status"].as_str().expect("status"))
        .collect();
    assert_eq!(statuses, ["paid", "failed", "paid", "paid"]);
    // Each settled payout announced once, for the host's webhooks.
    assert_eq!(
        env.count(
            "SELECT count(*) AS n FROM billing.outbox WHERE routing_key = 'billing.payout.paid'"
        ),
        3
    );
    assert_eq!(
        env.count(
            "SELECT count(*) AS n FROM billing.outbox WHERE routing_key = 'billing.payout.failed'"
        ),
        1
    );
    // Each payout settles once: its one event is number 1 of the payout.
    assert_eq!(
        env.assert_sequenced(
            "billing",
            &["billing.payout.paid", "billing.payout.failed"],
            "'payout:' || (body->'payload'->>'payout_id')",
        ),
        4
    );
    let transferred: i64 = stripe
        .transfers()
        .iter()
        .map(|t| t["amount"].as_i64().expect("amount"))
        .sum();
    assert_eq!(
        Decimal::from(transferred),
        (amount1 + amount2 + amount3) * Decimal::from(100)
    );
    assert_eq!(
        sql_decimal(
            &env,
            "SELECT coalesce(sum(balance), 0) AS d FROM billing.accounts WHERE kind = 'payouts'"
        ),
        amount1 + amount2 + amount3
    );
    assert_eq!(
        sql_decimal(
            &env,
            "SELECT coalesce(sum(amount), 0) AS d FROM billing.entries"
        ),
        Decimal::ZERO
    );
    // A paid payout cannot be edited.
    assert!(sql_refused(
        &env,
        &format!("UPDATE billing.payouts SET amount = 1 WHERE id = '{p1_id}'")
    ));

    stack.stop().await;
    stripe.stop().await;
    // Every finalized statement announced once (hosts' webhooks).
    assert_eq!(
        env.count("SELECT count(*) AS n FROM billing.outbox WHERE routing_key = 'billing.statement.finalized'"),
        env.count("SELECT count(*) AS n FROM billing.statements WHERE status = 'finalized'"),
    );
    env.assert_sequenced(
        "billing",
        &["billing.statement.finalized"],
        "'statement:' || (body->'payload'->>'statement_id')",
    );
    env.cleanup().await;
}
