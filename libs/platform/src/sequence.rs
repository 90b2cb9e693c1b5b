//! Per-resource sequence numbers for the events a service publishes: each
//! event of a resource (an invoice, a machine, a renter's balance) carries
//! the next number of that resource, so a receiver can put the resource's
//! events in order although their delivery order is not guaranteed.
//!
//! The number is taken in the transaction that makes the change and writes
//! its outbox row: the upsert on `<schema>.resource_sequences` holds the
//! resource's row lock until commit, so a concurrent transaction on the same
//! resource waits and takes the next number. For one resource the numbers
//! therefore increase in commit order (a timestamp taken in the transaction
//! does not: two transactions can commit in the opposite order of their
//! `now()`). Numbers start at 1; a rolled-back transaction gives its number
//! back, so they have no gaps either.
//!
//! Callers that take several resources in one transaction take them in a
//! consistent order ([`next_many`] sorts them), so two such transactions
//! cannot deadlock on each other's counters.

use std::collections::HashMap;

use diesel::pg::PgConnection;
use diesel::sql_types::{Array, BigInt, Text};
use diesel::{QueryableByName, RunQueryDsl};

#[derive(QueryableByName)]
struct Taken {
    #[diesel(sql_type = Text)]
    resource: String,
    #[diesel(sql_type = BigInt)]
    seq: i64,
}

/// The next number of `resource` in `<schema>.resource_sequences` (1 for its
/// first event), held until the caller's transaction ends.
pub fn next(
    conn: &mut PgConnection,
    schema: &str,
    resource: &str,
) -> Result<i64, diesel::result::Error> {
    let taken: Taken = diesel::sql_query(format!(
        "INSERT INTO {schema}.resource_sequences AS s (resource, seq) VALUES ($1, 1) \
         ON CONFLICT (resource) DO UPDATE SET seq = s.seq + 1 \
         RETURNING resource, seq"
    ))
    .bind::<Text, _>(resource)
    .get_result(conn)?;
    Ok(taken.seq)
}

/// [`next`] for many resources in one statement (the set-based runs), in the
/// order given: a resource named `n` times gets `n` consecutive numbers, the
/// first occurrence the smallest (an invoice finalized and paid in one run
/// is 1 then 2). The counters are locked in sorted order.
pub fn next_many(
    conn: &mut PgConnection,
    schema: &str,
    resources: &[String],
) -> Result<Vec<i64>, diesel::result::Error> {
    if resources.is_empty() {
        return Ok(Vec::new());
    }
    let mut counts: HashMap<&str, i64> = HashMap::new();
    for r in resources {
        *counts.entry(r.as_str()).or_default() += 1;
    }
    let mut distinct: Vec<&str> = counts.keys().copied().collect();
    distinct.sort_unstable();
    let added: Vec<i64> = distinct.iter().map(|r| counts[r]).collect();
    let taken: Vec<Taken> = diesel::sql_query(format!(
        "INSERT INTO {schema}.resource_sequences AS s (resource, seq) \
         SELECT t.resource, t.n FROM unnest($1::text[], $2::bigint[]) \
             WITH ORDINALITY AS t(resource, n, i) ORDER BY t.i \
         ON CONFLICT (resource) DO UPDATE SET seq = s.seq + excluded.seq \
         RETURNING resource, seq"
    ))
    .bind::<Array<Text>, _>(&distinct)
    .bind::<Array<BigInt>, _>(&added)
    .load(conn)?;
    // The first number each resource's occurrences take, counted up below.
    let mut first: HashMap<String, i64> = taken
        .into_iter()
        .map(|t| {
            let n = counts.get(t.resource.as_str()).copied().unwrap_or(1);
            (t.resource, t.seq - n + 1)
        })
        .collect();
    resources
        .iter()
        .map(|r| {
            let slot = first.get_mut(r.as_str()).ok_or_else(|| {
                diesel::result::Error::QueryBuilderError(
                    format!("no sequence returned for {r}").into(),
                )
            })?;
            let seq = *slot;
            *slot += 1;
            Ok(seq)
        })
        .collect()
}
