-- The catalog service's schema, reachable only by its own role.
DO $$
BEGIN
    -- Roles are cluster-wide: other databases (one per test) share them, and
    -- two migrations may race to create one.
    CREATE ROLE gpumarket_catalog LOGIN;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END
$$;

CREATE SCHEMA catalog;
REVOKE ALL ON SCHEMA catalog FROM PUBLIC;
GRANT USAGE ON SCHEMA catalog TO gpumarket_catalog;
ALTER DEFAULT PRIVILEGES IN SCHEMA catalog GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO gpumarket_catalog;
ALTER DEFAULT PRIVILEGES IN SCHEMA catalog GRANT USAGE, SELECT ON SEQUENCES TO gpumarket_catalog;

CREATE TABLE catalog.machines (
    id                 UUID PRIMARY KEY,
    host_tenant_id     UUID NOT NULL,
    name               TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    gpu_model          TEXT NOT NULL,
    gpu_count          INTEGER NOT NULL CHECK (gpu_count > 0),
    -- The single counter of capacity; allocation is a conditional update of it.
    gpus_allocated     INTEGER NOT NULL DEFAULT 0 CHECK (gpus_allocated >= 0 AND gpus_allocated <= gpu_count),
    vram_gib           INTEGER NOT NULL CHECK (vram_gib > 0),
    cpu_cores          INTEGER NOT NULL CHECK (cpu_cores > 0),
    ram_gib            INTEGER NOT NULL CHECK (ram_gib > 0),
    disk_gib           INTEGER NOT NULL CHECK (disk_gib > 0),
    country            TEXT NOT NULL CHECK (country ~ '^[A-Z]{2}$'),
    price_per_gpu_hour NUMERIC(24, 9) CHECK (price_per_gpu_hour >= 0),
    currency           TEXT NOT NULL,
    listed             BOOLEAN NOT NULL DEFAULT false,
    agent_token_sha256 TEXT NOT NULL UNIQUE,
    idempotency_key    TEXT NOT NULL,
    created_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (host_tenant_id, idempotency_key),
    CHECK (NOT listed OR price_per_gpu_hour IS NOT NULL)
);
CREATE INDEX machines_host ON catalog.machines (host_tenant_id);
CREATE INDEX machines_offers ON catalog.machines (price_per_gpu_hour, id) WHERE listed;

CREATE TABLE catalog.allocations (
    order_id    UUID PRIMARY KEY,
    machine_id  UUID NOT NULL REFERENCES catalog.machines (id),
    tenant_id   UUID NOT NULL,
    gpu_count   INTEGER NOT NULL CHECK (gpu_count > 0),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    released_at TIMESTAMPTZ
);
CREATE INDEX allocations_live ON catalog.allocations (machine_id) WHERE released_at IS NULL;

-- Transactional outbox: written in the transaction of the state change,
-- published by the relay, then stamped.
CREATE TABLE catalog.outbox (
    seq          BIGSERIAL PRIMARY KEY,
    id           UUID NOT NULL UNIQUE,
    exchange     TEXT NOT NULL,
    routing_key  TEXT NOT NULL,
    body         JSONB NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    published_at TIMESTAMPTZ
);
CREATE INDEX outbox_unpublished ON catalog.outbox (seq) WHERE published_at IS NULL;

-- Idempotent consumer: a message id is recorded in the effect's transaction.
CREATE TABLE catalog.inbox (
    message_id   UUID PRIMARY KEY,
    kind         TEXT NOT NULL,
    processed_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
