//! The security suite (`make security`; docs/security.md has the table):
//! bad JWTs and API keys, every id-taking field tried across tenants, query
//! bombs and oversized bodies, hostile text and numbers in inputs, and the
//! gateway's rate limit. Webhook forgery and replay are in `topups`.

use std::time::Duration;

use diesel::RunQueryDsl;
use gpumarket::client::Client;
use gpumarket::dev::Parts;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::harness::*;

fn b64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

/// A JWT with the given header and claims, HS256-signed with `secret`
/// (or unsigned when `secret` is None).
fn jwt(header: Value, claims: Value, secret: Option<&str>) -> String {
    let signing_input = format!(
        "{}.{}",
        b64url(header.to_string().as_bytes()),
        b64url(claims.to_string().as_bytes())
    );
    let signature = match secret {
        Some(secret) => {
            let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
            mac.update(signing_input.as_bytes());
            b64url(&mac.finalize().into_bytes())
        }
        None => String::new(),
    };
    format!("{signing_input}.{signature}")
}

/// The first error code of a response, or "OK".
async fn code_of(client: &Client, query: &str, variables: Value) -> String {
    match client.run(query, variables).await {
        Ok(_) => "OK".into(),
        Err(e) => e.code,
    }
}

async fn api_key(user: &Client, scopes: &[&str]) -> (String, String) {
    let data = user
        .run(
            "mutation($input: CreateApiKeyInput!) { createApiKey(input: $input) { apiKey { id } secret } }",
            json!({ "input": { "name": "sec", "scopes": scopes,
                               "idempotencyKey": uuid::Uuid::now_v7().to_string() } }),
        )
        .await
        .expect("createApiKey");
    (
        data["createApiKey"]["apiKey"]["id"]
            .as_str()
            .expect("id")
            .to_owned(),
        data["createApiKey"]["secret"]
            .as_str()
            .expect("secret")
            .to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_expired_unsigned_and_unknown_kid_tokens_are_unauthenticated() {
    let env = TestEnv::new().await;
    let stack = env.start(Parts::ALL).await;
    let api = Client::new(&stack.gateway_url);
    let (user, tenant, _) = sign_up_with_token(&api, &["RENTER"]).await;
    let me = user.run("{ me { userId } }", json!({})).await.unwrap();
    let user_id = me["me"]["userId"].as_str().unwrap().to_owned();
    let (kid, secret) = {
        let gateway = env.config.settings::<gateway::GatewaySettings>().unwrap();
        let (kid, secret) = &gateway.jwt_keys[0];
        (kid.clone(), secret.expose().to_owned())
    };
    let now = chrono::Utc::now().timestamp();
    let claims = |exp: i64| {
        json!({ "sub": user_id, "tid": tenant, "email": "x@test.dev", "roles": ["renter"],
                "op": true, "scopes": ["read", "rent", "host", "billing", "admin"],
                "iat": now - 10, "exp": exp })
    };
    let hs = |kid: &str| json!({ "alg": "HS256", "typ": "JWT", "kid": kid });

    // The harness's own forgery must be right: a well-made token works.
    let genuine = jwt(hs(&kid), claims(now + 600), Some(&secret));
    assert_eq!(
        code_of(
            &api.with_token(&genuine),
            "{ balance { amount } }",
            json!({})
        )
        .await,
        "OK"
    );

    let cases = [
        (
            "forged (wrong secret)",
            jwt(hs(&kid), claims(now + 600), Some("attacker-secret")),
        ),
        ("expired", jwt(hs(&kid), claims(now - 3600), Some(&secret))),
        (
            "alg none",
            jwt(
                json!({ "alg": "none", "typ": "JWT", "kid": kid }),
                claims(now + 600),
                None,
            ),
        ),
        (
            "unknown kid",
            jwt(hs("rotated-away"), claims(now + 600), Some(&secret)),
        ),
        (
            "no kid",
            jwt(json!({ "alg": "HS256" }), claims(now + 600), Some(&secret)),
        ),
        (
            "HS512",
            jwt(
                json!({ "alg": "HS512", "kid": kid }),
                claims(now + 600),
                Some(&secret),
            ),
        ),
        ("garbage", "not.a.jwt".to_owned()),
        ("truncated", genuine[..genuine.len() - 5].to_owned()),
    ];
    for (what, token) in cases {
        let client = api.with_token(&token);
        assert_eq!(
            code_of(&client, "{ balance { amount } }", json!({})).await,
            "UNAUTHENTICATED",
            "{what}"
        );
        // Nor may it change anything.
        assert_eq!(
            code_of(
                &client,
                "mutation($t: ID!) { grantCredit(tenantId: $t, amount: \"100\", idempotencyKey: \"x\", reason: \"x\") { amount } }",
                json!({ "t": tenant }),
            )
            .await,
            "UNAUTHENTICATED",
            "{what}"
        );
    }
    // Odd Authorization headers: not a crash, not a pass.
    let http = reqwest::Client::new();
    for header in [
        "Bearer",
        "Basic dXNlcjpwYXNz",
        "Bearer \u{0}",
        "bearer gpm_nope",
    ] {
        let resp = http
            .post(format!("{}/graphql", stack.gateway_url))
            .header("Authorization", header.replace('\u{0}', ""))
            .json(&json!({ "query": "{ balance { amount } }" }))
            .send()
            .await
            .unwrap();
        let body: Value = resp.json().await.unwrap();
        assert_eq!(
            body["errors"][0]["extensions"]["code"], "UNAUTHENTICATED",
            "{header}: {body}"
        );
    }
    assert_eq!(
        env.count("SELECT count(*) AS n FROM billing.transactions"),
        0,
        "no credit was granted"
    );
    drop(stack);
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_and_made_up_api_keys_are_unauthenticated() {
    let env = TestEnv::new().await;
    let stack = env.start(Parts::ALL).await;
    let api = Client::new(&stack.gateway_url);
    let (user, _) = sign_up(&api, &["RENTER"]).await;
    let (key_id, secret) = api_key(&user, &["READ"]).await;
    let keyed = api.with_token(&secret);
    assert_eq!(
        code_of(&keyed, "{ balance { amount } }", json!({})).await,
        "OK"
    );

    // A key that differs in one character, and one made up.
    let mut altered = secret.clone();
    let last = altered.pop().unwrap();
    altered.push(if last == 'a' { 'b' } else { 'a' });
    for token in [altered, "gpm_0000000000000000000000000000".to_owned()] {
        assert_eq!(
            code_of(&api.with_token(&token), "{ balance { amount } }", json!({})).await,
            "UNAUTHENTICATED"
        );
    }
    // A READ key cannot do what READ does not allow.
    assert_eq!(
        code_of(
            &keyed,
            "mutation { createTopUp(amount: \"10\", idempotencyKey: \"k\") { id } }",
            json!({}),
        )
        .await,
        "FORBIDDEN"
    );
    env.exec(&format!(
        "UPDATE quota.api_keys SET revoked_at = now() WHERE id = '{key_id}'"
    ));
    assert_eq!(
        code_of(&keyed, "{ balance { amount } }", json!({})).await,
        "UNAUTHENTICATED"
    );
    drop(stack);
    env.cleanup().await;
}

const LIST_KEYS: &str = "query($r: Boolean!) { apiKeys(includeRevoked: $r) { id name prefix scopes ownerEmail createdAt lastUsedAt revokedAt rotatedFrom } }";
const REVOKE_KEY: &str = "mutation($id: ID!) { revokeApiKey(id: $id) { id revokedAt } }";

async fn key_ids(client: &Client, include_revoked: bool) -> Vec<String> {
    let data = client
        .run(LIST_KEYS, json!({ "r": include_revoked }))
        .await
        .expect("apiKeys");
    data["apiKeys"]
        .as_array()
        .expect("keys")
        .iter()
        .map(|k| k["id"].as_str().expect("id").to_owned())
        .collect()
}

/// Adds a user to a tenant with a role, and logs it in (quota has no
/// invitation flow yet; the fixture writes the row a sign-up would).
async fn member(env: &TestEnv, api: &Client, owner: &Client, role: &str) -> Client {
    let me = owner
        .run("{ me { tenantId } }", json!({}))
        .await
        .expect("me");
    let tenant = me["me"]["tenantId"].as_str().expect("tenant").to_owned();
    let owner_email: String = {
        #[derive(diesel::QueryableByName)]
        struct E {
            #[diesel(sql_type = diesel::sql_types::Text)]
            email: String,
        }
        let rows: Vec<E> = diesel::sql_query(format!(
            "SELECT email FROM quota.users WHERE tenant_id = '{tenant}' LIMIT 1"
        ))
        .load(&mut env.conn())
        .expect("owner");
        rows[0].email.clone()
    };
    let email = format!("{role}-{}@test.dev", uuid::Uuid::now_v7().simple());
    // The owner's password hash, so the member logs in with the harness's password.
    env.exec(&format!(
        "INSERT INTO quota.users (id, tenant_id, email, password_hash, role, is_operator)
         SELECT '{}', tenant_id, '{email}', password_hash, '{role}', false
         FROM quota.users WHERE email = '{owner_email}'",
        uuid::Uuid::now_v7()
    ));
    login(api, &email).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_are_listed_revoked_and_rotated_by_their_tenant_only() {
    let env = TestEnv::new().await;
    let stack = env.start(Parts::SERVICES).await;
    let api = Client::new(&stack.gateway_url);
    let (owner, _) = sign_up(&api, &["RENTER"]).await;
    let (stranger, _) = sign_up(&api, &["RENTER"]).await;
    let (read_id, read_secret) = api_key(&owner, &["READ"]).await;
    let (full_id, full_secret) = api_key(&owner, &["READ", "RENT", "BILLING"]).await;
    let read_key = api.with_token(&read_secret);
    let full_key = api.with_token(&full_secret);

    // Listed newest first, with what identifies them and never a secret.
    let listed = owner.run(LIST_KEYS, json!({ "r": false })).await.unwrap();
    let keys = listed["apiKeys"].as_array().unwrap();
    assert_eq!(keys.len(), 2, "{listed}");
    assert_eq!(keys[0]["id"], full_id.as_str());
    assert_eq!(keys[1]["id"], read_id.as_str());
    assert_eq!(keys[1]["scopes"], json!(["READ"]));
    assert!(read_secret.starts_with(&format!("gpm_{}_", keys[1]["prefix"].as_str().unwrap())));
    assert!(keys[1]["lastUsedAt"].is_null());
    assert!(keys[1]["revokedAt"].is_null());
    assert!(!listed.to_string().contains(&read_secret[13..]));

    // Using a key records it, at most once a minute.
    assert_eq!(
        code_of(&read_key, "{ balance { amount } }", json!({})).await,
        "OK"
    );
    let used = |env: &TestEnv| {
        env.count(&format!(
            "SELECT (extract(epoch FROM last_used_at) * 1000000)::bigint AS n FROM quota.api_keys WHERE id = '{read_id}'"
        ))
    };
    let first_use = used(&env);
    assert!(first_use > 0);
    assert_eq!(
        code_of(&read_key, "{ balance { amount } }", json!({})).await,
        "OK"
    );
    assert_eq!(
        used(&env),
        first_use,
        "a second use within the minute wrote"
    );
    let listed = owner.run(LIST_KEYS, json!({ "r": false })).await.unwrap();
    assert!(listed["apiKeys"][1]["lastUsedAt"].is_string(), "{listed}");

    // Another tenant sees none of them, and its revocation of one answers as
    // a made-up id does, and revokes nothing.
    assert!(key_ids(&stranger, true).await.is_empty());
    for id in [read_id.clone(), uuid::Uuid::now_v7().to_string()] {
        assert_eq!(
            code_of(&stranger, REVOKE_KEY, json!({ "id": id })).await,
            "NOT_FOUND"
        );
        assert_eq!(
            code_of(
                &stranger,
                "mutation($id: ID!) { rotateApiKey(id: $id, idempotencyKey: \"x\") { secret } }",
                json!({ "id": id })
            )
            .await,
            "NOT_FOUND"
        );
    }
    assert_eq!(
        code_of(&read_key, "{ balance { amount } }", json!({})).await,
        "OK"
    );

    // A READ key may not revoke a key that can do more than itself.
    assert_eq!(
        code_of(&read_key, REVOKE_KEY, json!({ "id": full_id })).await,
        "FORBIDDEN"
    );
    assert_eq!(
        code_of(&full_key, "{ balance { amount } }", json!({})).await,
        "OK"
    );

    // Revoked: the very next request with it is UNAUTHENTICATED.
    let revoked = full_key
        .run(REVOKE_KEY, json!({ "id": read_id }))
        .await
        .unwrap();
    assert!(revoked["revokeApiKey"]["revokedAt"].is_string());
    assert_eq!(
        code_of(&read_key, "{ balance { amount } }", json!({})).await,
        "UNAUTHENTICATED"
    );
    // Revoking again changes nothing; the list hides it unless asked.
    let again = owner
        .run(REVOKE_KEY, json!({ "id": read_id }))
        .await
        .unwrap();
    assert_eq!(
        again["revokeApiKey"]["revokedAt"],
        revoked["revokeApiKey"]["revokedAt"]
    );
    assert_eq!(key_ids(&owner, false).await, vec![full_id.clone()]);
    assert_eq!(
        key_ids(&owner, true).await,
        vec![full_id.clone(), read_id.clone()]
    );

    // Rotation: a new secret for the same name and scopes; the old one stops.
    let rotated = owner
        .run(
            "mutation($id: ID!) { rotateApiKey(id: $id, idempotencyKey: \"rot-1\") { secret apiKey { id name scopes rotatedFrom } } }",
            json!({ "id": full_id }),
        )
        .await
        .expect("rotateApiKey")["rotateApiKey"]
        .clone();
    assert_eq!(rotated["apiKey"]["rotatedFrom"], full_id.as_str());
    assert_eq!(rotated["apiKey"]["name"], "sec");
    assert_eq!(
        rotated["apiKey"]["scopes"],
        json!(["READ", "RENT", "BILLING"])
    );
    let new_key = api.with_token(rotated["secret"].as_str().expect("secret"));
    assert_eq!(
        code_of(&new_key, "{ balance { amount } }", json!({})).await,
        "OK"
    );
    assert_eq!(
        code_of(&full_key, "{ balance { amount } }", json!({})).await,
        "UNAUTHENTICATED"
    );
    // A revoked key cannot be rotated back to life.
    assert_eq!(
        code_of(
            &owner,
            "mutation($id: ID!) { rotateApiKey(id: $id, idempotencyKey: \"rot-2\") { secret } }",
            json!({ "id": read_id })
        )
        .await,
        "CONFLICT"
    );

    // Within a tenant: a member sees and revokes only its own keys; an admin
    // sees and revokes every key, but rotates only its own.
    let plain = member(&env, &api, &owner, "member").await;
    let admin = member(&env, &api, &owner, "admin").await;
    let (plain_id, plain_secret) = api_key(&plain, &["READ"]).await;
    let owners_key = rotated["apiKey"]["id"].as_str().unwrap().to_owned();
    assert_eq!(key_ids(&plain, false).await, vec![plain_id.clone()]);
    assert_eq!(
        code_of(&plain, REVOKE_KEY, json!({ "id": owners_key })).await,
        "NOT_FOUND"
    );
    assert_eq!(
        key_ids(&admin, false).await,
        vec![plain_id.clone(), owners_key.clone()]
    );
    assert_eq!(
        code_of(
            &admin,
            "mutation($id: ID!) { rotateApiKey(id: $id, idempotencyKey: \"rot-3\") { secret } }",
            json!({ "id": plain_id })
        )
        .await,
        "FORBIDDEN"
    );
    admin
        .run(REVOKE_KEY, json!({ "id": plain_id }))
        .await
        .expect("admin revokes");
    assert_eq!(
        code_of(
            &api.with_token(&plain_secret),
            "{ me { email } }",
            json!({})
        )
        .await,
        "UNAUTHENTICATED"
    );
    assert_eq!(
        code_of(&new_key, "{ balance { amount } }", json!({})).await,
        "OK"
    );
    drop(stack);
    env.cleanup().await;
}

/// What changes when someone acts on a tenant's things: listing, prices,
/// instance states, rules, quotas, profiles, keys and agent tokens.
fn snapshot(env: &TestEnv) -> String {
    #[derive(diesel::QueryableByName)]
    struct S {
        #[diesel(sql_type = diesel::sql_types::Text)]
        s: String,
    }
    let sql = "SELECT coalesce(string_agg(x, '|' ORDER BY x), '') AS s FROM (
        SELECT 'm' || id || listed || price_per_gpu_hour || name || updated_at AS x FROM catalog.machines
        UNION ALL SELECT 'i' || id || state || updated_at FROM ordering.instances
        UNION ALL SELECT 'r' || instance_id || updated_at FROM ordering.instance_rules
        UNION ALL SELECT 'q' || tenant_id || updated_at FROM quota.tenant_quotas
        UNION ALL SELECT 'h' || tenant_id || updated_at FROM catalog.host_profiles
        UNION ALL SELECT 'k' || id || coalesce(revoked_at::text, '') FROM quota.api_keys
        UNION ALL SELECT 't' || id FROM quota.teams
        UNION ALL SELECT 'o' || count(*) FROM ordering.orders
    ) s";
    let rows: Vec<S> = diesel::sql_query(sql).load(&mut env.conn()).expect(sql);
    rows.into_iter().next().map(|r| r.s).unwrap_or_default()
}

/// The answer as an attacker sees it, with the probed id blanked out so an
/// answer that only echoes the id compares equal.
async fn outcome(client: &Client, query: &str, variables: Value, id: &str) -> String {
    match client.raw(query, variables).await {
        Ok(body) => {
            let normalized = match body["errors"].as_array().and_then(|e| e.first()) {
                Some(error) => format!("error {}", error["extensions"]["code"]),
                None => body["data"].to_string(),
            };
            normalized.replace(id, "<id>")
        }
        Err(e) => format!("transport {}", e.code),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_ids_answer_as_nonexistent_ones_and_change_nothing() {
    let env = TestEnv::new().await;
    let r = rental(env, Parts::ALL, "RTX 4090", 4, "0.50", "100").await;
    let api = Client::new(&r.stack.gateway_url);
    let victim = &r.renter;
    let instance = running_instance(victim, &r.offer, 1, "victim-1").await;
    let machine = r.offer.clone();
    let victim_tenant = r.tenant.clone();
    let team = victim
        .run(
            "mutation($input: CreateTeamInput!) { createTeam(input: $input) { id } }",
            json!({ "input": { "name": "victims", "idempotencyKey": "team-1" } }),
        )
        .await
        .expect("createTeam")["createTeam"]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // The attacker is a renter and a host of its own, with a JWT and with
    // an API key carrying every scope its roles allow.
    let (attacker, _) = sign_up(&api, &["RENTER", "HOST"]).await;
    let (_, secret) = api_key(&attacker, &["READ", "RENT", "HOST", "BILLING"]).await;
    let attackers = [
        ("jwt", attacker.clone()),
        ("api key", api.with_token(&secret)),
    ];

    // Every Query and Mutation field that takes an id, given the victim's.
    let instance_probes: Vec<&str> = vec![
        "query($id: ID!) { instance(id: $id) { id status } }",
        "query($id: ID!) { usage(instanceId: $id) { id } }",
        "query($id: ID!) { instanceRules(instanceId: $id) { maxDurationSeconds } }",
        "mutation($id: ID!) { stopInstance(id: $id) { id status } }",
        "mutation($id: ID!) { startInstance(id: $id) { id status } }",
        "mutation($id: ID!) { destroyInstance(id: $id) { id status } }",
        "mutation($id: ID!) { setInstanceRules(instanceId: $id, rules: { maxDurationSeconds: 60 }) { maxDurationSeconds } }",
    ];
    let machine_probes: Vec<&str> = vec![
        "query($id: ID!) { heartbeatGaps(machineId: $id) { startedAt } }",
        "mutation($id: ID!) { setMachinePricing(machineId: $id, pricePerGpuHour: \"0.01\") { id } }",
        "mutation($id: ID!) { rotateAgentToken(machineId: $id) { agentToken } }",
        "mutation($id: ID!) { revokeAgentToken(machineId: $id) }",
        "mutation($id: ID!) { listMachine(machineId: $id) { id } }",
        "mutation($id: ID!) { unlistMachine(machineId: $id) { id } }",
        "mutation($id: ID!) { deleteMachine(machineId: $id) }",
        "mutation($id: ID!) { setGpuMode(input: { machineId: $id, gpuIndex: 0, mode: MIG_AUTO }) { index } }",
        "mutation($id: ID!) { setMigPrices(input: { machineId: $id, prices: [{ profile: \"3g.40gb\", pricePerHour: \"0.5\" }] }) { profile } }",
    ];
    let tenant_probes: Vec<&str> = vec![
        "query($id: ID) { tenantQuota(tenantId: $id) { maxGpus } }",
        "query($id: ID) { hostProfile(tenantId: $id) { legalName } }",
        "query($id: ID) { balanceHistory(tenantId: $id) { currency } }",
        "query($id: ID) { usageSeries(bucket: DAY, groupBy: INSTANCE, from: \"2026-01-01T00:00:00Z\", to: \"2027-01-01T00:00:00Z\", tenantId: $id) { totalSeconds } }",
        "query($id: ID) { earningsByMachine(from: \"2026-01-01T00:00:00Z\", to: \"2027-01-01T00:00:00Z\", tenantId: $id) { totalGross } }",
        "mutation($id: ID!) { setTenantQuota(tenantId: $id, maxGpus: 1000) { maxGpus } }",
        "mutation($id: ID!) { setHostVerification(tenantId: $id, verification: VERIFIED, reason: \"x\") { verification } }",
        "mutation($id: ID!) { grantCredit(tenantId: $id, amount: \"1000\", idempotencyKey: \"x\", reason: \"x\") { amount } }",
        "mutation($id: ID) { runInvoices(tenantId: $id) { __typename } }",
        "mutation($id: ID) { runStatements(hostTenantId: $id) { __typename } }",
        "mutation($id: ID) { runPayouts(hostTenantId: $id) { __typename } }",
    ];
    let team_probes: Vec<&str> =
        vec!["mutation($id: ID!) { setTeamQuota(teamId: $id, limits: { maxGpus: 1000 }) { id } }"];
    let (victim_key, _) = api_key(victim, &["READ"]).await;
    let key_probes: Vec<&str> = vec![
        "mutation($id: ID!) { revokeApiKey(id: $id) { id } }",
        "mutation($id: ID!) { rotateApiKey(id: $id, idempotencyKey: \"x\") { secret } }",
    ];
    // Ids of things the victim has none of yet: still, a real-looking id
    // of the victim's tenant must not pass where a random one fails.
    let other_probes: Vec<&str> = vec![
        "query($id: ID!) { invoice(id: $id) { id } }",
        "query($id: ID!) { invoiceUsageCsv(invoiceId: $id) }",
        "query($id: ID!) { statement(id: $id) { id } }",
        "mutation($id: ID!) { markInvoicePaid(id: $id) { id } }",
        "mutation($id: ID!) { issueCreditNote(invoiceId: $id, amount: \"1\", reason: \"x\", idempotencyKey: \"x\") { id } }",
        "mutation($id: ID!) { voidInvoice(id: $id, reason: \"x\") { id } }",
    ];

    let before = snapshot(&r.env);
    let mut probes = 0;
    for (how, client) in &attackers {
        for (real, list) in [
            (&instance, &instance_probes),
            (&machine, &machine_probes),
            (&victim_tenant, &tenant_probes),
            (&team, &team_probes),
            (&victim_key, &key_probes),
            (&victim_tenant, &other_probes),
        ] {
            for query in list.iter() {
                let random = uuid::Uuid::now_v7().to_string();
                let theirs = outcome(client, query, json!({ "id": real }), real).await;
                let nobodys = outcome(client, query, json!({ "id": random }), &random).await;
                assert_eq!(
                    theirs, nobodys,
                    "{how}: {query}: the victim's id answers differently from a random one"
                );
                // A typo in a probe would make both answers VALIDATION and
                // the comparison meaningless.
                assert!(
                    !theirs.contains("VALIDATION") && !theirs.contains("VERIFIED"),
                    "{how}: {query}: {theirs}"
                );
                probes += 1;
            }
        }
        // Lists show only the attacker's own.
        let mine = client
            .run(
                "{ instances { id } myMachines { id } teams { id } invoices { id } topUps { id } }",
                json!({}),
            )
            .await
            .unwrap();
        let text = mine.to_string();
        for id in [&instance, &machine, &team] {
            assert!(!text.contains(id.as_str()), "{how}: {text}");
        }
        let keys = client
            .run("{ apiKeys(includeRevoked: true) { id } }", json!({}))
            .await
            .unwrap();
        assert!(
            !keys.to_string().contains(victim_key.as_str()),
            "{how}: {keys}"
        );
    }
    assert!(probes >= 60, "{probes}");
    assert_eq!(snapshot(&r.env), before, "an attacker's call changed state");

    // And the victim still has everything, unchanged.
    assert_eq!(
        instance_status(victim, &instance).await["status"],
        "running"
    );
    let offers = victim
        .run(
            "{ offers(first: 50) { nodes { id pricePerGpuHour } } }",
            json!({}),
        )
        .await
        .unwrap();
    assert!(offers.to_string().contains(&machine), "{offers}");
    assert!(!offers.to_string().contains("\"0.01\""), "{offers}");
    drop(r.stack);
    r.env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_bombs_and_oversized_bodies_are_refused_cheaply() {
    let env = TestEnv::new().await;
    let stack = env.start(Parts::ALL).await;
    let api = Client::new(&stack.gateway_url);
    let (user, _, token) = sign_up_with_token(&api, &["RENTER"]).await;
    let http = reqwest::Client::new();
    let url = format!("{}/graphql", stack.gateway_url);
    let post = |body: Value| {
        http.post(&url)
            .bearer_auth(&token)
            .json(&body)
            .timeout(Duration::from_secs(10))
            .send()
    };

    // Aliases: thousands of copies of one field.
    let aliases: String = (0..1500)
        .map(|i| format!("a{i}: balance {{ amount }} "))
        .collect();
    let started = std::time::Instant::now();
    let body: Value = post(json!({ "query": format!("{{ {aliases} }}") }))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(body["data"].is_null(), "{body}");
    assert_eq!(
        body["errors"][0]["extensions"]["code"], "VALIDATION",
        "{body}"
    );
    assert!(
        body["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("complex"),
        "{body}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));

    // Depth: the schema's types nest (instance -> events ...); an
    // introspection query nested past the limit.
    let mut deep = String::from("name");
    for _ in 0..20 {
        deep = format!("ofType {{ {deep} }}");
    }
    let body: Value = post(json!({ "query": format!("{{ __type(name: \"Instance\") {{ fields {{ type {{ {deep} }} }} }} }}") }))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(body["data"].is_null(), "{body}");
    assert!(
        body["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("nested too deep"),
        "{body}"
    );

    // Fragments that expand exponentially.
    let mut fragments = String::from("fragment f0 on Money { amount currency }\n");
    for i in 1..30 {
        let p = i - 1;
        fragments.push_str(&format!(
            "fragment f{i} on Money {{ ...f{p} a{i}: amount ...f{p} }}\n"
        ));
    }
    let body: Value = post(json!({ "query": format!("{{ balance {{ ...f29 }} }}\n{fragments}") }))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(body["data"].is_null(), "{body}");
    assert!(
        body["errors"][0]["extensions"]["code"].is_string(),
        "{body}"
    );

    // A body over the limit is refused before it is parsed.
    let huge = "x".repeat(1024 * 1024);
    let resp = post(json!({ "query": "{ balance { amount } }", "variables": { "pad": huge } }))
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);

    // Not JSON, or not a GraphQL request: 400 with a code.
    for raw in ["{", "null", "{\"query\": 5}", "\"query\""] {
        let resp = http
            .post(&url)
            .header("content-type", "application/json")
            .body(raw)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400, "{raw}");
        let body: Value = resp.json().await.unwrap();
        assert!(
            body["errors"][0]["extensions"]["code"].is_string(),
            "{body}"
        );
    }

    // The gateway is still fine.
    assert_eq!(
        code_of(&user, "{ balance { amount } }", json!({})).await,
        "OK"
    );
    drop(stack);
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_text_and_numbers_are_validation_errors_or_stored_verbatim() {
    let env = TestEnv::new().await;
    let r = rental(env, Parts::ALL, "RTX 4090", 4, "0.50", "100").await;
    let api = Client::new(&r.stack.gateway_url);
    let (host, _) = sign_up(&api, &["HOST"]).await;
    let machine = listed_machine(&host, "RTX 4090", 2, "0.40").await;

    let bad_decimals = [
        "abc",
        "NaN",
        "-0.01",
        "0x10",
        "1,5",
        "99999999999999999999999999999999999999",
        "0.0000000000000000000000000000001",
        "",
        " 1",
        "١٢",
    ];
    for bad in bad_decimals {
        let code = code_of(
            &host,
            "mutation($id: ID!, $p: Decimal!) { setMachinePricing(machineId: $id, pricePerGpuHour: $p) { id } }",
            json!({ "id": machine, "p": bad }),
        )
        .await;
        assert_eq!(code, "VALIDATION", "price {bad:?}");
        let code = code_of(
            &r.operator,
            "mutation($t: ID!, $a: Decimal!) { grantCredit(tenantId: $t, amount: $a, idempotencyKey: \"k\", reason: \"x\") { amount } }",
            json!({ "t": r.tenant, "a": bad }),
        )
        .await;
        assert_eq!(code, "VALIDATION", "grant {bad:?}");
    }
    // Huge and negative integers.
    for gpus in [
        json!(-1),
        json!(0),
        json!(2_147_483_647),
        json!(1e20),
        json!("4"),
    ] {
        let code = code_of(
            &r.renter,
            "mutation($input: CreateOrderInput!) { createOrder(input: $input) { id } }",
            json!({ "input": { "offerId": r.offer, "gpuCount": gpus, "idempotencyKey": uuid::Uuid::now_v7().to_string(),
                               "sshPublicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpumarketTestKey t@g" } }),
        )
        .await;
        assert_ne!(code, "OK", "gpuCount {gpus}");
        assert_ne!(code, "INTERNAL", "gpuCount {gpus}");
    }
    // Ids that are not ids.
    for id in [
        "",
        "1 OR 1=1",
        "'; DROP TABLE catalog.machines; --",
        "../../etc/passwd",
    ] {
        let code = code_of(
            &r.renter,
            "query($id: ID!) { instance(id: $id) { id } }",
            json!({ "id": id }),
        )
        .await;
        assert!(
            code == "VALIDATION" || code == "NOT_FOUND",
            "{id:?}: {code}"
        );
    }

    // Text: injection, markup, control characters, RTL overrides, emoji,
    // very long. Each is refused as VALIDATION or stored and read back
    // exactly; never INTERNAL.
    let hostile = [
        "'; DROP TABLE catalog.machines; --",
        "\" OR \"1\"=\"1",
        "<script>alert(1)</script>",
        "${jndi:ldap://x}",
        "{{7*7}}",
        "rig\u{202e}gpj.exe",
        "ꜱᴍᴀʟʟ 🚀 機械 Ñandú",
        "tab\tnew\nline",
        "nul\u{0}byte",
        "\u{feff}bom",
    ];
    let long = "x".repeat(100_000);
    let mut texts: Vec<&str> = hostile.to_vec();
    texts.push(&long);
    for text in texts {
        let result = host
            .run(
                "mutation($input: RegisterMachineInput!) { registerMachine(input: $input) { machine { id name } } }",
                json!({ "input": {
                    "name": text, "gpuModel": "RTX 4090", "gpuCount": 1, "vramGib": 24,
                    "cpuCores": 8, "ramGib": 32, "diskGib": 100, "country": "US",
                    "idempotencyKey": uuid::Uuid::now_v7().to_string(),
                }}),
            )
            .await;
        match result {
            Ok(data) => assert_eq!(
                data["registerMachine"]["machine"]["name"], text,
                "machine name stored verbatim"
            ),
            Err(e) => assert_eq!(e.code, "VALIDATION", "{text:?}: {}", e.message),
        }
        let result = r
            .renter
            .run(
                "mutation($input: CreateTeamInput!) { createTeam(input: $input) { name } }",
                json!({ "input": { "name": text, "idempotencyKey": uuid::Uuid::now_v7().to_string() } }),
            )
            .await;
        match result {
            Ok(data) => assert_eq!(data["createTeam"]["name"], text),
            Err(e) => assert_eq!(e.code, "VALIDATION", "team {text:?}: {}", e.message),
        }
        let code = code_of(
            &r.renter,
            "{ offers(query: $q) { nodes { id } } }"
                .replace("$q", &serde_json::to_string(text).unwrap())
                .as_str(),
            json!({}),
        )
        .await;
        assert!(
            code == "OK" || code == "VALIDATION",
            "offers query {text:?}: {code}"
        );
        let code = code_of(
            &api,
            "mutation($e: String!, $p: String!) { login(email: $e, password: $p) { token } }",
            json!({ "e": text, "p": text }),
        )
        .await;
        assert!(
            code == "UNAUTHENTICATED" || code == "VALIDATION",
            "login {text:?}: {code}"
        );
    }
    // The tables the injections named are still there.
    assert!(r.env.count("SELECT count(*) AS n FROM catalog.machines") >= 2);
    drop(r.stack);
    r.env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_rate_limits_each_caller_with_429_and_retry_after() {
    let mut env = TestEnv::new().await;
    env.settings(|s: &mut gateway::GatewaySettings| {
        s.rate_limit_per_minute = 60;
        s.rate_limit_burst = 5;
    });
    let stack = env.start(Parts::ALL).await;
    let api = Client::new(&stack.gateway_url);
    let http = reqwest::Client::new();
    let url = format!("{}/graphql", stack.gateway_url);
    let (user, _, token) = sign_up_with_token(&api, &["RENTER"]).await;
    let (_, secret) = api_key(&user, &["READ"]).await;

    let send = |credential: Option<String>| {
        let mut req = http
            .post(&url)
            .json(&json!({ "query": "{ gpuModels { name } }" }));
        if let Some(c) = credential {
            req = req.bearer_auth(c);
        }
        req.send()
    };
    // Sign-up and key creation took from the anonymous and the token's
    // buckets: drain each and expect the 429.
    // Each caller is served before its own 429, whatever the others did:
    // the buckets are per caller.
    for credential in [Some(secret.clone()), Some(token.clone()), None] {
        let mut limited = None;
        let mut served = 0;
        for _ in 0..10 {
            let resp = send(credential.clone()).await.unwrap();
            if resp.status() == 429 {
                limited = Some(resp);
                break;
            }
            assert_eq!(resp.status(), 200);
            served += 1;
        }
        assert!(served >= 1, "a caller paid for another's requests");
        let resp = limited.expect("no 429 within the burst");
        let retry: u64 = resp
            .headers()
            .get("retry-after")
            .expect("Retry-After")
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=60).contains(&retry), "{retry}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(
            body["errors"][0]["extensions"]["code"], "RATE_LIMITED",
            "{body}"
        );
    }
    // After Retry-After, the caller is served again.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(send(Some(secret)).await.unwrap().status(), 200);
    drop(stack);
    env.cleanup().await;
}

/// Found by the hostile-client review: a key could create keys of its own
/// scopes, and those outlived its revocation, so a leaked key left working
/// keys behind. Revoking a key now revokes every key made with it (or with
/// a key it replaced), however deep, rotations included; keys made by a
/// login stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_a_key_revokes_the_keys_made_with_it() {
    let env = TestEnv::new().await;
    let stack = env.start(Parts::SERVICES).await;
    let api = Client::new(&stack.gateway_url);
    let (owner, _) = sign_up(&api, &["RENTER"]).await;
    let (leaked_id, leaked) = api_key(&owner, &["READ", "RENT"]).await;
    let (_, by_login) = api_key(&owner, &["READ"]).await;
    let leaked = api.with_token(&leaked);
    // What a thief does with the key: a child, a grandchild, and a rotation
    // of the child (its replacement answers to the same key).
    let (child_id, child) = api_key(&leaked, &["READ", "RENT"]).await;
    let child = api.with_token(&child);
    let (_, grandchild) = api_key(&child, &["READ"]).await;
    let rotated = child
        .run(
            "mutation($id: ID!) { rotateApiKey(id: $id, idempotencyKey: \"r1\") { secret } }",
            json!({ "id": child_id }),
        )
        .await
        .expect("rotate the child");
    let rotated = rotated["rotateApiKey"]["secret"]
        .as_str()
        .expect("secret")
        .to_owned();
    let (_, by_rotated) = api_key(&api.with_token(&rotated), &["READ"]).await;
    let balance = "{ balance { amount } }";
    for secret in [&grandchild, &rotated, &by_rotated, &by_login] {
        assert_eq!(
            code_of(&api.with_token(secret), balance, json!({})).await,
            "OK"
        );
    }

    assert_eq!(
        code_of(&owner, REVOKE_KEY, json!({ "id": leaked_id })).await,
        "OK"
    );
    assert_eq!(
        code_of(&leaked, balance, json!({})).await,
        "UNAUTHENTICATED"
    );
    for secret in [&grandchild, &rotated, &by_rotated] {
        assert_eq!(
            code_of(&api.with_token(secret), balance, json!({})).await,
            "UNAUTHENTICATED",
            "a key made with the revoked one still works"
        );
    }
    assert_eq!(
        code_of(&api.with_token(&by_login), balance, json!({})).await,
        "OK",
        "a key made by a login is not the revoked key's"
    );
    stack.stop().await;
    env.cleanup().await;
}
