-- Reserved capacity (issue 20, docs/reservations.md "Money", docs/settlement.md
-- "Reserved blocks"): billing's side. A booked block is paid up front into
-- an escrow account of the renter; billing releases it to the host as the
-- block runs (less the platform fee), refunds the seconds the host was
-- silent to whoever held them, and on cancellation refunds the rest (plus
-- the host's penalty).
--
-- Keys and tenants (docs/scaling.md): an escrow is keyed by its reservation
-- id alone, as invoices and statements are keyed by their id today: the id
-- is a UUID minted by ordering and unique on its own, and both the renter
-- (`renter_tenant_id`, the tenant it would be distributed by) and the host
-- read it by that id. Its holder rows, postings' details and resale
-- transfers hang off the escrow and would be co-located with it; their
-- own tenant (a holder, a buyer) changes with resales, so it is a column,
-- not part of a key.
CREATE EXTENSION IF NOT EXISTS btree_gist;

-- The renter's escrow (per renter tenant), and the platform's (no tenant):
-- the transfer account a resale's two halves meet in, zero after every
-- commit.
ALTER TABLE billing.accounts DROP CONSTRAINT accounts_kind_check;
ALTER TABLE billing.accounts ADD CONSTRAINT accounts_kind_check CHECK (kind IN (
    'renter_balance', 'host_earnings', 'platform_fee', 'payment_clearing', 'payouts', 'rounding',
    'escrow'));

-- Invoice lines of reservations (a purchase, refunds, the host's penalty,
-- resale purchases and sales) and the host's statement line of releases.
ALTER TABLE billing.invoice_lines DROP CONSTRAINT invoice_lines_meter_known;
ALTER TABLE billing.invoice_lines ADD CONSTRAINT invoice_lines_meter_known CHECK (meter IN (
    'bandwidth_down', 'bandwidth_up', 'gpu', 'storage', 'unknown',
    'reservation', 'reservation_refund', 'reservation_penalty', 'resale_purchase', 'resale_sale'));
ALTER TABLE billing.statement_lines DROP CONSTRAINT statement_lines_meter_known;
ALTER TABLE billing.statement_lines ADD CONSTRAINT statement_lines_meter_known CHECK (meter IN (
    'bandwidth_down', 'bandwidth_up', 'gpu', 'storage', 'unknown', 'reservation'));

CREATE TABLE billing.escrows (
    reservation_id     UUID PRIMARY KEY,
    renter_tenant_id   UUID NOT NULL,
    host_tenant_id     UUID NOT NULL,
    machine_id         UUID NOT NULL,
    currency           TEXT NOT NULL,
    gpu_count          INTEGER NOT NULL CHECK (gpu_count > 0),
    price_per_gpu_hour NUMERIC(24, 9) NOT NULL CHECK (price_per_gpu_hour > 0),
    -- price × gpu_count × hours, charged at booking.
    amount             NUMERIC(24, 9) NOT NULL CHECK (amount > 0),
    -- The platform fee rate at booking: every release of this escrow uses it.
    fee_rate           NUMERIC NOT NULL CHECK (fee_rate >= 0 AND fee_rate < 1),
    starts_at          TIMESTAMPTZ NOT NULL,
    ends_at            TIMESTAMPTZ NOT NULL,
    -- Every second of the block before this instant is released or refunded.
    settled_until      TIMESTAMPTZ NOT NULL,
    -- The host's share and the platform's fee of the heard seconds; what
    -- went back to holders (silent seconds, cancellation); what the host
    -- paid on top on cancelling.
    released           NUMERIC(24, 9) NOT NULL DEFAULT 0 CHECK (released >= 0),
    fees               NUMERIC(24, 9) NOT NULL DEFAULT 0 CHECK (fees >= 0),
    refunded           NUMERIC(24, 9) NOT NULL DEFAULT 0 CHECK (refunded >= 0),
    penalty            NUMERIC(24, 9) NOT NULL DEFAULT 0 CHECK (penalty >= 0),
    silent_seconds     BIGINT NOT NULL DEFAULT 0 CHECK (silent_seconds >= 0),
    state              TEXT NOT NULL CHECK (state IN ('held', 'settled', 'cancelled')),
    cancelled_at       TIMESTAMPTZ,
    cancelled_by_host  BOOLEAN,
    cancel_reason      TEXT,
    created_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK (ends_at > starts_at),
    CHECK (settled_until >= starts_at AND settled_until <= ends_at),
    -- Conservation: amount = released + fees + refunded + remaining, with
    -- nothing remaining once settled or cancelled.
    CHECK (released + fees + refunded <= amount),
    CHECK (state = 'held' OR released + fees + refunded = amount),
    CHECK (state <> 'settled' OR settled_until = ends_at),
    CHECK ((state = 'cancelled') = (cancelled_at IS NOT NULL)),
    CHECK (state = 'held' OR penalty = 0 OR cancelled_by_host)
);
CREATE INDEX escrows_renter ON billing.escrows (renter_tenant_id, starts_at DESC);
CREATE INDEX escrows_host ON billing.escrows (host_tenant_id, starts_at DESC);
-- The release loop's work: held escrows by how far they are settled.
CREATE INDEX escrows_held ON billing.escrows (settled_until) WHERE state = 'held';

-- Who gets the refunds of which hours of an escrow: the renter at first; a
-- resale moves hours to the buyer (the rows are split at its bounds).
-- `holder_reservation_id` is the holder's own reservation (the escrow's for
-- the renter, the child's for a buyer), named on their invoice lines.
CREATE TABLE billing.escrow_holders (
    reservation_id        UUID NOT NULL REFERENCES billing.escrows (reservation_id),
    period                TSTZRANGE NOT NULL CHECK (
        NOT isempty(period) AND lower_inc(period) AND NOT upper_inc(period)
        AND NOT lower_inf(period) AND NOT upper_inf(period)),
    tenant_id             UUID NOT NULL,
    holder_reservation_id UUID NOT NULL,
    PRIMARY KEY (reservation_id, period),
    EXCLUDE USING gist (reservation_id WITH =, period WITH &&)
);
CREATE INDEX escrow_holders_tenant ON billing.escrow_holders (tenant_id);

-- What each reservation posting was for, as columns (like `usage_details`
-- for usage): the renter-side line of invoices (`line`, its quantity in
-- GPU-seconds at a price per GPU-hour) and the host-side seconds of
-- statements. Written in the posting's transaction, never changed.
CREATE TABLE billing.escrow_postings (
    transaction_id        TEXT PRIMARY KEY REFERENCES billing.transactions (id),
    escrow_reservation_id UUID NOT NULL REFERENCES billing.escrows (reservation_id),
    -- The reservation the renter's line names (the holder's own).
    reservation_id        UUID NOT NULL,
    -- The renter whose balance leg this posting has (the posting's tenant).
    tenant_id             UUID NOT NULL,
    host_tenant_id        UUID NOT NULL,
    machine_id            UUID NOT NULL,
    line                  TEXT NOT NULL CHECK (line IN (
        'reservation', 'reservation_refund', 'reservation_penalty', 'resale_purchase', 'resale_sale')),
    quantity              BIGINT NOT NULL CHECK (quantity >= 0),
    unit_price            NUMERIC(24, 9) NOT NULL CHECK (unit_price >= 0),
    -- Seconds released to the host (escrow releases).
    heard_seconds         BIGINT NOT NULL DEFAULT 0 CHECK (heard_seconds >= 0),
    started_at            TIMESTAMPTZ NOT NULL,
    ended_at              TIMESTAMPTZ NOT NULL CHECK (ended_at >= started_at)
);
CREATE INDEX escrow_postings_escrow ON billing.escrow_postings (escrow_reservation_id);
CREATE TRIGGER escrow_postings_immutable BEFORE UPDATE OR DELETE ON billing.escrow_postings
    FOR EACH ROW EXECUTE FUNCTION billing.forbid_change();

-- One resale's money, by listing: what a retried transfer is compared with.
CREATE TABLE billing.resale_transfers (
    listing_id            UUID PRIMARY KEY,
    escrow_reservation_id UUID NOT NULL REFERENCES billing.escrows (reservation_id),
    child_reservation_id  UUID NOT NULL UNIQUE,
    buyer_tenant_id       UUID NOT NULL,
    seller_tenant_id      UUID NOT NULL,
    amount                NUMERIC(24, 9) NOT NULL CHECK (amount > 0),
    fee                   NUMERIC(24, 9) NOT NULL CHECK (fee >= 0),
    seller_credit         NUMERIC(24, 9) NOT NULL CHECK (seller_credit >= 0),
    starts_at             TIMESTAMPTZ NOT NULL,
    ends_at               TIMESTAMPTZ NOT NULL,
    transaction_id        TEXT NOT NULL REFERENCES billing.transactions (id),
    created_at            TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK (ends_at > starts_at),
    CHECK (seller_credit + fee = amount),
    CHECK (buyer_tenant_id <> seller_tenant_id)
);
CREATE INDEX resale_transfers_escrow ON billing.resale_transfers (escrow_reservation_id);

-- The invoicing run finds a tenant's reservation postings not invoiced yet
-- as it finds usage (`transactions_usage_tenant`).
CREATE INDEX transactions_escrow_tenant ON billing.transactions (tenant_id, created_at)
    WHERE kind IN ('reservation', 'escrow_release', 'escrow_refund', 'escrow_penalty', 'resale');
