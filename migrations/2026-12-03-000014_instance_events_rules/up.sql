-- Every change an instance goes through, as its renter sees it: state
-- transitions (written in the transition's transaction), provisioning steps
-- (from the workers' events), lifecycle-rule warnings and enforcements.
-- `seq` numbers one instance's events in the order ordering recorded them;
-- `instanceEvents` replays them before it streams live ones.
CREATE TABLE ordering.instance_events (
    id          BIGSERIAL PRIMARY KEY,
    instance_id UUID NOT NULL REFERENCES ordering.instances (id),
    seq         INTEGER NOT NULL CHECK (seq > 0),
    kind        TEXT NOT NULL,
    from_state  TEXT,
    to_state    TEXT,
    reason      TEXT,
    -- A provisioning step's payload, or a rule's name and due instant.
    detail      JSONB,
    -- The instance as it was after the event (state, rental type, rates).
    snapshot    JSONB NOT NULL,
    -- Events that may be reported more than once (a redelivered step, a rule
    -- warning seen by two replicas) are recorded once per key.
    dedupe_key  TEXT,
    at          TIMESTAMPTZ NOT NULL,
    UNIQUE (instance_id, seq)
);
CREATE UNIQUE INDEX instance_events_dedupe ON ordering.instance_events (instance_id, dedupe_key)
    WHERE dedupe_key IS NOT NULL;

-- Lifecycle rules of one instance, enforced by ordering's rules task.
CREATE TABLE ordering.instance_rules (
    instance_id                        UUID PRIMARY KEY REFERENCES ordering.instances (id),
    max_duration_seconds               BIGINT CHECK (max_duration_seconds > 0),
    idle_stop_after_seconds            BIGINT CHECK (idle_stop_after_seconds > 0),
    idle_threshold_percent             INTEGER CHECK (idle_threshold_percent BETWEEN 1 AND 100),
    auto_destroy_after_stopped_seconds BIGINT CHECK (auto_destroy_after_stopped_seconds > 0),
    updated_at                         TIMESTAMPTZ NOT NULL,
    CHECK ((idle_stop_after_seconds IS NULL) = (idle_threshold_percent IS NULL))
);

-- The GPU utilisation host agents report in heartbeats: the busiest GPU of
-- the machine per heartbeat, kept for a bounded retention. Ordering asks
-- catalog when a machine was last busy to enforce idle-stop rules.
CREATE TABLE catalog.gpu_utilisation (
    machine_id  UUID NOT NULL REFERENCES catalog.machines (id),
    at          TIMESTAMPTZ NOT NULL,
    max_percent INTEGER NOT NULL CHECK (max_percent BETWEEN 0 AND 100),
    PRIMARY KEY (machine_id, at)
);
