//! What a request must stay within before it runs, and its faults in plain
//! words: depth and cost limits (an expensive field costs
//! [`EXPENSIVE_FIELD`], not 1), how many expensive requests one caller runs
//! at once, and parser and validation messages rewritten without the raw
//! parser excerpt.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use async_graphql::extensions::{
    Extension, ExtensionContext, ExtensionFactory, NextParseQuery, NextValidation,
};
use async_graphql::parser::types::{ExecutableDocument, Selection, SelectionSet};
use async_graphql::{ServerError, ServerResult, ValidationResult, Variables};
use contracts::ErrorCode;

use crate::caller::{CallerKey, ConcurrencyGate, GatePass, count_refusal};

/// How deep a selection may nest.
pub const MAX_DEPTH: usize = 12;

/// The most a request may cost: each field 1 plus its children, an
/// expensive one [`EXPENSIVE_FIELD`] plus its children.
pub const MAX_COMPLEXITY: usize = 2000;

/// The cost of a field that makes a service scan many rows or call several
/// services: the series, the offer search (with why-no-offers), the
/// operator overview. Twenty of them fill a request.
pub const EXPENSIVE_FIELD: usize = 100;

/// Expensive requests one caller may run at once; the next is refused with
/// RATE_LIMITED rather than queued behind its own.
pub const MAX_EXPENSIVE_AT_ONCE: usize = 4;

/// The schema extension that applies the above; the gate is schema data
/// (`Arc<ConcurrencyGate>`) and the caller request data (`CallerKey`), both
/// absent in unit tests and on WebSockets, where the gate does not apply.
pub struct Limits;

impl ExtensionFactory for Limits {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(LimitsExtension::default())
    }
}

/// One per request: it holds the request's gate pass until it is dropped
/// with the request.
#[derive(Default)]
struct LimitsExtension {
    pass: Mutex<Option<GatePass>>,
}

#[async_trait::async_trait]
impl Extension for LimitsExtension {
    async fn parse_query(
        &self,
        ctx: &ExtensionContext<'_>,
        query: &str,
        variables: &Variables,
        next: NextParseQuery<'_>,
    ) -> ServerResult<ExecutableDocument> {
        next.run(ctx, query, variables).await.map_err(|error| {
            // async-graphql follows fragment spreads to a fixed depth
            // while parsing, so a fragment cycle ends there, not at the
            // validation rule that would name it.
            if error
                .message
                .starts_with("The recursion depth of the query")
            {
                let mut error = error;
                error.message = match fragment_cycle(query) {
                    Some(name) => cycle_message(&name),
                    None => "query is nested too deep: over 32 levels of selections and \
                             fragment spreads"
                        .to_owned(),
                };
                return error;
            }
            plain_parse_error(error)
        })
    }

    async fn validation(
        &self,
        ctx: &ExtensionContext<'_>,
        next: NextValidation<'_>,
    ) -> Result<ValidationResult, Vec<ServerError>> {
        let result = next.run(ctx).await.map_err(|errors| {
            errors
                .into_iter()
                .map(plain_validation_error)
                .collect::<Vec<_>>()
        })?;
        if result.depth > MAX_DEPTH {
            return Err(vec![ServerError::new(
                format!(
                    "query is nested too deep: {} levels, the limit is {MAX_DEPTH}",
                    result.depth
                ),
                None,
            )]);
        }
        if result.complexity > MAX_COMPLEXITY {
            return Err(vec![ServerError::new(
                format!(
                    "query is too complex: it costs {}, the limit is {MAX_COMPLEXITY} \
                     (a field costs 1; series, offer searches and the operator overview \
                     cost {EXPENSIVE_FIELD} each)",
                    result.complexity
                ),
                None,
            )]);
        }
        if result.complexity >= EXPENSIVE_FIELD
            && let (Some(gate), Some(caller)) = (
                ctx.data_opt::<Arc<ConcurrencyGate>>(),
                ctx.data_opt::<CallerKey>(),
            )
        {
            let Some(pass) = gate.enter(*caller, MAX_EXPENSIVE_AT_ONCE) else {
                count_refusal("concurrency_limited");
                let mut error = ServerError::new(
                    format!(
                        "too many expensive requests at once: at most \
                         {MAX_EXPENSIVE_AT_ONCE} may run per caller; retry when one is done"
                    ),
                    None,
                );
                let mut extensions = async_graphql::ErrorExtensionValues::default();
                extensions.set("code", ErrorCode::RateLimited.as_str());
                extensions.set("retryAfterSeconds", 1);
                error.extensions = Some(extensions);
                return Err(vec![error]);
            };
            *self
                .pass
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(pass);
        }
        Ok(result)
    }
}

/// A syntax error as `syntax error at line L, column C: expected ...`,
/// without pest's excerpt of the query (the client has the query).
fn plain_parse_error(mut error: ServerError) -> ServerError {
    if error.message.starts_with("recursion limit exceeded") {
        error.message = "query is nested too deep for the parser".to_owned();
        return error;
    }
    // pest's message: " --> 1:7\n  |\n1 | { me {\n  |       ^---\n  |\n  = expected selection"
    if let Some(expected) = error
        .message
        .lines()
        .rev()
        .find_map(|line| line.trim_start().strip_prefix("= "))
    {
        let expected = expected.trim().to_owned();
        error.message = match error.locations.first() {
            Some(at) => format!(
                "syntax error at line {}, column {}: {expected}",
                at.line, at.column
            ),
            None => format!("syntax error: {expected}"),
        };
    }
    error
}

fn cycle_message(name: &str) -> String {
    format!(
        "fragment cycle: fragment \"{name}\" spreads itself, directly or through other fragments"
    )
}

/// The name of a fragment that spreads itself, directly or through others.
fn fragment_cycle(query: &str) -> Option<String> {
    fn spreads(set: &SelectionSet, out: &mut Vec<String>) {
        for item in &set.items {
            match &item.node {
                Selection::Field(field) => spreads(&field.node.selection_set.node, out),
                Selection::InlineFragment(inline) => {
                    spreads(&inline.node.selection_set.node, out);
                }
                Selection::FragmentSpread(spread) => {
                    out.push(spread.node.fragment_name.node.to_string());
                }
            }
        }
    }
    let document = async_graphql::parser::parse_query(query).ok()?;
    let graph: HashMap<String, Vec<String>> = document
        .fragments
        .iter()
        .map(|(name, fragment)| {
            let mut out = Vec::new();
            spreads(&fragment.node.selection_set.node, &mut out);
            (name.to_string(), out)
        })
        .collect();
    // Depth-first from each fragment; a fragment met again on the current
    // path closes a cycle. Done fragments are not walked twice.
    fn walk(
        name: &str,
        graph: &HashMap<String, Vec<String>>,
        path: &mut HashSet<String>,
        done: &mut HashSet<String>,
    ) -> Option<String> {
        if path.contains(name) {
            return Some(name.to_owned());
        }
        if !done.insert(name.to_owned()) {
            return None;
        }
        path.insert(name.to_owned());
        for next in graph.get(name).into_iter().flatten() {
            if let Some(found) = walk(next, graph, path, done) {
                return Some(found);
            }
        }
        path.remove(name);
        None
    }
    let mut done = HashSet::new();
    let mut names: Vec<&String> = graph.keys().collect();
    names.sort();
    names
        .into_iter()
        .find_map(|name| walk(name, &graph, &mut HashSet::new(), &mut done))
}

/// Validation messages that name a rule's mechanics in plain words.
fn plain_validation_error(mut error: ServerError) -> ServerError {
    if let Some(name) = error
        .message
        .strip_prefix("Cannot spread fragment \"")
        .and_then(|rest| rest.strip_suffix('"'))
    {
        error.message = cycle_message(name);
    }
    error
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_syntax_error_loses_the_excerpt_but_keeps_the_place() {
        let error: ServerError = async_graphql::parser::parse_query("{ me { ")
            .unwrap_err()
            .into();
        assert!(error.message.contains('|'), "{}", error.message);
        let plain = plain_parse_error(error);
        assert!(
            plain.message.starts_with("syntax error at line 1, column "),
            "{}",
            plain.message
        );
        assert!(!plain.message.contains('|'), "{}", plain.message);
        assert!(!plain.message.contains('\n'), "{}", plain.message);
    }

    #[test]
    fn a_fragment_cycle_is_named() {
        let plain = plain_validation_error(ServerError::new("Cannot spread fragment \"a\"", None));
        assert!(
            plain.message.starts_with("fragment cycle: fragment \"a\""),
            "{}",
            plain.message
        );
        assert_eq!(
            fragment_cycle(
                "{ a { ...x } } fragment x on A { ...y } fragment y on A { b { ...x } }"
            )
            .as_deref(),
            Some("x")
        );
        assert_eq!(
            fragment_cycle("{ a { ...x ...y } } fragment x on A { ...y } fragment y on A { b }"),
            None
        );
        let other = plain_validation_error(ServerError::new("Unknown field \"x\"", None));
        assert_eq!(other.message, "Unknown field \"x\"");
    }
}
