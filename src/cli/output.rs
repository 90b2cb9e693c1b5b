//! Tables for people: plain columns, no borders, values as the API sent them.

use comfy_table::{Cell, CellAlignment, Table, presets};
use serde_json::Value;

/// A JSON scalar as a cell: strings unquoted, null as `-`.
pub fn text(value: &Value) -> String {
    match value {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        Value::Bool(true) => "yes".into(),
        Value::Bool(false) => "no".into(),
        other => other.to_string(),
    }
}

/// A decimal string without trailing zeros (`0.450000000` → `0.45`).
pub fn number(value: &Value) -> String {
    match value {
        Value::String(s) => match s.parse::<rust_decimal::Decimal>() {
            Ok(d) => d.normalize().to_string(),
            Err(_) => s.clone(),
        },
        other => text(other),
    }
}

/// Columns whose header is listed in `right` are right-aligned (numbers).
pub fn table(headers: &[&str], right: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut table = Table::new();
    table.load_style(presets::NOTHING);
    table.set_header(headers.iter().map(|h| Cell::new(*h)));
    for row in rows {
        table.add_row(row);
    }
    for (i, header) in headers.iter().enumerate() {
        if right.contains(header)
            && let Some(column) = table.column_mut(i)
        {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    table.trim_fmt()
}

/// Two columns: a label and its value.
pub fn pairs(rows: &[(&str, String)]) -> String {
    let mut table = Table::new();
    table.load_style(presets::NOTHING);
    for (label, value) in rows {
        table.add_row(vec![Cell::new(*label), Cell::new(value)]);
    }
    table.trim_fmt()
}
