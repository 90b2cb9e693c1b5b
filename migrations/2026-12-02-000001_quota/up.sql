-- The quota service's schema, reachable only by its own role.
DO $$
BEGIN
    -- Roles are cluster-wide: other databases (one per test) share them, and
    -- two migrations may race to create one.
    CREATE ROLE gpumarket_quota LOGIN;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END
$$;

CREATE SCHEMA quota;
REVOKE ALL ON SCHEMA quota FROM PUBLIC;
GRANT USAGE ON SCHEMA quota TO gpumarket_quota;
ALTER DEFAULT PRIVILEGES IN SCHEMA quota GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO gpumarket_quota;
ALTER DEFAULT PRIVILEGES IN SCHEMA quota GRANT USAGE, SELECT ON SEQUENCES TO gpumarket_quota;

CREATE TABLE quota.tenants (
    id          UUID PRIMARY KEY,
    name        TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    roles       TEXT[] NOT NULL,
    is_platform BOOLEAN NOT NULL DEFAULT false,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE quota.users (
    id            UUID PRIMARY KEY,
    tenant_id     UUID NOT NULL REFERENCES quota.tenants (id),
    email         TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    role          TEXT NOT NULL CHECK (role IN ('owner', 'admin', 'member', 'billing')),
    is_operator   BOOLEAN NOT NULL DEFAULT false,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX users_email ON quota.users (lower(email));

CREATE TABLE quota.api_keys (
    id              UUID PRIMARY KEY,
    tenant_id       UUID NOT NULL REFERENCES quota.tenants (id),
    user_id         UUID NOT NULL REFERENCES quota.users (id),
    name            TEXT NOT NULL,
    prefix          TEXT NOT NULL UNIQUE,
    secret_sha256   TEXT NOT NULL UNIQUE,
    scopes          TEXT[] NOT NULL,
    idempotency_key TEXT NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    revoked_at      TIMESTAMPTZ,
    UNIQUE (tenant_id, idempotency_key)
);

CREATE TABLE quota.tenant_quotas (
    tenant_id  UUID PRIMARY KEY REFERENCES quota.tenants (id),
    max_gpus   INTEGER NOT NULL CHECK (max_gpus >= 0),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- One reservation per order; released_at set when the order ends or fails.
CREATE TABLE quota.reservations (
    order_id    UUID PRIMARY KEY,
    tenant_id   UUID NOT NULL REFERENCES quota.tenants (id),
    gpu_count   INTEGER NOT NULL CHECK (gpu_count > 0),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    released_at TIMESTAMPTZ
);
CREATE INDEX reservations_live ON quota.reservations (tenant_id) WHERE released_at IS NULL;

-- Transactional outbox: written in the transaction of the state change,
-- published by the relay, then stamped.
CREATE TABLE quota.outbox (
    seq          BIGSERIAL PRIMARY KEY,
    id           UUID NOT NULL UNIQUE,
    exchange     TEXT NOT NULL,
    routing_key  TEXT NOT NULL,
    body         JSONB NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    published_at TIMESTAMPTZ
);
CREATE INDEX outbox_unpublished ON quota.outbox (seq) WHERE published_at IS NULL;

-- Idempotent consumer: a message id is recorded in the effect's transaction.
CREATE TABLE quota.inbox (
    message_id   UUID PRIMARY KEY,
    kind         TEXT NOT NULL,
    processed_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
