//! Refuses a fractional number literal (in the query or in a variable) that
//! needs more than 9 decimal places. The schema has no `Float`: every such
//! number is meant as a `Decimal`, and async-graphql's `Decimal` scalar takes
//! a JSON number through `f64`, so `1e-30` became exactly 0 before any
//! resolver could see it ("above your maximum of 0"). Amounts are best sent as
//! strings ("2.49"); a number is accepted when it is an exact amount.

use async_graphql::parser::types::{ExecutableDocument, Selection, SelectionSet};
use async_graphql::{Name, Request, Value, Variables};
use rust_decimal::Decimal;
use std::str::FromStr;

use contracts::bounds::MAX_DECIMAL_PLACES;

/// The error message for the first inexact number, or None.
pub(crate) fn inexact(request: &Request) -> Option<String> {
    match async_graphql::parser::parse_query(&request.query) {
        Ok(document) => in_document(&document, &request.variables),
        // A query that does not parse is reported by execution; its
        // variables are still worth naming.
        Err(_) => request
            .variables
            .iter()
            .find_map(|(name, value)| in_value(name.as_str(), value)),
    }
}

fn in_document(document: &ExecutableDocument, variables: &Variables) -> Option<String> {
    for (_, operation) in document.operations.iter() {
        for variable in &operation.node.variable_definitions {
            if let Some(default) = &variable.node.default_value
                && let Some(m) = in_value(variable.node.name.node.as_str(), &default.node)
            {
                return Some(m);
            }
        }
        if let Some(m) = in_selection(&operation.node.selection_set.node, variables) {
            return Some(m);
        }
    }
    document
        .fragments
        .values()
        .find_map(|f| in_selection(&f.node.selection_set.node, variables))
}

fn in_selection(set: &SelectionSet, variables: &Variables) -> Option<String> {
    set.items.iter().find_map(|item| match &item.node {
        Selection::Field(field) => field
            .node
            .arguments
            .iter()
            .find_map(|(name, value)| {
                // A variable is checked where it is used, so that the error
                // names the argument or input field rather than `$v`.
                let value = value.node.clone().into_const_with(|var| {
                    Ok::<_, ()>(variables.get(&var).cloned().unwrap_or(Value::Null))
                });
                value.ok().and_then(|v| in_value(name.node.as_str(), &v))
            })
            .or_else(|| in_selection(&field.node.selection_set.node, variables)),
        Selection::InlineFragment(inline) => {
            in_selection(&inline.node.selection_set.node, variables)
        }
        Selection::FragmentSpread(_) => None,
    })
}

/// `name` is the innermost argument, field or variable holding the value.
fn in_value(name: &str, value: &Value) -> Option<String> {
    match value {
        Value::Number(n) if n.as_i64().is_none() && n.as_u64().is_none() => {
            let f = n.as_f64()?;
            // Display prints the shortest text that reads back as `f`, never
            // with an exponent: 1e-30 is "0.000…001" with 30 places.
            let exact = Decimal::from_str(&format!("{f}"))
                .is_ok_and(|d| d.scale() <= MAX_DECIMAL_PLACES && (f == 0.0 || !d.is_zero()));
            (!exact).then(|| {
                format!(
                    "{name}: must be a decimal amount with at most {MAX_DECIMAL_PLACES} decimal places (got {f:?}); send amounts as strings such as \"2.49\""
                )
            })
        }
        Value::List(items) => items.iter().find_map(|v| in_value(name, v)),
        Value::Object(fields) => fields
            .iter()
            .find_map(|(key, v): (&Name, &Value)| in_value(key.as_str(), v)),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn query(q: &str) -> Option<String> {
        inexact(&Request::new(q))
    }

    #[test]
    fn tiny_literals_are_refused_with_their_field() {
        let m = query(r#"mutation { createOrder(input: {gpuCount: 1, maxPricePerGpuHour: 1e-30, idempotencyKey: "k"}) { id } }"#)
            .unwrap();
        assert!(m.starts_with("maxPricePerGpuHour: "), "{m}");
        assert!(query("{ offers(filter: {maxPricePerGpuHour: 0.0000000001}) { id } }").is_some());
    }

    #[test]
    fn exact_numbers_pass() {
        assert!(query("{ offers(filter: {maxPricePerGpuHour: 2.49}) { id } }").is_none());
        assert!(query("{ offers(filter: {maxPricePerGpuHour: 0.000000001}) { id } }").is_none());
        assert!(query("{ offers(first: 5) { id } }").is_none());
        assert!(query(r#"{ offers(filter: {maxPricePerGpuHour: "1e-30"}) { id } }"#).is_none());
    }

    #[test]
    fn variables_are_checked() {
        let vars = async_graphql::Variables::from_json(serde_json::json!({
            "input": { "gpuCount": 1, "bidPerGpuHour": 1e-30 }
        }));
        let m = inexact(
            &Request::new(
                "mutation($input: CreateOrderInput!) { createOrder(input: $input) { id } }",
            )
            .variables(vars),
        )
        .unwrap();
        assert!(m.starts_with("bidPerGpuHour: "), "{m}");
    }
}
