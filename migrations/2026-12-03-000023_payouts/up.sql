-- Host statements and Stripe Connect payouts (docs/payouts.md). The ledger's
-- postings on a host's `host_earnings` account stay the source of truth: a
-- statement groups them by machine and meter, a payout is one posting
-- host_earnings → payouts made after Stripe accepted the transfer.

-- Per host, the last statement number: locked FOR UPDATE by every
-- finalization of the host and bumped in the statement's own transaction,
-- so numbers have no gaps and a host's finalizations are serialised.
CREATE TABLE billing.statement_counters (
    host_tenant_id UUID PRIMARY KEY,
    last_number    BIGINT NOT NULL DEFAULT 0
);

CREATE TABLE billing.statements (
    id                UUID PRIMARY KEY,
    host_tenant_id    UUID NOT NULL,
    number            BIGINT NOT NULL CHECK (number > 0),
    period_start      TIMESTAMPTZ NOT NULL,
    period_end        TIMESTAMPTZ NOT NULL CHECK (period_end > period_start),
    -- `draft` only inside the finalization transaction; the draft a host
    -- sees is the preview, never stored.
    status            TEXT NOT NULL CHECK (status IN ('draft', 'finalized')),
    currency          TEXT NOT NULL,
    -- Exact (9-decimal) sums of the postings on the statement.
    seconds           BIGINT NOT NULL,
    gross             NUMERIC(24, 9) NOT NULL,
    fee               NUMERIC(24, 9) NOT NULL,
    net               NUMERIC(24, 9) NOT NULL,
    downtime_credits  NUMERIC(24, 9) NOT NULL,
    -- net − downtime_credits: what the lines added to the earnings.
    earnings          NUMERIC(24, 9) NOT NULL,
    -- Other postings on the host's earnings (none are made today).
    adjustments       NUMERIC(24, 9) NOT NULL,
    -- Payouts posted (positive: what left the earnings account).
    payouts           NUMERIC(24, 9) NOT NULL,
    -- The earnings account as of the previous statement and after this one:
    -- closing = opening + earnings + adjustments − payouts.
    opening_balance   NUMERIC(24, 9) NOT NULL,
    closing_balance   NUMERIC(24, 9) NOT NULL,
    created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    finalized_at      TIMESTAMPTZ,
    UNIQUE (host_tenant_id, number),
    -- One statement per host and period end: finalizing again finds it.
    UNIQUE (host_tenant_id, period_end)
);
CREATE INDEX statements_host ON billing.statements (host_tenant_id, number DESC);

CREATE TABLE billing.statement_lines (
    id               BIGSERIAL PRIMARY KEY,
    statement_id     UUID NOT NULL REFERENCES billing.statements (id),
    position         INT NOT NULL,
    -- NULL for usage that predates the dimension (before migration 000021).
    machine_id       UUID,
    gpu_model        TEXT,
    meter            TEXT NOT NULL,
    -- Usage of an earlier period that reached the ledger after that
    -- period's statement was finalized.
    earlier_period   BOOLEAN NOT NULL,
    seconds          BIGINT NOT NULL,
    gross            NUMERIC(24, 9) NOT NULL,
    fee              NUMERIC(24, 9) NOT NULL,
    net              NUMERIC(24, 9) NOT NULL,
    downtime_credits NUMERIC(24, 9) NOT NULL,
    amount           NUMERIC(24, 9) NOT NULL,
    postings         INT NOT NULL,
    UNIQUE (statement_id, position)
);

-- Each posting on a host's earnings belongs to at most one statement (the
-- primary key); one not here yet goes on the host's next statement.
-- `line_id` is NULL for payouts and adjustments, which are not per machine.
CREATE TABLE billing.statement_items (
    transaction_id TEXT PRIMARY KEY REFERENCES billing.transactions (id),
    statement_id   UUID NOT NULL REFERENCES billing.statements (id),
    line_id        BIGINT REFERENCES billing.statement_lines (id)
);
CREATE INDEX statement_items_statement ON billing.statement_items (statement_id);

-- A finalized statement never changes and is never deleted.
CREATE FUNCTION billing.guard_statement() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'statements are never deleted' USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF OLD.status = 'draft' THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'statement % is finalized and cannot be edited', OLD.id
        USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER statements_guard BEFORE UPDATE OR DELETE ON billing.statements
    FOR EACH ROW EXECUTE FUNCTION billing.guard_statement();

CREATE FUNCTION billing.guard_statement_child() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        RAISE EXCEPTION 'statement lines and items are immutable' USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF (SELECT status FROM billing.statements WHERE id = NEW.statement_id) IS DISTINCT FROM 'draft' THEN
        RAISE EXCEPTION 'statement % is finalized and cannot be edited', NEW.statement_id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER statement_lines_guard BEFORE INSERT OR UPDATE OR DELETE ON billing.statement_lines
    FOR EACH ROW EXECUTE FUNCTION billing.guard_statement_child();
CREATE TRIGGER statement_items_guard BEFORE INSERT OR UPDATE OR DELETE ON billing.statement_items
    FOR EACH ROW EXECUTE FUNCTION billing.guard_statement_child();

-- A downtime credit names its instance, not its machine: the statement looks
-- the machine up from the instance's usage postings.
CREATE INDEX transactions_instance_usage ON billing.transactions (instance_id, created_at)
    WHERE kind = 'usage';

-- The Stripe connected account of each host tenant (Stripe Connect).
CREATE TABLE billing.payout_accounts (
    host_tenant_id      UUID PRIMARY KEY,
    stripe_account_id   TEXT NOT NULL UNIQUE,
    country             TEXT NOT NULL,
    email               TEXT,
    -- As last read from Stripe: the `transfers` capability's status and the
    -- account's own flags.
    transfers_status    TEXT NOT NULL,
    payouts_enabled     BOOLEAN NOT NULL,
    details_submitted   BOOLEAN NOT NULL,
    created_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at          TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- A payout is written `pending` before Stripe is called (the transfer's
-- idempotency key derives from its id), then becomes `paid` with its
-- posting, or `failed` with Stripe's reason and no posting.
CREATE TABLE billing.payouts (
    id                 UUID PRIMARY KEY,
    host_tenant_id     UUID NOT NULL,
    stripe_account_id  TEXT NOT NULL,
    amount             NUMERIC(24, 9) NOT NULL CHECK (amount > 0),
    amount_minor       BIGINT NOT NULL CHECK (amount_minor > 0),
    currency           TEXT NOT NULL,
    status             TEXT NOT NULL CHECK (status IN ('pending', 'paid', 'failed')),
    stripe_transfer_id TEXT UNIQUE,
    transaction_id     TEXT UNIQUE REFERENCES billing.transactions (id),
    failure_reason     TEXT,
    created_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    paid_at            TIMESTAMPTZ,
    CHECK ((status = 'paid') = (transaction_id IS NOT NULL AND stripe_transfer_id IS NOT NULL)),
    CHECK ((status = 'failed') = (failure_reason IS NOT NULL))
);
-- At most one payout of a host in flight: a run resumes it instead of
-- computing a second amount from earnings the first has not debited yet.
CREATE UNIQUE INDEX payouts_one_pending ON billing.payouts (host_tenant_id)
    WHERE status = 'pending';
CREATE INDEX payouts_host ON billing.payouts (host_tenant_id, created_at DESC);

-- `paid` and `failed` are final; what was asked of Stripe never changes.
CREATE FUNCTION billing.guard_payout() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'payouts are never deleted' USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF OLD.status <> 'pending'
       OR (NEW.id, NEW.host_tenant_id, NEW.stripe_account_id, NEW.amount, NEW.amount_minor,
           NEW.currency, NEW.created_at)
          IS DISTINCT FROM
          (OLD.id, OLD.host_tenant_id, OLD.stripe_account_id, OLD.amount, OLD.amount_minor,
           OLD.currency, OLD.created_at) THEN
        RAISE EXCEPTION 'payout % is % and cannot be edited', OLD.id, OLD.status
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER payouts_guard BEFORE UPDATE OR DELETE ON billing.payouts
    FOR EACH ROW EXECUTE FUNCTION billing.guard_payout();
