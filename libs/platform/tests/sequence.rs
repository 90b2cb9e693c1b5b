//! platform::sequence against a real database: numbers per resource, from
//! 1, in commit order, and the set-based form.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::mpsc;
use std::time::Duration;

use diesel::connection::SimpleConnection;
use gpumarket_platform::sequence::{next, next_many};
use gpumarket_platform::test_db::TestDb;

/// Two transactions on one resource: the one that starts first (its
/// `now()` is earlier) but takes its number second waits for the other's
/// commit and gets the larger number, so the numbers follow commit order
/// where a timestamp would not.
#[test]
fn numbers_increase_in_commit_order() {
    let db = TestDb::new("sequence_order").expect("test database");
    let mut first = db.conn().expect("connect");
    let mut second = db.conn().expect("connect");
    assert_eq!(next(&mut first, "billing", "invoice:a").expect("next"), 1);

    // `second` begins before `first` takes its number.
    second
        .batch_execute("BEGIN; SELECT now();")
        .expect("begin second");
    first.batch_execute("BEGIN").expect("begin first");
    assert_eq!(next(&mut first, "billing", "invoice:a").expect("next"), 2);

    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let seq = next(&mut second, "billing", "invoice:a").expect("next");
        second.batch_execute("COMMIT").expect("commit second");
        tx.send(seq).expect("send");
    });
    // While `first` is open, `second` waits on the resource's row lock.
    assert!(rx.recv_timeout(Duration::from_millis(300)).is_err());
    first.batch_execute("COMMIT").expect("commit first");
    let seq = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("second ran");
    assert_eq!(seq, 3);
    waiter.join().expect("waiter");

    // Other resources and schemas count on their own; a rollback gives its
    // number back.
    let mut conn = db.conn().expect("connect");
    assert_eq!(next(&mut conn, "billing", "invoice:b").expect("next"), 1);
    assert_eq!(next(&mut conn, "catalog", "invoice:a").expect("next"), 1);
    conn.batch_execute("BEGIN").expect("begin");
    assert_eq!(next(&mut conn, "billing", "invoice:b").expect("next"), 2);
    conn.batch_execute("ROLLBACK").expect("rollback");
    assert_eq!(next(&mut conn, "billing", "invoice:b").expect("next"), 2);
}

/// The set-based form numbers each occurrence in the order given, a
/// repeated resource with consecutive numbers.
#[test]
fn many_at_once_number_each_occurrence_in_order() {
    let db = TestDb::new("sequence_many").expect("test database");
    let mut conn = db.conn().expect("connect");
    assert!(
        next_many(&mut conn, "catalog", &[])
            .expect("none")
            .is_empty()
    );
    assert_eq!(next(&mut conn, "catalog", "machine:b").expect("next"), 1);
    let resources: Vec<String> = [
        "machine:c",
        "machine:b",
        "machine:c",
        "machine:a",
        "machine:c",
    ]
    .iter()
    .map(|r| (*r).to_owned())
    .collect();
    assert_eq!(
        next_many(&mut conn, "catalog", &resources).expect("many"),
        vec![1, 2, 2, 1, 3]
    );
    assert_eq!(next(&mut conn, "catalog", "machine:c").expect("next"), 4);
}
