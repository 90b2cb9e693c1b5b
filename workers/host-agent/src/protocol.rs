//! The agent's side of the wire protocol: the types and names are
//! `contracts::agent` (one definition for the agent, catalog and the
//! provisioner); what needs the AMQP client is here.

pub use contracts::agent::*;

/// The arguments of `cmd.<machine_id>` holding at most `max_length` commands
/// ([`COMMAND_QUEUE_MAX_LENGTH`] but in tests). Every declaration must use the
/// same ones: the broker refuses a redeclaration with other arguments.
pub fn command_queue_arguments(max_length: i64) -> lapin::types::FieldTable {
    use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
    let mut args = FieldTable::default();
    let mut put = |key: &str, value: AMQPValue| {
        args.insert(ShortString::from(key), value);
    };
    // A classic queue, not a quorum queue: one Erlang process, no Raft log
    // and a few file handles less each, so 100,000 of them fit one broker
    // (docs/scaling.md). Version 2: the classic queue's index that keeps
    // its memory flat with many mostly-empty queues (RabbitMQ 3.10+).
    put(
        "x-queue-type",
        AMQPValue::LongString(LongString::from("classic")),
    );
    put("x-queue-version", AMQPValue::LongLongInt(2));
    // Deleted after ten minutes without a consumer: a machine whose agent is
    // gone costs the broker nothing.
    put(
        "x-expires",
        AMQPValue::LongLongInt(COMMAND_QUEUE_EXPIRES_MS),
    );
    // A command older than that is dropped unread.
    put("x-message-ttl", AMQPValue::LongLongInt(COMMAND_TTL_MS));
    // Bounded: past the limit a publish is nacked rather than dropping the
    // oldest command.
    put("x-max-length", AMQPValue::LongLongInt(max_length));
    put(
        "x-overflow",
        AMQPValue::LongString(LongString::from("reject-publish")),
    );
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_queues_are_bounded_expiring_classic_queues() {
        let args = command_queue_arguments(COMMAND_QUEUE_MAX_LENGTH);
        let args = args.inner();
        let text = |key: &str| match args.get(key) {
            Some(lapin::types::AMQPValue::LongString(s)) => s.to_string(),
            other => panic!("{key}: {other:?}"),
        };
        let number = |key: &str| match args.get(key) {
            Some(lapin::types::AMQPValue::LongLongInt(n)) => *n,
            other => panic!("{key}: {other:?}"),
        };
        assert_eq!(text("x-queue-type"), "classic");
        assert_eq!(text("x-overflow"), "reject-publish");
        assert_eq!(number("x-queue-version"), 2);
        assert_eq!(number("x-expires"), 600_000);
        assert_eq!(number("x-message-ttl"), 600_000);
        assert_eq!(number("x-max-length"), 1000);
    }
}
