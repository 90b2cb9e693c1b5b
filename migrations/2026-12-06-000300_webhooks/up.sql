-- The webhook service's schema (issue 18): renters' and hosts' endpoints,
-- the messages their events became, one delivery per message and endpoint,
-- and every attempt. Reachable only by its own role.
DO $$
BEGIN
    CREATE ROLE gpumarket_webhooks LOGIN;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END
$$;

CREATE SCHEMA webhooks;
REVOKE ALL ON SCHEMA webhooks FROM PUBLIC;
GRANT USAGE ON SCHEMA webhooks TO gpumarket_webhooks;
ALTER DEFAULT PRIVILEGES IN SCHEMA webhooks GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO gpumarket_webhooks;
ALTER DEFAULT PRIVILEGES IN SCHEMA webhooks GRANT USAGE, SELECT ON SEQUENCES TO gpumarket_webhooks;

CREATE TYPE webhooks.delivery_status AS ENUM ('pending', 'delivered', 'failed');

CREATE TABLE webhooks.endpoints (
    id                    UUID PRIMARY KEY,
    tenant_id             UUID NOT NULL,
    url                   TEXT NOT NULL CHECK (length(url) BETWEEN 1 AND 2000),
    description           TEXT NOT NULL DEFAULT '' CHECK (length(description) <= 500),
    -- Event types the endpoint receives; empty means every type.
    event_types           TEXT[] NOT NULL DEFAULT '{}',
    -- `whsec_` + base64 of the key bytes. The previous secret keeps signing
    -- beside the new one until `previous_secret_until` (rotation overlap).
    secret                TEXT NOT NULL,
    previous_secret       TEXT,
    previous_secret_until TIMESTAMPTZ,
    enabled               BOOLEAN NOT NULL DEFAULT true,
    disabled_reason       TEXT CHECK (length(disabled_reason) <= 500),
    disabled_at           TIMESTAMPTZ,
    created_at            TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at            TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK ((previous_secret IS NULL) = (previous_secret_until IS NULL))
);
CREATE INDEX endpoints_tenant ON webhooks.endpoints (tenant_id, created_at);

-- One per event and tenant: its id is the `webhook-id` every delivery and
-- retry of it carries.
CREATE TABLE webhooks.messages (
    id                UUID PRIMARY KEY,
    tenant_id         UUID NOT NULL,
    event_type        TEXT NOT NULL CHECK (length(event_type) <= 100),
    -- The Standard Webhooks body: {"type", "timestamp", "data"}.
    payload           JSONB NOT NULL,
    -- The broker message it came from (NULL for test pings).
    source_message_id UUID,
    created_at        TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX messages_tenant ON webhooks.messages (tenant_id, created_at);

CREATE TABLE webhooks.deliveries (
    id              UUID PRIMARY KEY,
    message_id      UUID NOT NULL REFERENCES webhooks.messages (id) ON DELETE CASCADE,
    endpoint_id     UUID NOT NULL REFERENCES webhooks.endpoints (id) ON DELETE CASCADE,
    tenant_id       UUID NOT NULL,
    status          webhooks.delivery_status NOT NULL DEFAULT 'pending',
    -- Attempts made on the current schedule (a manual redelivery starts a
    -- new one); the next attempt is due at `next_attempt_at`, which a sender
    -- also pushes forward while it holds the delivery (its lease).
    attempts        INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at TIMESTAMPTZ,
    last_attempt_at TIMESTAMPTZ,
    delivered_at    TIMESTAMPTZ,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (message_id, endpoint_id),
    CHECK ((status = 'pending') = (next_attempt_at IS NOT NULL))
);
CREATE INDEX deliveries_due ON webhooks.deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX deliveries_endpoint ON webhooks.deliveries (endpoint_id, created_at DESC);

CREATE TABLE webhooks.attempts (
    id            BIGSERIAL PRIMARY KEY,
    delivery_id   UUID NOT NULL REFERENCES webhooks.deliveries (id) ON DELETE CASCADE,
    tenant_id     UUID NOT NULL,
    started_at    TIMESTAMPTZ NOT NULL,
    -- The receiver's HTTP status; NULL when none came (refused, timeout).
    status_code   INTEGER,
    succeeded     BOOLEAN NOT NULL,
    latency_ms    INTEGER NOT NULL CHECK (latency_ms >= 0),
    -- The start of the response body, or why there was none.
    response_head TEXT NOT NULL DEFAULT '' CHECK (length(response_head) <= 1024),
    error         TEXT CHECK (length(error) <= 500)
);
CREATE INDEX attempts_delivery ON webhooks.attempts (delivery_id, id);

-- Idempotent consumer: a broker message id is recorded in the transaction
-- that turns it into messages and deliveries.
CREATE TABLE webhooks.inbox (
    message_id   UUID PRIMARY KEY,
    kind         TEXT NOT NULL,
    processed_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
