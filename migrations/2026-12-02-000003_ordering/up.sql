-- The ordering service's schema, reachable only by its own role.
DO $$
BEGIN
    -- Roles are cluster-wide: other databases (one per test) share them, and
    -- two migrations may race to create one.
    CREATE ROLE gpumarket_ordering LOGIN;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END
$$;

CREATE SCHEMA ordering;
REVOKE ALL ON SCHEMA ordering FROM PUBLIC;
GRANT USAGE ON SCHEMA ordering TO gpumarket_ordering;
ALTER DEFAULT PRIVILEGES IN SCHEMA ordering GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO gpumarket_ordering;
ALTER DEFAULT PRIVILEGES IN SCHEMA ordering GRANT USAGE, SELECT ON SEQUENCES TO gpumarket_ordering;

CREATE TABLE ordering.orders (
    id                     UUID PRIMARY KEY,
    tenant_id              UUID NOT NULL,
    user_id                UUID NOT NULL,
    idempotency_key        TEXT NOT NULL,
    -- Fingerprint of the request, so a reused key with another request is a conflict.
    request_fingerprint    TEXT NOT NULL,
    offer_id               UUID NOT NULL,
    machine_id             UUID,
    gpu_count              INTEGER NOT NULL CHECK (gpu_count > 0),
    max_price_per_gpu_hour NUMERIC(24, 9),
    price_per_gpu_hour     NUMERIC(24, 9),
    currency               TEXT,
    rental_type            TEXT NOT NULL DEFAULT 'on_demand',
    state                  TEXT NOT NULL,
    failure_code           TEXT,
    failure_reason         TEXT,
    created_at             TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at             TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, idempotency_key)
);

CREATE TABLE ordering.instances (
    id                 UUID PRIMARY KEY,
    order_id           UUID NOT NULL UNIQUE REFERENCES ordering.orders (id),
    tenant_id          UUID NOT NULL,
    host_tenant_id     UUID NOT NULL,
    machine_id         UUID NOT NULL,
    gpu_model          TEXT NOT NULL,
    gpu_count          INTEGER NOT NULL CHECK (gpu_count > 0),
    rental_type        TEXT NOT NULL,
    price_per_gpu_hour NUMERIC(24, 9) NOT NULL,
    currency           TEXT NOT NULL,
    image              TEXT NOT NULL,
    ssh_public_key     TEXT,
    state              TEXT NOT NULL,
    status_reason      TEXT,
    -- Compare-and-set guard: every transition bumps it.
    version            INTEGER NOT NULL DEFAULT 0,
    run_seq            INTEGER NOT NULL DEFAULT 0,
    running_at         TIMESTAMPTZ,
    stopped_at         TIMESTAMPTZ,
    created_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at         TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX instances_tenant ON ordering.instances (tenant_id, created_at DESC);

CREATE TABLE ordering.instance_transitions (
    id          BIGSERIAL PRIMARY KEY,
    instance_id UUID NOT NULL REFERENCES ordering.instances (id),
    from_state  TEXT,
    to_state    TEXT NOT NULL,
    reason      TEXT,
    at          TIMESTAMPTZ NOT NULL
);
CREATE INDEX transitions_instance ON ordering.instance_transitions (instance_id, id);

-- Transactional outbox: written in the transaction of the state change,
-- published by the relay, then stamped.
CREATE TABLE ordering.outbox (
    seq          BIGSERIAL PRIMARY KEY,
    id           UUID NOT NULL UNIQUE,
    exchange     TEXT NOT NULL,
    routing_key  TEXT NOT NULL,
    body         JSONB NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    published_at TIMESTAMPTZ
);
CREATE INDEX outbox_unpublished ON ordering.outbox (seq) WHERE published_at IS NULL;

-- Idempotent consumer: a message id is recorded in the effect's transaction.
CREATE TABLE ordering.inbox (
    message_id   UUID PRIMARY KEY,
    kind         TEXT NOT NULL,
    processed_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
