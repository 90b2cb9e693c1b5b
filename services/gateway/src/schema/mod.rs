//! The GraphQL schema, one root per area merged into `Query` and `Mutation`.
//! It knows nothing of HTTP: the caller's credential arrives as request data.

mod dashboards;
pub mod events;
mod hosting;
mod identity;
mod invoices;
mod market;
mod money;
mod payouts;
mod quotas;
mod rentals;

use async_graphql::{MergedObject, MergedSubscription, Request, Response, Schema, SchemaBuilder};
use chrono::{DateTime, Utc};

use crate::auth::{Credential, RequestAuth};
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
    events::LifecycleQuery,
    quotas::QuotasQuery,
    dashboards::DashboardsQuery,
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
    events::LifecycleMutation,
    quotas::QuotasMutation,
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
    .limit_depth(12)
    .limit_complexity(2000)
}

/// Runs one request on behalf of whoever holds `credential`; every error in
/// the response carries a code.
pub async fn execute(schema: &GatewaySchema, request: Request, credential: Credential) -> Response {
    let mut response = schema
        .execute(request.data(RequestAuth::new(credential)))
        .await;
    ensure_codes(&mut response);
    response
}

/// Instants as the API shows them: RFC 3339, microseconds, UTC.
fn instant(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use contracts::api::{Principal, Scope, TenantRole};
    use platform::internal::InternalClient;
    use serde_json::Value;
    use uuid::Uuid;

    use super::*;
    use crate::auth::JwtKeys;
    use crate::clients::Clients;

    fn keys() -> JwtKeys {
        JwtKeys::new(&[("k1".into(), "test-secret".into())], 600).unwrap()
    }

    /// A schema whose services are all unreachable: nothing here may need one
    /// except the test that checks what happens when one is down.
    fn schema() -> GatewaySchema {
        let nowhere = InternalClient::new("http://127.0.0.1:1", "token");
        let clients = Clients {
            quota: nowhere.clone(),
            catalog: nowhere.clone(),
            ordering: nowhere.clone(),
            metering: nowhere.clone(),
            billing: nowhere,
            runway_warning_seconds: 3600,
        };
        builder().data(keys()).data(clients).finish()
    }

    fn principal(roles: &[TenantRole], scopes: &[Scope]) -> Principal {
        Principal {
            user_id: Uuid::now_v7(),
            tenant_id: Uuid::now_v7(),
            email: "ada@example.com".into(),
            tenant_roles: roles.to_vec(),
            operator: false,
            scopes: scopes.to_vec(),
        }
    }

    fn bearer(p: &Principal) -> Credential {
        Credential::Jwt(keys().issue(p).unwrap().token)
    }

    async fn run(query: &str, credential: Credential) -> Value {
        let response = execute(&schema(), Request::new(query), credential).await;
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
    async fn an_unreachable_service_is_unavailable() {
        let p = principal(&[TenantRole::Renter], &[Scope::Billing]);
        let response = run("{ balance { amount } }", bearer(&p)).await;
        assert_eq!(first_code(&response), "UNAVAILABLE");
    }
}
