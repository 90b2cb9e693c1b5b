//! The GraphQL schema, one root per area merged into `Query` and `Mutation`.
//! It knows nothing of HTTP: the caller's credential arrives as request data.

mod dashboards;
pub mod events;
mod hosting;
mod identity;
mod invoices;
pub mod limits;
mod market;
mod money;
mod numbers;
mod operator;
pub mod payouts;
pub mod platform;
mod quotas;
mod rentals;
mod webhooks;

use std::collections::{HashMap, HashSet};

use async_graphql::parser::types::{ExecutableDocument, Selection, SelectionSet};
use async_graphql::{MergedObject, MergedSubscription, Request, Response, Schema, SchemaBuilder};
use chrono::{DateTime, Utc};

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
    events::LifecycleQuery,
    quotas::QuotasQuery,
    dashboards::DashboardsQuery,
    platform::PlatformQuery,
    operator::OperatorQuery,
    webhooks::WebhooksQuery,
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
    webhooks::WebhooksMutation,
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
    // Depth and cost are checked by `Limits`, which says by how much a
    // request is over.
    .extension(limits::Limits)
}

/// The most fields a request may select once its fragments are expanded:
/// the complexity limit, with room for introspection.
const MAX_EXPANDED_FIELDS: u64 = 5000;

/// Runs one request on behalf of `auth`'s caller; every error in the
/// response carries a code.
pub async fn execute(schema: &GatewaySchema, request: Request, auth: RequestAuth) -> Response {
    if let Some(refused) = refused(&request) {
        return refused;
    }
    let mut response = schema.execute(request.data(auth)).await;
    ensure_codes(&mut response);
    response
}

/// The coded error for a request refused before execution, over HTTP or a
/// WebSocket: one whose fragments expand past the field limit, that selects
/// more expensive fields than the cost limit allows (counted here, before
/// async-graphql's validation, whose work grows with the aliases), or that
/// carries NUL.
pub(crate) fn refused(request: &Request) -> Option<Response> {
    let message = if has_nul(request) {
        // No stored text can hold NUL (Postgres refuses it), so it would
        // fail deep in a service as an internal error.
        "text inputs may not contain the NUL character".to_owned()
    } else if let Some(message) = numbers::inexact(request) {
        message
    } else {
        match expanded_fields(&request.query) {
            Some(count) if count.fields > MAX_EXPANDED_FIELDS => format!(
                "query selects {} fields once its fragments are expanded, over the limit of {MAX_EXPANDED_FIELDS}",
                count.fields
            ),
            Some(count)
                if count
                    .expensive
                    .saturating_mul(limits::EXPENSIVE_FIELD as u64)
                    > limits::MAX_COMPLEXITY as u64 =>
            {
                format!(
                    "query is too complex: it selects {} expensive fields (series, offer \
                     searches, the operator overview; {} each), the limit is {}",
                    count.expensive,
                    limits::EXPENSIVE_FIELD,
                    limits::MAX_COMPLEXITY
                )
            }
            _ => return None,
        }
    };
    let mut response = Response::from_errors(vec![async_graphql::ServerError::new(message, None)]);
    ensure_codes(&mut response);
    Some(response)
}

/// Whether the request carries a NUL character in its query (raw, or as the
/// GraphQL escape `\u0000`) or in any variable.
fn has_nul(request: &Request) -> bool {
    fn in_value(value: &async_graphql::Value) -> bool {
        match value {
            async_graphql::Value::String(s) => s.contains('\0'),
            async_graphql::Value::List(items) => items.iter().any(in_value),
            async_graphql::Value::Object(fields) => fields
                .iter()
                .any(|(name, v)| name.contains('\0') || in_value(v)),
            _ => false,
        }
    }
    request.query.contains('\0')
        || request.query.contains("\\u0000")
        || request.variables.values().any(in_value)
}

/// The fields that cost [`limits::EXPENSIVE_FIELD`] (their resolvers carry
/// that complexity); matched by name wherever they appear, which can only
/// overcount.
const EXPENSIVE_FIELDS: [&str; 7] = [
    "usageSeries",
    "earningsByMachine",
    "balanceHistory",
    "offers",
    "volume",
    "gpuSupply",
    "nearQuota",
];

/// Fields selected with every fragment spread expanded, and how many of
/// them are expensive.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct FieldCount {
    fields: u64,
    expensive: u64,
}

impl FieldCount {
    fn add(self, other: Self) -> Self {
        Self {
            fields: self.fields.saturating_add(other.fields),
            expensive: self.expensive.saturating_add(other.expensive),
        }
    }
}

/// What `query` selects with every fragment spread expanded, or None when
/// it does not parse (execution reports that). async-graphql's validation
/// walks each spread anew, so fragments that each spread the previous one
/// twice cost 2^n before the complexity limit is reached; this counts each
/// fragment once and multiplies.
fn expanded_fields(query: &str) -> Option<FieldCount> {
    let document = async_graphql::parser::parse_query(query).ok()?;
    let mut counted = HashMap::new();
    let mut total = FieldCount::default();
    for (_, operation) in document.operations.iter() {
        let count = count_selection(
            &document,
            &operation.node.selection_set.node,
            &mut counted,
            &mut HashSet::new(),
        );
        total = total.add(count);
    }
    Some(total)
}

fn count_selection(
    document: &ExecutableDocument,
    set: &SelectionSet,
    counted: &mut HashMap<String, FieldCount>,
    visiting: &mut HashSet<String>,
) -> FieldCount {
    let mut total = FieldCount::default();
    for item in &set.items {
        let count = match &item.node {
            Selection::Field(field) => {
                let expensive = EXPENSIVE_FIELDS.contains(&field.node.name.node.as_str());
                count_selection(document, &field.node.selection_set.node, counted, visiting).add(
                    FieldCount {
                        fields: 1,
                        expensive: u64::from(expensive),
                    },
                )
            }
            Selection::InlineFragment(inline) => {
                count_selection(document, &inline.node.selection_set.node, counted, visiting)
            }
            Selection::FragmentSpread(spread) => {
                let name = spread.node.fragment_name.node.as_str();
                match counted.get(name) {
                    Some(count) => *count,
                    // A cycle is a validation error reported by execution.
                    None if visiting.contains(name) => FieldCount::default(),
                    None => match document.fragments.get(name) {
                        None => FieldCount::default(),
                        Some(fragment) => {
                            visiting.insert(name.to_owned());
                            let count = count_selection(
                                document,
                                &fragment.node.selection_set.node,
                                counted,
                                visiting,
                            );
                            visiting.remove(name);
                            counted.insert(name.to_owned(), count);
                            count
                        }
                    },
                }
            }
        };
        total = total.add(count);
    }
    total
}

/// Instants as the API shows them: RFC 3339, microseconds, UTC.
fn instant(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
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

    #[test]
    fn fragments_are_counted_expanded_without_expanding_them() {
        let mut query = String::from("{ balance { ...f30 } }\nfragment f0 on Money { amount }\n");
        for i in 1..=30 {
            query.push_str(&format!(
                "fragment f{i} on Money {{ ...f{p} ...f{p} }}\n",
                p = i - 1
            ));
        }
        let fields = |q: &str| expanded_fields(q).map(|c| c.fields);
        // 2^30 amounts and the balance itself.
        assert_eq!(fields(&query), Some((1 << 30) + 1));
        assert_eq!(fields("{ a: me { id } b: me { id } }"), Some(4));
        assert_eq!(fields("{ broken"), None);
        // A cycle is left for validation to report.
        assert_eq!(
            fields("{ me { ...a } } fragment a on Me { id ...a }"),
            Some(2)
        );
        assert_eq!(
            expanded_fields(
                "{ a: offers { nodes { id } } ...f } fragment f on Query { b: usageSeries { points } }"
            ),
            Some(FieldCount {
                fields: 5,
                expensive: 2
            })
        );
    }

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
            tenant_id: Uuid::now_v7(),
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
