-- The metering service's schema, reachable only by its own role.
DO $$
BEGIN
    -- Roles are cluster-wide: other databases (one per test) share them, and
    -- two migrations may race to create one.
    CREATE ROLE gpumarket_metering LOGIN;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END
$$;

CREATE SCHEMA metering;
REVOKE ALL ON SCHEMA metering FROM PUBLIC;
GRANT USAGE ON SCHEMA metering TO gpumarket_metering;
ALTER DEFAULT PRIVILEGES IN SCHEMA metering GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO gpumarket_metering;
ALTER DEFAULT PRIVILEGES IN SCHEMA metering GRANT USAGE, SELECT ON SEQUENCES TO gpumarket_metering;

-- One interval per instance, meter and run. Start and end arrive as separate
-- events in any order; whichever comes first creates the row.
CREATE TABLE metering.intervals (
    id             UUID PRIMARY KEY,
    instance_id    UUID NOT NULL,
    tenant_id      UUID NOT NULL,
    host_tenant_id UUID,
    meter          TEXT NOT NULL,
    run_seq        INTEGER NOT NULL,
    started_at     TIMESTAMPTZ,
    ended_at       TIMESTAMPTZ,
    seconds        BIGINT CHECK (seconds >= 0),
    gpu_count      INTEGER,
    price_per_hour NUMERIC(24, 9),
    currency       TEXT,
    recorded_at    TIMESTAMPTZ,
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (instance_id, meter, run_seq)
);
CREATE INDEX intervals_tenant ON metering.intervals (tenant_id, created_at DESC);

-- Transactional outbox: written in the transaction of the state change,
-- published by the relay, then stamped.
CREATE TABLE metering.outbox (
    seq          BIGSERIAL PRIMARY KEY,
    id           UUID NOT NULL UNIQUE,
    exchange     TEXT NOT NULL,
    routing_key  TEXT NOT NULL,
    body         JSONB NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    published_at TIMESTAMPTZ
);
CREATE INDEX outbox_unpublished ON metering.outbox (seq) WHERE published_at IS NULL;

-- Idempotent consumer: a message id is recorded in the effect's transaction.
CREATE TABLE metering.inbox (
    message_id   UUID PRIMARY KEY,
    kind         TEXT NOT NULL,
    processed_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
