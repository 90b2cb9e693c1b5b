//! Each column that stores a wire enum of `contracts::states` takes exactly
//! that enum's names (migration 2026-12-07-000300): the database refuses a
//! state the Rust type could not load, and the two lists cannot drift.

use std::collections::BTreeSet;

use contracts::states::{
    InstanceEventKind, InstanceState, InvoiceStatus, Meter, PayoutStatus, RentalType,
    StatementStatus,
};
use diesel::prelude::*;
use diesel::sql_types::Text;
use platform::test_db::TestDb;

#[derive(QueryableByName)]
struct Definition {
    #[diesel(sql_type = Text)]
    definition: String,
}

/// The quoted names in the CHECK constraints of `table` that mention
/// `column` (Postgres prints `col = ANY (ARRAY['a'::text, ...])`).
fn allowed(conn: &mut PgConnection, table: &str, column: &str) -> BTreeSet<String> {
    let (schema, name) = table.split_once('.').expect("schema.table");
    let defs: Vec<Definition> = diesel::sql_query(
        "SELECT pg_get_constraintdef(c.oid) AS definition FROM pg_constraint c \
         JOIN pg_class t ON t.oid = c.conrelid JOIN pg_namespace n ON n.oid = t.relnamespace \
         WHERE n.nspname = $1 AND t.relname = $2 AND c.contype = 'c' \
           AND pg_get_constraintdef(c.oid) LIKE '%' || $3 || ' = ANY%'",
    )
    .bind::<Text, _>(schema)
    .bind::<Text, _>(name)
    .bind::<Text, _>(column)
    .load(conn)
    .expect("constraints");
    assert!(
        !defs.is_empty(),
        "{table}.{column} has no CHECK of its names"
    );
    quoted_names(
        &defs
            .iter()
            .map(|d| d.definition.as_str())
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// Every `'name'::text` in `text`.
fn quoted_names(text: &str) -> BTreeSet<String> {
    text.split('\'')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, s)| s.to_owned())
        .collect()
}

fn names<T: std::fmt::Display>(all: &[T]) -> BTreeSet<String> {
    all.iter().map(ToString::to_string).collect()
}

#[test]
fn every_state_column_takes_exactly_its_enums_names() {
    let db = TestDb::new("states").expect("test database");
    let mut conn = db.conn().expect("connect");
    let states = names(InstanceState::ALL);
    let meters = names(Meter::ALL);
    let mut line_meters = meters.clone();
    line_meters.insert("unknown".into());
    // Reserved blocks (issue 20) make lines of their own: the renter's
    // purchases, refunds, penalties and resales; the host's releases.
    use billing::escrow_kinds::line;
    let mut invoice_meters = line_meters.clone();
    invoice_meters.extend(
        [
            line::PURCHASE,
            line::REFUND,
            line::PENALTY,
            line::RESALE_PURCHASE,
            line::RESALE_SALE,
        ]
        .map(String::from),
    );
    line_meters.insert(line::PURCHASE.into());
    let cases: Vec<(&str, &str, BTreeSet<String>)> = vec![
        ("ordering.instances", "state", states.clone()),
        ("ordering.instances", "rental_type", names(RentalType::ALL)),
        ("ordering.orders", "state", states.clone()),
        ("ordering.orders", "rental_type", names(RentalType::ALL)),
        ("ordering.instance_transitions", "to_state", states.clone()),
        (
            "ordering.instance_events",
            "kind",
            names(InstanceEventKind::ALL),
        ),
        ("ordering.instance_events", "to_state", states.clone()),
        ("catalog.allocations", "rental_type", names(RentalType::ALL)),
        ("metering.intervals", "meter", meters.clone()),
        ("billing.usage_details", "meter", meters.clone()),
        ("billing.invoice_lines", "meter", invoice_meters),
        ("billing.statement_lines", "meter", line_meters),
        ("billing.invoices", "status", names(InvoiceStatus::ALL)),
        ("billing.statements", "status", names(StatementStatus::ALL)),
        ("billing.payouts", "status", names(PayoutStatus::ALL)),
    ];
    for (table, column, expected) in cases {
        let found = allowed(&mut conn, table, column);
        assert!(
            expected.is_subset(&found) && found.is_subset(&expected),
            "{table}.{column}: the database allows {found:?}, the enum names {expected:?}"
        );
    }
}
