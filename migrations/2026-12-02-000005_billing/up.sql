-- The billing service's schema, reachable only by its own role.
DO $$
BEGIN
    -- Roles are cluster-wide: other databases (one per test) share them, and
    -- two migrations may race to create one.
    CREATE ROLE gpumarket_billing LOGIN;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END
$$;

CREATE SCHEMA billing;
REVOKE ALL ON SCHEMA billing FROM PUBLIC;
GRANT USAGE ON SCHEMA billing TO gpumarket_billing;
ALTER DEFAULT PRIVILEGES IN SCHEMA billing GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO gpumarket_billing;
ALTER DEFAULT PRIVILEGES IN SCHEMA billing GRANT USAGE, SELECT ON SEQUENCES TO gpumarket_billing;

CREATE TABLE billing.accounts (
    id         UUID PRIMARY KEY,
    kind       TEXT NOT NULL CHECK (kind IN ('renter_balance', 'host_earnings', 'platform_fee', 'payment_clearing', 'payouts', 'rounding')),
    tenant_id  UUID,
    currency   TEXT NOT NULL,
    -- Maintained in the posting's transaction; always the sum of its entries.
    balance    NUMERIC(24, 9) NOT NULL DEFAULT 0,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE NULLS NOT DISTINCT (kind, tenant_id, currency)
);

-- A posting: its id is chosen by the client, so posting twice is a no-op.
CREATE TABLE billing.transactions (
    id          TEXT PRIMARY KEY,
    kind        TEXT NOT NULL,
    tenant_id   UUID,
    instance_id UUID,
    fee_rate    NUMERIC(8, 6),
    description TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE billing.entries (
    id             BIGSERIAL PRIMARY KEY,
    transaction_id TEXT NOT NULL REFERENCES billing.transactions (id),
    account_id     UUID NOT NULL REFERENCES billing.accounts (id),
    amount         NUMERIC(24, 9) NOT NULL,
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX entries_transaction ON billing.entries (transaction_id);
CREATE INDEX entries_account ON billing.entries (account_id, id);

-- Double entry is enforced by the database: at commit, every transaction
-- that received entries sums to exactly zero.
CREATE FUNCTION billing.check_balanced() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    total NUMERIC;
BEGIN
    SELECT COALESCE(sum(amount), 0) INTO total FROM billing.entries WHERE transaction_id = NEW.transaction_id;
    IF total <> 0 THEN
        RAISE EXCEPTION 'ledger transaction % does not balance (sum %)', NEW.transaction_id, total
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER entries_balanced
    AFTER INSERT ON billing.entries
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION billing.check_balanced();

-- Postings are immutable: corrections are new postings.
CREATE FUNCTION billing.forbid_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ledger rows are immutable' USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER entries_immutable BEFORE UPDATE OR DELETE ON billing.entries
    FOR EACH ROW EXECUTE FUNCTION billing.forbid_change();
CREATE TRIGGER transactions_immutable BEFORE UPDATE OR DELETE ON billing.transactions
    FOR EACH ROW EXECUTE FUNCTION billing.forbid_change();

-- Transactional outbox: written in the transaction of the state change,
-- published by the relay, then stamped.
CREATE TABLE billing.outbox (
    seq          BIGSERIAL PRIMARY KEY,
    id           UUID NOT NULL UNIQUE,
    exchange     TEXT NOT NULL,
    routing_key  TEXT NOT NULL,
    body         JSONB NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    published_at TIMESTAMPTZ
);
CREATE INDEX outbox_unpublished ON billing.outbox (seq) WHERE published_at IS NULL;

-- Idempotent consumer: a message id is recorded in the effect's transaction.
CREATE TABLE billing.inbox (
    message_id   UUID PRIMARY KEY,
    kind         TEXT NOT NULL,
    processed_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
