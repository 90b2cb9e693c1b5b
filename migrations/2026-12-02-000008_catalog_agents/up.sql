-- Host agents: listing history, heartbeat gaps (the evidence reliability is
-- computed from) and the agents' latest reports. docs/host-agent.md has the
-- protocol and the formula.

-- When each machine was listed. Written by the trigger below whenever
-- machines.listed changes, so no code path can list a machine without its
-- listed time being counted. At most one open period per machine.
CREATE TABLE catalog.listing_periods (
    machine_id UUID NOT NULL REFERENCES catalog.machines (id),
    started_at TIMESTAMPTZ NOT NULL,
    ended_at   TIMESTAMPTZ,
    PRIMARY KEY (machine_id, started_at),
    CHECK (ended_at IS NULL OR ended_at >= started_at)
);
CREATE UNIQUE INDEX listing_periods_open ON catalog.listing_periods (machine_id) WHERE ended_at IS NULL;

CREATE FUNCTION catalog.record_listing_period() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.listed AND (TG_OP = 'INSERT' OR NOT OLD.listed) THEN
        -- Unlisted and listed again in one transaction: reopen that period.
        INSERT INTO catalog.listing_periods (machine_id, started_at)
        VALUES (NEW.id, now())
        ON CONFLICT (machine_id, started_at) DO UPDATE SET ended_at = NULL;
    ELSIF TG_OP = 'UPDATE' AND OLD.listed AND NOT NEW.listed THEN
        UPDATE catalog.listing_periods SET ended_at = now()
        WHERE machine_id = NEW.id AND ended_at IS NULL;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER machines_listing_period
    AFTER INSERT OR UPDATE OF listed ON catalog.machines
    FOR EACH ROW EXECUTE FUNCTION catalog.record_listing_period();

-- Machines listed before this migration: their history starts now (nothing
-- older is known).
INSERT INTO catalog.listing_periods (machine_id, started_at)
SELECT id, now() FROM catalog.machines WHERE listed;

-- A silence longer than the grace period. started_at is the last heartbeat
-- before it (or, for a listed machine that never reported, the start of its
-- listing); ended_at the first heartbeat after it, NULL while the machine is
-- still silent. Opened by the offline sweeper or, when heartbeats resume
-- before the sweeper saw the silence, recorded closed by the consumer.
CREATE TABLE catalog.heartbeat_gaps (
    machine_id  UUID NOT NULL REFERENCES catalog.machines (id),
    started_at  TIMESTAMPTZ NOT NULL,
    ended_at    TIMESTAMPTZ,
    detected_by TEXT NOT NULL CHECK (detected_by IN ('sweeper', 'heartbeat')),
    recorded_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (machine_id, started_at),
    CHECK (ended_at IS NULL OR ended_at > started_at)
);
CREATE UNIQUE INDEX heartbeat_gaps_open ON catalog.heartbeat_gaps (machine_id) WHERE ended_at IS NULL;

-- What each machine's agent last reported, as sent (JSON), for operators and
-- for checks against the registered specification.
CREATE TABLE catalog.agent_reports (
    machine_id      UUID PRIMARY KEY REFERENCES catalog.machines (id),
    inventory       JSONB,
    inventory_at    TIMESTAMPTZ,
    self_test       JSONB,
    self_test_at    TIMESTAMPTZ,
    last_sample     JSONB,
    last_sample_at  TIMESTAMPTZ
);

-- The sweeper's and the search's "online" test.
CREATE INDEX machines_listed_heartbeat ON catalog.machines (last_heartbeat_at) WHERE listed;
