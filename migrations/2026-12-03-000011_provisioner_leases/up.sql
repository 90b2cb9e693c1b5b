-- Jobs are driven from the database: a delivery only records the job (and
-- is acked); workers claim runnable rows with FOR UPDATE SKIP LOCKED under a
-- lease they renew while a step runs. See docs/provisioning.md.
ALTER TABLE provisioner.jobs
    ADD COLUMN owner            TEXT,
    ADD COLUMN lease_until      TIMESTAMPTZ,
    ADD COLUMN next_attempt_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    ADD COLUMN deadline         TIMESTAMPTZ NOT NULL DEFAULT now() + interval '30 minutes',
    -- The command envelope as it arrived and its routing key: what is
    -- dead-lettered when the job dies.
    ADD COLUMN command          JSONB,
    ADD COLUMN routing_key      TEXT,
    -- Set once ordering has heard the outcome (or the job needs no report).
    ADD COLUMN reported_at      TIMESTAMPTZ,
    ADD COLUMN dead_lettered_at TIMESTAMPTZ;

-- Jobs that ended before leases existed were reported by their delivery.
UPDATE provisioner.jobs SET reported_at = coalesce(finished_at, now()) WHERE status <> 'running';

CREATE INDEX jobs_runnable ON provisioner.jobs (next_attempt_at) WHERE reported_at IS NULL;

-- Progress events (provisioner.instance.step) and dead letters leave through
-- the transactional outbox, in the transaction that records them.
CREATE TABLE provisioner.outbox (
    seq          BIGSERIAL PRIMARY KEY,
    id           UUID NOT NULL UNIQUE,
    exchange     TEXT NOT NULL,
    routing_key  TEXT NOT NULL,
    body         JSONB NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    published_at TIMESTAMPTZ
);
CREATE INDEX outbox_unpublished ON provisioner.outbox (seq) WHERE published_at IS NULL;

-- Commands sent to host agents (the `agent` driver) and their answers. A
-- result counts only for a command that was sent to that same machine.
CREATE TABLE provisioner.agent_commands (
    command_id  UUID PRIMARY KEY,
    machine_id  UUID NOT NULL,
    instance_id UUID NOT NULL,
    step        TEXT NOT NULL,
    sent_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    answered_at TIMESTAMPTZ,
    ok          BOOLEAN,
    error       TEXT
);
CREATE INDEX agent_commands_instance ON provisioner.agent_commands (instance_id);
