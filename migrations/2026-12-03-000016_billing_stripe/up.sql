-- Prepaid renters through Stripe: one Stripe customer per renter tenant, a
-- top-up per PaymentIntent, and the inbox of Stripe events already handled.

CREATE TABLE billing.stripe_customers (
    tenant_id   UUID PRIMARY KEY,
    customer_id TEXT NOT NULL UNIQUE,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- A top-up row exists before Stripe is called, so that a retry under the
-- same idempotency key finds it and repeats the Stripe call with the same
-- Stripe idempotency key (one PaymentIntent, however often it is asked for).
CREATE TABLE billing.top_ups (
    id                UUID PRIMARY KEY,
    tenant_id         UUID NOT NULL,
    idempotency_key   TEXT NOT NULL,
    amount            NUMERIC(24, 9) NOT NULL CHECK (amount > 0),
    currency          TEXT NOT NULL,
    amount_minor      BIGINT NOT NULL CHECK (amount_minor > 0),
    -- `creating` until Stripe answered, then the PaymentIntent's status.
    status            TEXT NOT NULL,
    payment_intent_id TEXT UNIQUE,
    created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    succeeded_at      TIMESTAMPTZ,
    UNIQUE (tenant_id, idempotency_key)
);
CREATE INDEX top_ups_tenant ON billing.top_ups (tenant_id, created_at DESC);

-- Stripe delivers an event at least once: its id is recorded in the
-- transaction of its effect, so a redelivery changes nothing.
CREATE TABLE billing.stripe_events (
    event_id    TEXT PRIMARY KEY,
    type        TEXT NOT NULL,
    object_id   TEXT,
    outcome     TEXT NOT NULL,
    received_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
