//! The reservation fields against an in-process stand-in for ordering,
//! billing and the catalog (their paths do not overlap, so one server plays
//! all three) that records what the gateway sent, and the pure rules.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use async_graphql::Request;
use contracts::api::{Principal, Scope, TenantRole};
use contracts::ids::{MachineId, ReservationId, TenantId};
use contracts::reservations as rsv;
use platform::internal::InternalClient;
use serde_json::{Value, json};
use uuid::Uuid;

use super::*;
use crate::auth::{Credential, JwtKeys, RequestAuth};
use crate::clients::Clients;
use crate::graphql::{builder, execute};

/// What the stand-in was asked: method, path, query, body.
type Seen = Arc<Mutex<Vec<(String, String, HashMap<String, String>, Value)>>>;

const MACHINE: &str = "0190aaaa-0000-7000-8000-000000000001";
const OTHER_MACHINE: &str = "0190aaaa-0000-7000-8000-000000000009";
const OWN: &str = "0190cccc-0000-7000-8000-000000000001";
const CHILD: &str = "0190cccc-0000-7000-8000-000000000002";
/// Another of the renter's blocks on the machine, with escrow only.
const SECOND: &str = "0190cccc-0000-7000-8000-000000000003";

fn keys() -> JwtKeys {
    JwtKeys::new(&[("k1".into(), "test-secret".into())], 600).unwrap()
}

fn who(roles: &[TenantRole], scopes: &[Scope]) -> Principal {
    Principal {
        user_id: Uuid::now_v7(),
        tenant_id: TenantId(Uuid::now_v7()),
        email: "ada@example.com".into(),
        tenant_roles: roles.to_vec(),
        operator: false,
        scopes: scopes.to_vec(),
        api_key_id: None,
    }
}

fn renter() -> Principal {
    who(&[TenantRole::Renter], &[Scope::Read, Scope::Rent])
}

fn host() -> Principal {
    who(&[TenantRole::Host], &[Scope::Read, Scope::Host])
}

fn at(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

/// The next whole hour `hours` from now.
fn hours_ahead(hours: i64) -> DateTime<Utc> {
    Utc::now().duration_trunc(Duration::hours(1)).unwrap() + Duration::hours(hours)
}

/// The parties of the stand-in's data.
#[derive(Clone, Copy)]
struct Parties {
    renter: TenantId,
    host: TenantId,
}

fn reservation(p: Parties, id: &str, parent: Option<&str>) -> rsv::Reservation {
    let starts_at = hours_ahead(2);
    rsv::Reservation {
        id: ReservationId(id.parse().unwrap()),
        tenant_id: p.renter,
        machine_id: MachineId(MACHINE.parse().unwrap()),
        host_tenant_id: p.host,
        gpu_model: "H100 80GB SXM".into(),
        gpu_count: 2,
        gpu_indices: vec![0, 1],
        starts_at,
        ends_at: starts_at + Duration::hours(4),
        price_per_gpu_hour: Decimal::new(250, 2),
        amount: Decimal::from(20),
        currency: "USD".into(),
        state: rsv::ReservationState::Booked,
        parent_id: parent.map(|p| ReservationId(p.parse().unwrap())),
        sold: Vec::new(),
        created_at: Utc::now(),
        reason: None,
    }
}

fn escrow(p: Parties, id: &str, machine: &str) -> rsv::Escrow {
    let starts_at = hours_ahead(2);
    rsv::Escrow {
        reservation_id: ReservationId(id.parse().unwrap()),
        renter_tenant_id: p.renter,
        host_tenant_id: p.host,
        machine_id: MachineId(machine.parse().unwrap()),
        currency: "USD".into(),
        amount: Decimal::from(20),
        released: Decimal::ZERO,
        fees: Decimal::ZERO,
        refunded: Decimal::ZERO,
        penalty: Decimal::ZERO,
        remaining: Decimal::from(20),
        settled_until: starts_at,
        starts_at,
        ends_at: starts_at + Duration::hours(4),
        silent_seconds: 0,
        state: rsv::EscrowState::Held,
    }
}

fn machine(id: &str, host: TenantId) -> api::Machine {
    api::Machine {
        id: MachineId(id.parse().unwrap()),
        host_tenant_id: host,
        name: format!("rig-{}", &id[id.len() - 1..]),
        gpu_model: "H100 80GB SXM".into(),
        gpu_count: 2,
        gpus_allocated: 0,
        vram_gib: 80,
        cpu_model: "EPYC".into(),
        cpu_cores: 64,
        ram_gib: 512,
        disk_gib: 2000,
        disk_type: api::DiskType::Nvme,
        upload_mbps: 1000,
        download_mbps: 1000,
        country: "SE".into(),
        region: String::new(),
        datacenter: true,
        driver_version: None,
        cuda_version: None,
        price_per_gpu_hour: Some(Decimal::new(249, 2)),
        min_bid_per_gpu_hour: None,
        storage_price_per_gb_month: Decimal::ZERO,
        bandwidth_up_price_per_tb: Decimal::ZERO,
        bandwidth_down_price_per_tb: Decimal::ZERO,
        allowed_gpu_counts: Vec::new(),
        list_until: None,
        currency: "USD".into(),
        listed: true,
        online: true,
        last_heartbeat_at: None,
        reliability: None,
        verified: false,
        created_at: Utc::now(),
    }
}

fn not_found() -> HttpResponse {
    HttpResponse::NotFound().json(json!({ "code": "NOT_FOUND", "message": "not found" }))
}

/// Answers one request as ordering, billing or the catalog would for the
/// parties' data: each tenant sees only its own.
fn answer(
    p: Parties,
    method: &str,
    path: &str,
    q: &HashMap<String, String>,
    body: &Value,
) -> HttpResponse {
    let tenant = |key: &str| q.get(key).map(String::as_str);
    let is = |key: &str, t: TenantId| tenant(key) == Some(t.to_string().as_str());
    let own = || reservation(p, OWN, None);
    let child = || reservation(p, CHILD, Some(OWN));
    match (method, path) {
        ("GET", "/internal/reservations") if is("tenant_id", p.renter) => {
            HttpResponse::Ok().json(vec![own(), child()])
        }
        ("GET", "/internal/reservations") => {
            HttpResponse::Ok().json(Vec::<rsv::Reservation>::new())
        }
        ("GET", p_)
            if p_ == format!("/internal/reservations/{OWN}") && is("tenant_id", p.renter) =>
        {
            HttpResponse::Ok().json(own())
        }
        ("POST", "/internal/reservations") => {
            let request: rsv::ReserveRequest = serde_json::from_value(body.clone()).unwrap();
            let mut r = own();
            r.tenant_id = request.tenant_id;
            r.gpu_count = request.gpu_count;
            r.starts_at = request.starts_at;
            r.ends_at = request.ends_at;
            HttpResponse::Ok().json(r)
        }
        ("POST", p_) if p_ == format!("/internal/reservations/{OWN}/host-cancel") => {
            if body["host_tenant_id"] != json!(p.host) {
                return not_found();
            }
            let mut r = own();
            r.state = rsv::ReservationState::Cancelled;
            r.reason = body["reason"].as_str().map(Into::into);
            HttpResponse::Ok().json(r)
        }
        ("GET", p_) if p_ == format!("/internal/machines/{MACHINE}/reservations") => {
            if !is("host_tenant_id", p.host) {
                return not_found();
            }
            HttpResponse::Ok().json(vec![own(), child()])
        }
        ("GET", "/internal/escrows") => {
            let list = if is("renter_tenant_id", p.renter) || is("host_tenant_id", p.host) {
                vec![escrow(p, OWN, MACHINE), escrow(p, SECOND, MACHINE)]
            } else {
                Vec::new()
            };
            HttpResponse::Ok().json(list)
        }
        ("GET", p_) if p_ == format!("/internal/escrows/{OWN}") => {
            HttpResponse::Ok().json(escrow(p, OWN, MACHINE))
        }
        ("GET", p_) if p_.starts_with("/internal/escrows/") => not_found(),
        ("GET", "/internal/reservation-terms") => {
            HttpResponse::Ok().json(rsv::ReservationMoneyTerms {
                currency: "USD".into(),
                fee_rate: Decimal::new(15, 2),
                cancellation_penalty_rate: Decimal::new(10, 2),
                resale_fee_rate: Decimal::new(5, 2),
                settlement_interval_seconds: 10,
            })
        }
        ("GET", "/internal/machines") => HttpResponse::Ok().json(vec![
            machine(MACHINE, p.host),
            machine(OTHER_MACHINE, p.host),
        ]),
        ("GET", p_) if p_ == format!("/internal/machines/{MACHINE}/calendar") => {
            let from = at(&q["from"]);
            let bookings = if tenant("host_tenant_id").is_some() {
                vec![rsv::CalendarBooking {
                    reservation_id: ReservationId(OWN.parse().unwrap()),
                    tenant_id: p.renter,
                    gpu_index: 1,
                    starts_at: from,
                    ends_at: from + Duration::hours(1),
                    price_per_gpu_hour: Decimal::ONE,
                }]
            } else {
                Vec::new()
            };
            HttpResponse::Ok().json(rsv::MachineCalendar {
                machine_id: MachineId(MACHINE.parse().unwrap()),
                gpu_count: 2,
                from,
                to: at(&q["to"]),
                hours: vec![rsv::CalendarHour {
                    starts_at: from,
                    free_gpus: 1,
                }],
                bookings,
                terms: None,
            })
        }
        ("PUT", p_) if p_ == format!("/internal/machines/{MACHINE}/reserved-terms") => {
            let request: rsv::SetReservedTermsRequest =
                serde_json::from_value(body.clone()).unwrap();
            HttpResponse::Ok().json(request.terms.map(|t| rsv::ReservedTerms {
                price_per_gpu_hour: t.price_per_gpu_hour,
                max_lead_days: t.max_lead_days,
                min_block_hours: t.min_block_hours,
                currency: "USD".into(),
            }))
        }
        _ => not_found(),
    }
}

fn stand_in(p: Parties) -> (String, Seen) {
    let seen: Seen = Arc::default();
    let recorded = seen.clone();
    let server = HttpServer::new(move || {
        let seen = recorded.clone();
        App::new().default_service(web::to(move |req: HttpRequest, body: web::Bytes| {
            let seen = seen.clone();
            async move {
                let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let (method, path) = (req.method().to_string(), req.path().to_owned());
                let query = web::Query::<HashMap<String, String>>::from_query(req.query_string())
                    .map(web::Query::into_inner)
                    .unwrap_or_default();
                seen.lock().unwrap().push((
                    method.clone(),
                    path.clone(),
                    query.clone(),
                    body.clone(),
                ));
                answer(p, &method, &path, &query, &body)
            }
        }))
    })
    .workers(1)
    .bind(("127.0.0.1", 0))
    .unwrap();
    let port = server.addrs()[0].port();
    tokio::spawn(server.run());
    (format!("http://127.0.0.1:{port}"), seen)
}

async fn run(services: &str, caller: &Principal, query: &str) -> Value {
    let service = InternalClient::new(services, "token");
    let clients = Clients {
        quota: InternalClient::new("http://127.0.0.1:1", "token"),
        catalog: service.clone(),
        ordering: service.clone(),
        metering: service.clone(),
        billing: service.clone(),
        webhooks: service,
        runway_warning_seconds: 3600,
    };
    let schema = builder().data(keys()).data(clients).finish();
    let credential = Credential::Jwt(keys().issue(caller).unwrap().token);
    let response = execute(&schema, Request::new(query), RequestAuth::new(credential)).await;
    serde_json::to_value(&response).unwrap()
}

fn first_error(response: &Value) -> (&str, &str) {
    let error = &response["errors"][0];
    (
        error["extensions"]["code"]
            .as_str()
            .unwrap_or_else(|| panic!("no error in {response}")),
        error["message"].as_str().unwrap_or_default(),
    )
}

/// The stand-in's requests to `path` (a prefix).
fn asked(seen: &Seen, path: &str) -> Vec<(String, HashMap<String, String>, Value)> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|(_, p, ..)| p.starts_with(path))
        .map(|(m, _, q, b)| (m.clone(), q.clone(), b.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_of_reservations_asks_billing_once_and_shows_only_own_escrows() {
    let (renter, host) = (renter(), host());
    let parties = Parties {
        renter: renter.tenant_id,
        host: host.tenant_id,
    };
    let (services, seen) = stand_in(parties);
    let response = run(
        &services,
        &renter,
        "{ reservations { id parentId hours hoursLeft gpuIndices state
            escrow { amount released remaining state } } }",
    )
    .await;
    assert!(response.get("errors").is_none(), "{response}");
    let list = &response["data"]["reservations"];
    assert_eq!(list[0]["id"], OWN);
    assert_eq!(list[0]["hours"], 4);
    assert_eq!(list[0]["hoursLeft"], 4);
    assert_eq!(list[0]["gpuIndices"], json!([0, 1]));
    assert_eq!(list[0]["state"], "BOOKED");
    assert_eq!(
        list[0]["escrow"],
        json!({ "amount": "20", "released": "0", "remaining": "20", "state": "HELD" })
    );
    // Bought on resale: paid from the parent's escrow, not shown.
    assert_eq!(list[1]["parentId"], OWN);
    assert_eq!(list[1]["escrow"], Value::Null);
    let escrows = asked(&seen, "/internal/escrows");
    assert_eq!(escrows.len(), 1, "one call for the whole list: {escrows:?}");
    assert_eq!(
        escrows[0].1.get("renter_tenant_id"),
        Some(&renter.tenant_id.to_string())
    );
    // Through a fragment, as the billing page asks: still one call.
    seen.lock().unwrap().clear();
    let response = run(
        &services,
        &renter,
        "{ reservations { ...R } } fragment R on Reservation { id escrow { state } }",
    )
    .await;
    assert!(response.get("errors").is_none(), "{response}");
    assert_eq!(asked(&seen, "/internal/escrows").len(), 1);
    // Without escrow selected, billing is not asked.
    seen.lock().unwrap().clear();
    let response = run(&services, &renter, "{ reservations { id } }").await;
    assert!(response.get("errors").is_none(), "{response}");
    assert!(asked(&seen, "/internal/escrows").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_reservation_answers_like_a_random_id() {
    let (owner, host) = (renter(), host());
    let (services, _) = stand_in(Parties {
        renter: owner.tenant_id,
        host: host.tenant_id,
    });
    let stranger = renter();
    let fields = "{ id escrow { amount } }";
    for id in [OWN, "0190cccc-0000-7000-8000-0000000000ff"] {
        let response = run(
            &services,
            &stranger,
            &format!(r#"{{ reservation(id: "{id}") {fields} }}"#),
        )
        .await;
        assert_eq!(first_error(&response).0, "NOT_FOUND", "{response}");
    }
    let response = run(&services, &stranger, "{ reservations { id } }").await;
    assert_eq!(response["data"]["reservations"], json!([]));
    // The owner reads it, with its escrow asked for by id.
    let response = run(
        &services,
        &owner,
        &format!(r#"{{ reservation(id: "{OWN}") {fields} }}"#),
    )
    .await;
    assert_eq!(response["data"]["reservation"]["escrow"]["amount"], "20");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserve_sends_the_callers_tenant_and_refuses_bad_input_before_ordering() {
    let (renter, host) = (renter(), host());
    let (services, seen) = stand_in(Parties {
        renter: renter.tenant_id,
        host: host.tenant_id,
    });
    let starts = hours_ahead(3);
    let ends = starts + Duration::hours(5);
    let reserve = |args: &str| {
        format!("mutation {{ reserve(input: {{ {args} }}) {{ id gpuCount hours state }} }}")
    };
    let good = format!(
        r#"offerId: "{MACHINE}", gpuCount: 2, startsAt: "{}", endsAt: "{}",
           maxPricePerGpuHour: "3", idempotencyKey: "k-1""#,
        starts.to_rfc3339(),
        ends.to_rfc3339()
    );
    let response = run(&services, &renter, &reserve(&good)).await;
    assert!(response.get("errors").is_none(), "{response}");
    assert_eq!(response["data"]["reserve"]["hours"], 5);
    let sent = asked(&seen, "/internal/reservations");
    let body = &sent[0].2;
    assert_eq!(body["tenant_id"], json!(renter.tenant_id));
    assert_eq!(body["user_id"], json!(renter.user_id));
    assert_eq!(body["offer_id"], MACHINE);
    assert_eq!(body["max_price_per_gpu_hour"], "3");
    seen.lock().unwrap().clear();

    let time = |s: DateTime<Utc>, e: DateTime<Utc>| {
        format!(
            r#"startsAt: "{}", endsAt: "{}""#,
            s.to_rfc3339(),
            e.to_rfc3339()
        )
    };
    let ok_time = time(starts, ends);
    let long = "x".repeat(201);
    let cases = [
        (
            format!(r#"offerId: "{MACHINE}", gpuCount: 0, {ok_time}, idempotencyKey: "k""#),
            "gpuCount",
        ),
        (
            format!(r#"offerId: "{MACHINE}", gpuCount: 65, {ok_time}, idempotencyKey: "k""#),
            "gpuCount",
        ),
        (
            format!(r#"gpuCount: 1, {ok_time}, idempotencyKey: "k""#),
            "offerId",
        ),
        (
            format!(
                r#"offerId: "{MACHINE}", constraints: {{ regions: ["eu"] }}, gpuCount: 1, {ok_time}, idempotencyKey: "k""#
            ),
            "offerId",
        ),
        (
            format!(r#"offerId: "nope", gpuCount: 1, {ok_time}, idempotencyKey: "k""#),
            "offerId",
        ),
        (
            format!(
                r#"offerId: "{MACHINE}", gpuCount: 1, {}, idempotencyKey: "k""#,
                time(starts + Duration::minutes(30), ends)
            ),
            "startsAt",
        ),
        (
            format!(
                r#"offerId: "{MACHINE}", gpuCount: 1, {}, idempotencyKey: "k""#,
                time(hours_ahead(-1), ends)
            ),
            "startsAt",
        ),
        (
            format!(
                r#"offerId: "{MACHINE}", gpuCount: 1, {}, idempotencyKey: "k""#,
                time(ends, starts)
            ),
            "endsAt",
        ),
        (
            format!(
                r#"offerId: "{MACHINE}", gpuCount: 1, {}, idempotencyKey: "k""#,
                time(starts, starts + Duration::days(91))
            ),
            "endsAt",
        ),
        (
            format!(
                r#"offerId: "{MACHINE}", gpuCount: 1, {ok_time}, maxPricePerGpuHour: "-1", idempotencyKey: "k""#
            ),
            "maxPricePerGpuHour",
        ),
        (
            format!(
                r#"offerId: "{MACHINE}", gpuCount: 1, {ok_time}, maxPricePerGpuHour: "1000.5", idempotencyKey: "k""#
            ),
            "maxPricePerGpuHour",
        ),
        (
            format!(r#"offerId: "{MACHINE}", gpuCount: 1, {ok_time}, idempotencyKey: " ""#),
            "idempotencyKey",
        ),
        (
            format!(r#"offerId: "{MACHINE}", gpuCount: 1, {ok_time}, idempotencyKey: "{long}""#),
            "idempotencyKey",
        ),
        (
            format!(
                r#"offerId: "{MACHINE}", gpuCount: 1, {ok_time}, idempotencyKey: "k", teamId: "t""#
            ),
            "teamId",
        ),
    ];
    for (args, field) in cases {
        let response = run(&services, &renter, &reserve(&args)).await;
        let (code, message) = first_error(&response);
        assert_eq!(code, "VALIDATION", "{args}: {response}");
        assert!(
            message.starts_with(&format!("{field}: ")),
            "{args}: {message}"
        );
    }
    assert!(seen.lock().unwrap().is_empty(), "a service was asked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renters_reserve_and_hosts_manage_their_machines_blocks() {
    let (renter, host) = (renter(), host());
    let (services, seen) = stand_in(Parties {
        renter: renter.tenant_id,
        host: host.tenant_id,
    });
    let starts = hours_ahead(3);
    let reserve = format!(
        r#"mutation {{ reserve(input: {{ offerId: "{MACHINE}", gpuCount: 1, startsAt: "{}",
            endsAt: "{}", idempotencyKey: "k" }}) {{ id }} }}"#,
        starts.to_rfc3339(),
        (starts + Duration::hours(2)).to_rfc3339()
    );
    let host_only = [
        format!(r#"mutation {{ cancelReservation(id: "{OWN}", reason: "maintenance") {{ id }} }}"#),
        format!(r#"mutation {{ setReservedTerms(machineId: "{MACHINE}") {{ currency }} }}"#),
        format!(r#"{{ machineReservations(machineId: "{MACHINE}") {{ id }} }}"#),
    ];
    let response = run(&services, &host, &reserve).await;
    assert_eq!(first_error(&response).0, "FORBIDDEN", "{response}");
    for query in &host_only {
        let response = run(&services, &renter, query).await;
        assert_eq!(first_error(&response).0, "FORBIDDEN", "{query}: {response}");
    }
    assert!(seen.lock().unwrap().is_empty(), "a service was asked");

    // The host's view of its machine's blocks: the escrow of its own
    // blocks, fetched once for the list.
    let response = run(
        &services,
        &host,
        &format!(
            r#"{{ machineReservations(machineId: "{MACHINE}") {{ id escrow {{ amount }} }} }}"#
        ),
    )
    .await;
    assert!(response.get("errors").is_none(), "{response}");
    assert_eq!(
        response["data"]["machineReservations"],
        json!([{ "id": OWN, "escrow": { "amount": "20" } }, { "id": CHILD, "escrow": null }])
    );
    let escrows = asked(&seen, "/internal/escrows");
    assert_eq!(escrows.len(), 1);
    assert_eq!(
        escrows[0].1.get("host_tenant_id"),
        Some(&host.tenant_id.to_string())
    );

    // A cancellation's reason is bounded, and the host is the caller.
    for reason in [" ".to_owned(), "x".repeat(501)] {
        let response = run(
            &services,
            &host,
            &format!(
                r#"mutation {{ cancelReservation(id: "{OWN}", reason: "{reason}") {{ id }} }}"#
            ),
        )
        .await;
        let (code, message) = first_error(&response);
        assert_eq!(code, "VALIDATION", "{response}");
        assert!(message.starts_with("reason: "), "{message}");
    }
    let response = run(
        &services,
        &host,
        &format!(r#"mutation {{ cancelReservation(id: "{OWN}", reason: " power work ") {{ state reason hoursLeft }} }}"#),
    )
    .await;
    assert!(response.get("errors").is_none(), "{response}");
    assert_eq!(
        response["data"]["cancelReservation"],
        json!({ "state": "CANCELLED", "reason": "power work", "hoursLeft": 0 })
    );
    // Another host's cancellation answers as for a random id.
    let response = run(
        &services,
        &self::host(),
        &format!(r#"mutation {{ cancelReservation(id: "{OWN}", reason: "mine now") {{ id }} }}"#),
    )
    .await;
    assert_eq!(first_error(&response).0, "NOT_FOUND", "{response}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terms_are_set_and_withdrawn_and_the_calendar_shows_bookings_to_hosts_only() {
    let (renter, host) = (renter(), host());
    let (services, seen) = stand_in(Parties {
        renter: renter.tenant_id,
        host: host.tenant_id,
    });
    let response = run(
        &services,
        &host,
        &format!(
            r#"mutation {{ setReservedTerms(machineId: "{MACHINE}", terms: {{
                pricePerGpuHour: "2.40", maxLeadDays: 30, minBlockHours: 4 }})
                {{ pricePerGpuHour maxLeadDays minBlockHours currency }} }}"#
        ),
    )
    .await;
    assert!(response.get("errors").is_none(), "{response}");
    assert_eq!(
        response["data"]["setReservedTerms"],
        json!({ "pricePerGpuHour": "2.40", "maxLeadDays": 30, "minBlockHours": 4, "currency": "USD" })
    );
    let sent = asked(
        &seen,
        &format!("/internal/machines/{MACHINE}/reserved-terms"),
    );
    assert_eq!(sent[0].2["host_tenant_id"], json!(host.tenant_id));
    let response = run(
        &services,
        &host,
        &format!(
            r#"mutation {{ setReservedTerms(machineId: "{MACHINE}", terms: null) {{ currency }} }}"#
        ),
    )
    .await;
    assert_eq!(
        response["data"]["setReservedTerms"],
        Value::Null,
        "{response}"
    );
    let response = run(
        &services,
        &host,
        &format!(
            r#"mutation {{ setReservedTerms(machineId: "{MACHINE}", terms: {{
                pricePerGpuHour: "1", maxLeadDays: 400, minBlockHours: 4 }}) {{ currency }} }}"#
        ),
    )
    .await;
    assert!(
        first_error(&response).1.starts_with("maxLeadDays: "),
        "{response}"
    );

    let from = hours_ahead(0);
    let calendar = |to: DateTime<Utc>| {
        format!(
            r#"{{ machineCalendar(machineId: "{MACHINE}", from: "{}", to: "{}") {{
                gpuCount hours {{ freeGpus }} bookings {{ reservationId gpuIndex }} }} }}"#,
            from.to_rfc3339(),
            to.to_rfc3339()
        )
    };
    seen.lock().unwrap().clear();
    let week = from + Duration::days(7);
    let response = run(&services, &renter, &calendar(week)).await;
    assert!(response.get("errors").is_none(), "{response}");
    assert_eq!(response["data"]["machineCalendar"]["bookings"], json!([]));
    let response = run(&services, &host, &calendar(week)).await;
    assert_eq!(
        response["data"]["machineCalendar"]["bookings"],
        json!([{ "reservationId": OWN, "gpuIndex": 1 }])
    );
    let asks = asked(&seen, "/internal/machines");
    assert_eq!(
        asks[0].1.get("host_tenant_id"),
        None,
        "a renter is not the host"
    );
    assert_eq!(
        asks[1].1.get("host_tenant_id"),
        Some(&host.tenant_id.to_string())
    );
    for to in [from, from + Duration::days(32)] {
        let response = run(&services, &renter, &calendar(to)).await;
        let (code, message) = first_error(&response);
        assert_eq!(code, "VALIDATION", "{response}");
        assert!(message.starts_with("to: "), "{message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn my_machines_read_the_earnings_to_come_in_one_look_at_the_escrows() {
    let (renter, host) = (renter(), host());
    let (services, seen) = stand_in(Parties {
        renter: renter.tenant_id,
        host: host.tenant_id,
    });
    let response = run(
        &services,
        &host,
        "{ myMachines { id reservedEarningsToCome { amount currency blocks } } }",
    )
    .await;
    assert!(response.get("errors").is_none(), "{response}");
    let machines = &response["data"]["myMachines"];
    // Two held escrows of 20 on MACHINE, fee 15 %.
    assert_eq!(
        machines[0]["reservedEarningsToCome"],
        json!({ "amount": "34.00", "currency": "USD", "blocks": 2 })
    );
    assert_eq!(
        machines[1]["reservedEarningsToCome"],
        json!({ "amount": "0", "currency": "USD", "blocks": 0 })
    );
    assert_eq!(asked(&seen, "/internal/escrows").len(), 1);
    assert_eq!(asked(&seen, "/internal/reservation-terms").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resale_inputs_are_checked_before_ordering_is_asked() {
    let (renter, host) = (renter(), host());
    let (services, seen) = stand_in(Parties {
        renter: renter.tenant_id,
        host: host.tenant_id,
    });
    let starts = hours_ahead(3);
    let list = |s: DateTime<Utc>, e: DateTime<Utc>, price: &str| {
        format!(
            r#"mutation {{ listReservationHours(input: {{ reservationId: "{OWN}",
                startsAt: "{}", endsAt: "{}", pricePerGpuHour: "{price}" }}) {{ id }} }}"#,
            s.to_rfc3339(),
            e.to_rfc3339()
        )
    };
    let cases = [
        (list(starts + Duration::seconds(1), starts + Duration::hours(2), "1"), "startsAt"),
        (list(hours_ahead(0), starts, "1"), "startsAt"),
        (list(starts, starts, "1"), "endsAt"),
        (list(starts, starts + Duration::hours(2), "-0.5"), "pricePerGpuHour"),
        (
            r#"mutation { buyReservationHours(input: { listingId: "x", idempotencyKey: "k" }) { id } }"#.to_owned(),
            "listingId",
        ),
        (
            format!(r#"mutation {{ buyReservationHours(input: {{ listingId: "{OWN}", idempotencyKey: "" }}) {{ id }} }}"#),
            "idempotencyKey",
        ),
        (r#"mutation { withdrawListing(id: "1 OR 1=1") { id } }"#.to_owned(), "id"),
        (r#"{ resaleListings(filter: { minGpus: 0 }) { id } }"#.to_owned(), "minGpus"),
        (
            format!(r#"{{ resaleListings(filter: {{ gpuModel: "{}" }}) {{ id }} }}"#, "x".repeat(101)),
            "gpuModel",
        ),
    ];
    for (query, field) in cases {
        let response = run(&services, &renter, &query).await;
        let (code, message) = first_error(&response);
        assert_eq!(code, "VALIDATION", "{query}: {response}");
        assert!(
            message.starts_with(&format!("{field}: ")),
            "{query}: {message}"
        );
    }
    // Hosts neither list nor buy.
    let response = run(
        &services,
        &host,
        &format!(r#"mutation {{ buyReservationHours(input: {{ listingId: "{OWN}", idempotencyKey: "k" }}) {{ id }} }}"#),
    )
    .await;
    assert_eq!(first_error(&response).0, "FORBIDDEN");
    assert!(seen.lock().unwrap().is_empty(), "a service was asked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_on_a_reservation_names_nothing_else() {
    let renter = renter();
    let (services, seen) = stand_in(Parties {
        renter: renter.tenant_id,
        host: host().tenant_id,
    });
    for (args, field) in [
        (
            format!(r#"reservationId: "{OWN}", offerId: "{MACHINE}""#),
            "reservationId",
        ),
        (
            format!(r#"reservationId: "{OWN}", migProfile: "3g.40gb""#),
            "reservationId",
        ),
        (r#"reservationId: "nope""#.to_owned(), "reservationId"),
    ] {
        let response = run(
            &services,
            &renter,
            &format!(r#"mutation {{ createOrder(input: {{ gpuCount: 1, idempotencyKey: "k", {args} }}) {{ id }} }}"#),
        )
        .await;
        let (code, message) = first_error(&response);
        assert_eq!(code, "VALIDATION", "{args}: {response}");
        assert!(
            message.starts_with(&format!("{field}: ")),
            "{args}: {message}"
        );
    }
    assert!(seen.lock().unwrap().is_empty(), "a service was asked");
}

#[test]
fn hours_left_are_the_holders_hours_not_yet_begun() {
    let p = Parties {
        renter: TenantId(Uuid::now_v7()),
        host: TenantId(Uuid::now_v7()),
    };
    let mut r = reservation(p, OWN, None);
    r.starts_at = at("2027-01-04T10:00:00Z");
    r.ends_at = at("2027-01-04T20:00:00Z");
    // Before the block: all ten.
    assert_eq!(hours_left(&r, at("2027-01-04T09:59:59Z")), 10);
    // The hour under way has begun, also at its very first instant.
    assert_eq!(hours_left(&r, at("2027-01-04T10:00:00Z")), 9);
    assert_eq!(hours_left(&r, at("2027-01-04T12:30:00Z")), 7);
    // Sold hours are the buyer's; only those not yet begun count.
    r.sold = vec![
        rsv::HourRange {
            starts_at: at("2027-01-04T11:00:00Z"),
            ends_at: at("2027-01-04T13:00:00Z"),
        },
        rsv::HourRange {
            starts_at: at("2027-01-04T16:00:00Z"),
            ends_at: at("2027-01-04T18:00:00Z"),
        },
    ];
    assert_eq!(hours_left(&r, at("2027-01-04T09:00:00Z")), 6);
    assert_eq!(hours_left(&r, at("2027-01-04T12:30:00Z")), 5);
    assert_eq!(hours_left(&r, at("2027-01-04T19:59:59Z")), 0);
    assert_eq!(hours_left(&r, at("2027-01-05T00:00:00Z")), 0);
    for state in [
        rsv::ReservationState::Cancelled,
        rsv::ReservationState::Failed,
        rsv::ReservationState::Ended,
    ] {
        r.state = state;
        assert_eq!(hours_left(&r, at("2027-01-04T09:00:00Z")), 0, "{state:?}");
    }
}
