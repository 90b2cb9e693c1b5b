-- Invoices for renters (docs/invoices.md). Usage postings stay the source of
-- truth: an invoice line is the sum of the renter legs of its postings,
-- rounded once to the currency's minor unit, and every posting is assigned
-- to exactly one invoice when that invoice is finalized.

-- What a usage posting charged, as columns (the posting's description says
-- the same in words). Written in the posting's transaction, never changed.
CREATE TABLE billing.usage_details (
    transaction_id TEXT PRIMARY KEY REFERENCES billing.transactions (id),
    interval_id    UUID NOT NULL,
    meter          TEXT NOT NULL,
    offset_seconds BIGINT NOT NULL,
    -- Negative for a correction (a settlement that ran past the stop).
    seconds        BIGINT NOT NULL,
    price_per_hour NUMERIC(24, 9) NOT NULL,
    started_at     TIMESTAMPTZ NOT NULL,
    ended_at       TIMESTAMPTZ NOT NULL
);
CREATE TRIGGER usage_details_immutable BEFORE UPDATE OR DELETE ON billing.usage_details
    FOR EACH ROW EXECUTE FUNCTION billing.forbid_change();

-- Postings made before this table existed: their id and description carry
-- the same facts (`usage:{interval}:{offset}:{seconds}`, "... s of {meter}
-- at {price} {currency}/h ..."); their charge period is unknown, so the
-- posting's own time stands in for it.
INSERT INTO billing.usage_details
    (transaction_id, interval_id, meter, offset_seconds, seconds, price_per_hour, started_at, ended_at)
SELECT t.id,
       split_part(t.id, ':', 2)::uuid,
       substring(t.description FROM ' s of (\S+) at '),
       split_part(t.id, ':', 3)::bigint,
       split_part(t.id, ':', 4)::bigint,
       substring(t.description FROM ' at ([0-9.]+) [A-Z]+/h')::numeric,
       t.created_at,
       t.created_at
FROM billing.transactions t
WHERE t.kind = 'usage'
  AND t.id ~ '^usage:[0-9a-f-]{36}:-?[0-9]+:-?[0-9]+$'
  AND t.description ~ ' s of \S+ at [0-9.]+ [A-Z]+/h';

-- Uninvoiced usage of a tenant is looked up by tenant and time.
CREATE INDEX transactions_usage_tenant ON billing.transactions (tenant_id, created_at)
    WHERE kind = 'usage';

-- Per-tenant numbering: the row is locked FOR UPDATE by every finalization of
-- the tenant, and bumped in the same transaction as the invoice it numbers,
-- so numbers have no gaps (a rollback takes the bump with it) and
-- finalizations of one tenant are serialised.
CREATE TABLE billing.invoice_counters (
    tenant_id               UUID PRIMARY KEY,
    last_number             BIGINT NOT NULL DEFAULT 0,
    last_credit_note_number BIGINT NOT NULL DEFAULT 0
);

CREATE TABLE billing.invoices (
    id           UUID PRIMARY KEY,
    tenant_id    UUID NOT NULL,
    number       BIGINT NOT NULL CHECK (number > 0),
    period_start TIMESTAMPTZ NOT NULL,
    period_end   TIMESTAMPTZ NOT NULL CHECK (period_end > period_start),
    -- `draft` only inside the finalization transaction (lines may be added
    -- while it is a draft); the draft a renter sees is the preview, never
    -- stored.
    status       TEXT NOT NULL CHECK (status IN ('draft', 'finalized', 'paid', 'void')),
    currency     TEXT NOT NULL,
    -- Sum of the lines (each already rounded to the minor unit).
    subtotal     NUMERIC(24, 9) NOT NULL,
    total        NUMERIC(24, 9) NOT NULL,
    -- The exact (9-decimal) sum of the postings, and total − exact: what the
    -- rounding posting moved between the renter and the rounding account.
    exact_total  NUMERIC(24, 9) NOT NULL,
    rounding     NUMERIC(24, 9) NOT NULL,
    rounding_transaction_id TEXT REFERENCES billing.transactions (id),
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    finalized_at TIMESTAMPTZ,
    paid_at      TIMESTAMPTZ,
    voided_at    TIMESTAMPTZ,
    void_reason  TEXT,
    UNIQUE (tenant_id, number),
    -- One invoice per tenant and period end: finalizing again finds it.
    UNIQUE (tenant_id, period_end)
);
CREATE INDEX invoices_tenant ON billing.invoices (tenant_id, number DESC);

CREATE TABLE billing.invoice_lines (
    id                  BIGSERIAL PRIMARY KEY,
    invoice_id          UUID NOT NULL REFERENCES billing.invoices (id),
    position            INT NOT NULL,
    instance_id         UUID NOT NULL,
    meter               TEXT NOT NULL,
    -- Whole seconds (corrections included); the unit is `second`.
    quantity            BIGINT NOT NULL,
    unit                TEXT NOT NULL,
    -- The rental's price per hour (all its GPUs): exact, unlike a per-second
    -- price.
    unit_price_per_hour NUMERIC(24, 9) NOT NULL,
    -- Usage from before the invoice's period that reached the ledger after
    -- the invoice of its own period was finalized (the delta).
    earlier_period      BOOLEAN NOT NULL,
    charge_period_start TIMESTAMPTZ NOT NULL,
    charge_period_end   TIMESTAMPTZ NOT NULL,
    postings            INT NOT NULL,
    exact_amount        NUMERIC(24, 9) NOT NULL,
    -- round_half_even(exact_amount, minor unit): what the renter is billed.
    amount              NUMERIC(24, 9) NOT NULL,
    UNIQUE (invoice_id, position)
);

-- Each posting belongs to at most one invoice (the primary key), decided
-- when that invoice is finalized; a posting that is not here yet goes on the
-- tenant's next invoice, whatever its date.
CREATE TABLE billing.invoice_items (
    transaction_id TEXT PRIMARY KEY REFERENCES billing.transactions (id),
    invoice_id     UUID NOT NULL REFERENCES billing.invoices (id),
    line_id        BIGINT NOT NULL REFERENCES billing.invoice_lines (id)
);
CREATE INDEX invoice_items_invoice ON billing.invoice_items (invoice_id);

-- A finalized invoice is immutable: only its status moves on (finalized →
-- paid or void, paid → void) with the matching timestamp and reason.
-- Corrections are credit notes, never edits.
CREATE FUNCTION billing.guard_invoice() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'invoices are never deleted' USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF OLD.status = 'draft' THEN
        RETURN NEW;
    END IF;
    IF (NEW.id, NEW.tenant_id, NEW.number, NEW.period_start, NEW.period_end, NEW.currency,
        NEW.subtotal, NEW.total, NEW.exact_total, NEW.rounding, NEW.rounding_transaction_id,
        NEW.created_at, NEW.finalized_at)
       IS DISTINCT FROM
       (OLD.id, OLD.tenant_id, OLD.number, OLD.period_start, OLD.period_end, OLD.currency,
        OLD.subtotal, OLD.total, OLD.exact_total, OLD.rounding, OLD.rounding_transaction_id,
        OLD.created_at, OLD.finalized_at) THEN
        RAISE EXCEPTION 'invoice % is finalized and cannot be edited', OLD.id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NEW.status IS DISTINCT FROM OLD.status AND NOT (
        (OLD.status = 'finalized' AND NEW.status IN ('paid', 'void'))
        OR (OLD.status = 'paid' AND NEW.status = 'void')) THEN
        RAISE EXCEPTION 'invoice % cannot go from % to %', OLD.id, OLD.status, NEW.status
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER invoices_guard BEFORE UPDATE OR DELETE ON billing.invoices
    FOR EACH ROW EXECUTE FUNCTION billing.guard_invoice();

-- Lines and assignments are written only while their invoice is a draft,
-- and never changed afterwards.
CREATE FUNCTION billing.guard_invoice_child() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        RAISE EXCEPTION 'invoice lines and items are immutable' USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF (SELECT status FROM billing.invoices WHERE id = NEW.invoice_id) IS DISTINCT FROM 'draft' THEN
        RAISE EXCEPTION 'invoice % is finalized and cannot be edited', NEW.invoice_id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER invoice_lines_guard BEFORE INSERT OR UPDATE OR DELETE ON billing.invoice_lines
    FOR EACH ROW EXECUTE FUNCTION billing.guard_invoice_child();
CREATE TRIGGER invoice_items_guard BEFORE INSERT OR UPDATE OR DELETE ON billing.invoice_items
    FOR EACH ROW EXECUTE FUNCTION billing.guard_invoice_child();

-- Refunds and SLA credits: a numbered document per tenant (numbered like
-- invoices, from the same locked counter row) and a posting crediting the
-- renter, never an edit of the invoice. A void is a credit note for what was
-- not credited yet plus the status change.
CREATE TABLE billing.credit_notes (
    id              UUID PRIMARY KEY,
    tenant_id       UUID NOT NULL,
    invoice_id      UUID NOT NULL REFERENCES billing.invoices (id),
    number          BIGINT NOT NULL CHECK (number > 0),
    amount          NUMERIC(24, 9) NOT NULL CHECK (amount > 0),
    currency        TEXT NOT NULL,
    reason          TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    transaction_id  TEXT NOT NULL UNIQUE REFERENCES billing.transactions (id),
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, number),
    UNIQUE (tenant_id, idempotency_key)
);
CREATE INDEX credit_notes_invoice ON billing.credit_notes (invoice_id);
CREATE TRIGGER credit_notes_immutable BEFORE UPDATE OR DELETE ON billing.credit_notes
    FOR EACH ROW EXECUTE FUNCTION billing.forbid_change();
