//! The GraphQL schema, one root per area merged into `Query` and `Mutation`.
//! It knows nothing of HTTP: the caller's credential arrives as request data.
//! Layers, as in Sui's GraphQL server: [`extensions`] hold what a request
//! must stay within (guards before parsing, depth and cost limits, plain
//! error messages); [`scalars`] how instants, money and ids look; the other
//! modules are the types and resolvers of one area each. The transports
//! (HTTP in `crate::http`, WebSocket in `crate::ws`, the live-event hub in
//! `crate::hub`) sit outside.

mod dashboards;
mod events;
pub mod extensions;
mod hosting;
mod identity;
mod invoices;
mod market;
mod money;
mod operator;
pub mod payouts;
pub mod platform;
mod quotas;
mod rentals;
mod reservations;
mod rules;
mod scalars;
mod webhooks;

use scalars::instant;

use async_graphql::{MergedObject, MergedSubscription, Request, Response, Schema, SchemaBuilder};

use crate::auth::RequestAuth;
use crate::error::ensure_codes;

#[derive(MergedObject, Default)]
#[graphql(name = "Query")]
pub struct QueryRoot(
    identity::IdentityQuery,
    market::MarketQuery,
    hosting::HostingQuery,
    rentals::RentalsQuery,
    money::MoneyQuery,
    invoices::InvoicesQuery,
    payouts::PayoutsQuery,
    rules::LifecycleQuery,
    quotas::QuotasQuery,
    dashboards::DashboardsQuery,
    platform::PlatformQuery,
    operator::OperatorQuery,
    webhooks::WebhooksQuery,
    reservations::ReservationsQuery,
    reservations::HostReservationsQuery,
    reservations::ResaleQuery,
);

#[derive(MergedObject, Default)]
#[graphql(name = "Mutation")]
pub struct MutationRoot(
    identity::IdentityMutation,
    hosting::HostingMutation,
    rentals::RentalsMutation,
    money::MoneyMutation,
    invoices::InvoicesMutation,
    payouts::PayoutsMutation,
    rules::LifecycleMutation,
    quotas::QuotasMutation,
    webhooks::WebhooksMutation,
    reservations::ReservationsMutation,
    reservations::HostReservationsMutation,
    reservations::ResaleMutation,
);

#[derive(MergedSubscription, Default)]
#[graphql(name = "Subscription")]
pub struct SubscriptionRoot(events::EventsSubscription);

pub type GatewaySchema = Schema<QueryRoot, MutationRoot, SubscriptionRoot>;

/// The schema with its limits; add the service clients and JWT keys as data
/// before serving it.
pub fn builder() -> SchemaBuilder<QueryRoot, MutationRoot, SubscriptionRoot> {
    Schema::build(
        QueryRoot::default(),
        MutationRoot::default(),
        SubscriptionRoot::default(),
    )
    // Refused before parsing: NUL, inexact numbers, fragment bombs and
    // too many expensive fields (`Guards`); depth and cost are checked by
    // `Limits`, which says by how much a request is over.
    .extension(extensions::guards::Guards)
    .extension(extensions::limits::Limits)
}

/// Runs one request on behalf of `auth`'s caller; every error in the
/// response carries a code.
pub async fn execute(schema: &GatewaySchema, request: Request, auth: RequestAuth) -> Response {
    let mut response = schema.execute(request.data(auth)).await;
    ensure_codes(&mut response);
    response
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use contracts::api::{Principal, Scope, TenantRole};
    // The crate, not the `platform` schema module glob-imported below.
    use ::platform::internal::InternalClient;
    use serde_json::Value;
    use uuid::Uuid;

    use super::*;
    use crate::auth::{Credential, JwtKeys};
    use crate::clients::Clients;
    use contracts::ids::TenantId;

    fn keys() -> JwtKeys {
        JwtKeys::new(&[("k1".into(), "test-secret".into())], 600).unwrap()
    }

    /// A schema whose services are all unreachable: nothing here may need one
    /// except the test that checks what happens when one is down.
    fn schema() -> GatewaySchema {
        builder().data(keys()).data(unreachable_clients()).finish()
    }

    fn unreachable_clients() -> Clients {
        let nowhere = InternalClient::new("http://127.0.0.1:1", "token");
        Clients {
            quota: nowhere.clone(),
            catalog: nowhere.clone(),
            ordering: nowhere.clone(),
            metering: nowhere.clone(),
            billing: nowhere.clone(),
            webhooks: nowhere,
            runway_warning_seconds: 3600,
        }
    }

    fn principal(roles: &[TenantRole], scopes: &[Scope]) -> Principal {
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

    fn bearer(p: &Principal) -> Credential {
        Credential::Jwt(keys().issue(p).unwrap().token)
    }

    async fn run(query: &str, credential: Credential) -> Value {
        let response = execute(&schema(), Request::new(query), RequestAuth::new(credential)).await;
        serde_json::to_value(&response).unwrap()
    }

    fn first_code(response: &Value) -> &str {
        response["errors"][0]["extensions"]["code"]
            .as_str()
            .unwrap_or_else(|| panic!("no error code in {response}"))
    }

    #[tokio::test]
    async fn me_without_a_token_is_unauthenticated() {
        let response = run("{ me { userId } }", Credential::None).await;
        assert_eq!(first_code(&response), "UNAUTHENTICATED");
    }

    #[tokio::test]
    async fn a_bad_token_is_unauthenticated() {
        for credential in [Credential::Jwt("not.a.jwt".into()), Credential::Malformed] {
            let response = run("{ me { userId } }", credential).await;
            assert_eq!(first_code(&response), "UNAUTHENTICATED");
        }
    }

    #[tokio::test]
    async fn me_reflects_the_token() {
        let p = principal(
            &[TenantRole::Renter, TenantRole::Platform],
            &[Scope::Read, Scope::Rent],
        );
        let response = run(
            "{ me { userId tenantId email tenantRoles operator scopes } }",
            bearer(&p),
        )
        .await;
        assert!(response.get("errors").is_none(), "{response}");
        let me = &response["data"]["me"];
        assert_eq!(me["userId"], p.user_id.to_string());
        assert_eq!(me["tenantId"], p.tenant_id.to_string());
        assert_eq!(me["tenantRoles"], serde_json::json!(["RENTER", "PLATFORM"]));
        assert_eq!(me["scopes"], serde_json::json!(["READ", "RENT"]));
        assert_eq!(me["operator"], false);
    }

    #[tokio::test]
    async fn missing_scope_is_forbidden() {
        let p = principal(&[TenantRole::Renter], &[Scope::Read]);
        let response = run(
            r#"mutation { stopInstance(id: "00000000-0000-0000-0000-000000000000") { id } }"#,
            bearer(&p),
        )
        .await;
        assert_eq!(first_code(&response), "FORBIDDEN");
    }

    #[tokio::test]
    async fn cheap_checks_fail_before_any_service_is_called() {
        let renter = bearer(&principal(&[TenantRole::Renter], &[Scope::Rent]));
        let response = run(
            r#"mutation { createOrder(input: {
                offerId: "00000000-0000-0000-0000-000000000000",
                gpuCount: 0, idempotencyKey: "k" }) { id } }"#,
            renter.clone(),
        )
        .await;
        assert_eq!(first_code(&response), "VALIDATION");
        assert!(
            response["errors"][0]["message"]
                .as_str()
                .unwrap()
                .contains("gpuCount")
        );

        let response = run(
            r#"mutation { createOrder(input: {
                offerId: "nope", gpuCount: 1, idempotencyKey: "k" }) { id } }"#,
            renter,
        )
        .await;
        assert_eq!(first_code(&response), "VALIDATION");

        let response = run("{ offers(first: 0) { nodes { id } } }", Credential::None).await;
        assert_eq!(first_code(&response), "VALIDATION");
    }

    #[tokio::test]
    async fn a_mig_slice_is_one_on_demand_gpu_with_a_bounded_profile_name() {
        let renter = bearer(&principal(&[TenantRole::Renter], &[Scope::Rent]));
        let order = |args: &str| {
            format!(
                r#"mutation {{ createOrder(input: {{
                    offerId: "00000000-0000-0000-0000-000000000000",
                    idempotencyKey: "k", {args} }}) {{ id migProfile }} }}"#
            )
        };
        let long = "x".repeat(33);
        for (args, field) in [
            (r#"gpuCount: 2, migProfile: "3g.40gb""#.to_owned(), "gpuCount"),
            (
                r#"gpuCount: 1, migProfile: "3g.40gb", rentalType: INTERRUPTIBLE, bidPerGpuHour: "1""#
                    .to_owned(),
                "migProfile",
            ),
            (format!(r#"gpuCount: 1, migProfile: "{long}""#), "migProfile"),
        ] {
            let response = run(&order(&args), renter.clone()).await;
            assert_eq!(first_code(&response), "VALIDATION", "{args}: {response}");
            let message = response["errors"][0]["message"].as_str().unwrap();
            assert!(message.starts_with(&format!("{field}: ")), "{args}: {message}");
        }
        let response = run(
            &format!(r#"{{ offers(filter: {{ migProfile: "{long}" }}) {{ nodes {{ id }} }} }}"#),
            Credential::None,
        )
        .await;
        assert_eq!(first_code(&response), "VALIDATION", "{response}");
        assert!(
            response["errors"][0]["message"]
                .as_str()
                .unwrap()
                .starts_with("migProfile: ")
        );
    }

    #[tokio::test]
    async fn errors_from_async_graphql_itself_get_a_code() {
        let response = run("{ me { ", Credential::None).await;
        assert_eq!(first_code(&response), "VALIDATION");
        let response = run("{ noSuchField }", Credential::None).await;
        assert_eq!(first_code(&response), "VALIDATION");
        let deep = r#"{ __type(name: "Query") { fields { type "#.to_owned()
            + &"{ ofType ".repeat(12)
            + "{ name }"
            + &" }".repeat(12)
            + " } } }";
        let response = run(&deep, Credential::None).await;
        assert_eq!(first_code(&response), "VALIDATION");
        assert!(
            response["errors"][0]["message"]
                .as_str()
                .unwrap()
                .contains("too deep"),
            "{response}"
        );
    }

    #[tokio::test]
    async fn aliases_of_an_expensive_field_are_refused_before_they_run() {
        let p = principal(&[TenantRole::Renter], &[Scope::Billing]);
        let aliases: String = (0..600)
            .map(|i| {
                format!(
                    "a{i}: usageSeries(bucket: HOUR, groupBy: METER, from: \"2026-01-01T00:00:00Z\", to: \"2026-01-02T00:00:00Z\") {{ points {{ spend }} }} "
                )
            })
            .collect();
        let response = run(&format!("{{ {aliases} }}"), bearer(&p)).await;
        // Refused as a whole: the unreachable billing would have made it
        // UNAVAILABLE had any alias run.
        assert_eq!(first_code(&response), "VALIDATION", "{response}");
        assert!(response["data"].is_null(), "{response}");
        let message = response["errors"][0]["message"].as_str().unwrap();
        assert!(message.contains("too complex"), "{message}");
        assert!(message.contains("limit is 2000"), "{message}");
        // Twenty fit, nineteen with room for the rest of a page.
        let few: String = (0..19)
            .map(|i| format!("a{i}: offers(first: 1) {{ nodes {{ id }} }} "))
            .collect();
        let response = run(&format!("{{ {few} }}"), Credential::None).await;
        assert_eq!(first_code(&response), "UNAVAILABLE", "{response}");
    }

    #[tokio::test]
    async fn one_caller_runs_at_most_four_expensive_requests_at_once() {
        use std::sync::Arc;

        use crate::caller::{CallerKey, ConcurrencyGate};

        let gate = Arc::new(ConcurrencyGate::default());
        let schema = builder()
            .data(keys())
            .data(unreachable_clients())
            .data(gate)
            .finish();
        let run = |caller: CallerKey| {
            let schema = schema.clone();
            async move {
                let request = Request::new("{ offers(first: 1) { nodes { id } } }").data(caller);
                let response = execute(&schema, request, RequestAuth::new(Credential::None)).await;
                serde_json::to_value(&response).unwrap()
            }
        };
        let one = CallerKey::address("10.0.0.1");
        // Each search waits on an unreachable catalog, so all eight overlap.
        let answers = futures_util::future::join_all((0..8).map(|_| run(one))).await;
        let codes: Vec<&str> = answers.iter().map(first_code).collect();
        let limited = codes.iter().filter(|c| **c == "RATE_LIMITED").count();
        assert_eq!(limited, 4, "{codes:?}");
        assert_eq!(
            codes.iter().filter(|c| **c == "UNAVAILABLE").count(),
            4,
            "{codes:?}"
        );
        let refused = answers
            .iter()
            .find(|a| first_code(a) == "RATE_LIMITED")
            .unwrap();
        assert_eq!(refused["errors"][0]["extensions"]["retryAfterSeconds"], 1);
        // Once they are done, the caller runs again.
        assert_eq!(first_code(&run(one).await), "UNAVAILABLE");
    }

    #[tokio::test]
    async fn parser_and_validation_errors_are_in_plain_words() {
        let response = run("{ me { ", Credential::None).await;
        let message = response["errors"][0]["message"].as_str().unwrap();
        assert!(message.starts_with("syntax error at line 1"), "{message}");
        assert!(!message.contains('|'), "{message}");
        let response = run(
            "{ balance { ...a } } fragment a on Money { amount ...b } fragment b on Money { ...a }",
            Credential::None,
        )
        .await;
        assert_eq!(first_code(&response), "VALIDATION");
        let message = response["errors"][0]["message"].as_str().unwrap();
        assert!(message.starts_with("fragment cycle"), "{message}");
    }

    #[tokio::test]
    async fn an_unreachable_service_is_unavailable() {
        let p = principal(&[TenantRole::Renter], &[Scope::Billing]);
        let response = run("{ balance { amount } }", bearer(&p)).await;
        assert_eq!(first_code(&response), "UNAVAILABLE");
    }
}
