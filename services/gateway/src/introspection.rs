//! Production keeps the schema's introspection (`__schema`, `__type`) for
//! logged-in callers: an anonymous one gets UNAUTHENTICATED before anything
//! runs. Development leaves it open (GraphiQL needs it). The published SDL
//! (api-specs/graphql/schema.graphql) is the same either way; this only
//! stops an anonymous scanner from mapping a deployment cheaply.

use std::sync::Arc;

use async_graphql::extensions::{
    Extension, ExtensionContext, ExtensionFactory, NextPrepareRequest,
};
use async_graphql::{Request, ServerError, ServerResult};

use crate::auth::{JwtKeys, RequestAuth};
use crate::clients::Clients;

/// Registered on the schema in production only.
pub struct LoggedInOnly;

impl ExtensionFactory for LoggedInOnly {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(LoggedInOnlyExtension)
    }
}

struct LoggedInOnlyExtension;

#[async_trait::async_trait]
impl Extension for LoggedInOnlyExtension {
    async fn prepare_request(
        &self,
        ctx: &ExtensionContext<'_>,
        request: Request,
        next: NextPrepareRequest<'_>,
    ) -> ServerResult<Request> {
        if mentions_introspection(&request.query) {
            let auth = request
                .data
                .get(&std::any::TypeId::of::<RequestAuth>())
                .and_then(|d| d.downcast_ref::<RequestAuth>());
            let logged_in = match (auth, ctx.data_opt::<JwtKeys>(), ctx.data_opt::<Clients>()) {
                (Some(auth), Some(keys), Some(clients)) => {
                    auth.resolve(keys, clients).await.is_ok()
                }
                _ => false,
            };
            if !logged_in {
                let mut error = ServerError::new(
                    "introspection needs a logged-in caller in production (the schema is published as api-specs/graphql/schema.graphql)",
                    None,
                );
                error
                    .extensions
                    .get_or_insert_with(Default::default)
                    .set("code", contracts::ErrorCode::Unauthenticated.as_str());
                return Err(error);
            }
        }
        next.run(ctx, request).await
    }
}

/// Whether the query text names an introspection root field. GraphQL names
/// cannot be escaped, so every introspection query contains one of these;
/// `__typename` is not introspection of the schema and stays open.
fn mentions_introspection(query: &str) -> bool {
    query.contains("__schema")
        || query
            .match_indices("__type")
            .any(|(at, _)| !query[at..].starts_with("__typename"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn introspection_roots_are_found_and_typename_is_not() {
        assert!(mentions_introspection("{ __schema { types { name } } }"));
        assert!(mentions_introspection(
            "{ __type(name: \"Query\") { name } }"
        ));
        assert!(mentions_introspection(
            "{ __typename __type(name: \"X\") { name } }"
        ));
        assert!(!mentions_introspection(
            "{ __typename offers { nodes { id } } }"
        ));
    }
}
