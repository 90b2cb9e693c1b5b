//! Guards that refuse a request before it is parsed, over HTTP and over
//! WebSocket alike (an async-graphql extension's `prepare_request`): text
//! carrying NUL, a number that is not an exact amount, fragments that expand
//! past the field limit, and more expensive fields than the cost limit
//! allows. They count before async-graphql's validation, whose work grows
//! with the aliases and fragment spreads it walks. The executors give the
//! error its code (`crate::error::ensure_codes`), as for every other error.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use async_graphql::extensions::{
    Extension, ExtensionContext, ExtensionFactory, NextPrepareRequest,
};
use async_graphql::parser::types::{ExecutableDocument, Selection, SelectionSet};
use async_graphql::{Request, ServerError, ServerResult};

/// The guards, as the schema's first extension.
pub struct Guards;

impl ExtensionFactory for Guards {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(GuardsExtension)
    }
}

struct GuardsExtension;

#[async_trait::async_trait]
impl Extension for GuardsExtension {
    async fn prepare_request(
        &self,
        ctx: &ExtensionContext<'_>,
        request: Request,
        next: NextPrepareRequest<'_>,
    ) -> ServerResult<Request> {
        if let Some(message) = refused(&request) {
            return Err(ServerError::new(message, None));
        }
        next.run(ctx, request).await
    }
}

/// The most fields a request may select once its fragments are expanded:
/// the complexity limit, with room for introspection.
const MAX_EXPANDED_FIELDS: u64 = 5000;

/// Why a request is refused before execution, over HTTP or a WebSocket: one whose fragments expand past the field limit, that selects
/// more expensive fields than the cost limit allows (counted here, before
/// async-graphql's validation, whose work grows with the aliases), or that
/// carries NUL.
fn refused(request: &Request) -> Option<String> {
    let message = if has_nul(request) {
        // No stored text can hold NUL (Postgres refuses it), so it would
        // fail deep in a service as an internal error.
        "text inputs may not contain the NUL character".to_owned()
    } else if let Some(message) = super::numbers::inexact(request) {
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
                    .saturating_mul(super::limits::EXPENSIVE_FIELD as u64)
                    > super::limits::MAX_COMPLEXITY as u64 =>
            {
                format!(
                    "query is too complex: it selects {} expensive fields (series, offer \
                     searches, the operator overview; {} each), the limit is {}",
                    count.expensive,
                    super::limits::EXPENSIVE_FIELD,
                    super::limits::MAX_COMPLEXITY
                )
            }
            _ => return None,
        }
    };
    Some(message)
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

/// The fields that cost [`super::limits::EXPENSIVE_FIELD`] (their resolvers carry
/// that complexity); matched by name wherever they appear, which can only
/// overcount.
const EXPENSIVE_FIELDS: [&str; 9] = [
    "usageSeries",
    "earningsByMachine",
    "balanceHistory",
    "offers",
    "volume",
    "gpuSupply",
    "nearQuota",
    "machineCalendar",
    "resaleListings",
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
