-- Reserved capacity (issue 20, docs/reservations.md): the renter's side.
-- A reservation is recorded before its saga (quota, catalog booking,
-- escrow charge) runs, so a repeated request with the same key resumes it.
CREATE EXTENSION IF NOT EXISTS btree_gist;

CREATE TABLE ordering.reservations (
    id                  UUID PRIMARY KEY,
    tenant_id           UUID NOT NULL,
    user_id             UUID NOT NULL,
    team_id             UUID,
    idempotency_key     TEXT NOT NULL,
    request_fingerprint TEXT NOT NULL,
    -- Known once booked (an order by constraints chooses the machine).
    machine_id          UUID,
    host_tenant_id      UUID,
    gpu_model           TEXT,
    gpu_count           INTEGER NOT NULL CHECK (gpu_count > 0),
    gpu_indices         INTEGER[] NOT NULL DEFAULT '{}',
    starts_at           TIMESTAMPTZ NOT NULL,
    ends_at             TIMESTAMPTZ NOT NULL,
    price_per_gpu_hour  NUMERIC(24, 9),
    amount              NUMERIC(24, 9),
    currency            TEXT,
    status              TEXT NOT NULL CHECK (status IN ('pending', 'booked', 'cancelled', 'failed')),
    -- Bought on resale: the reservation the hours were carved from.
    parent_id           UUID REFERENCES ordering.reservations (id),
    -- The listing a resale child was bought from.
    listing_id          UUID,
    reason              TEXT,
    failure_code        TEXT,
    -- The quota hold (keyed by the reservation id) was given back.
    quota_released_at   TIMESTAMPTZ,
    created_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK (ends_at > starts_at),
    CHECK (status <> 'booked' OR (machine_id IS NOT NULL AND price_per_gpu_hour IS NOT NULL
                                  AND amount IS NOT NULL AND currency IS NOT NULL
                                  AND cardinality(gpu_indices) = gpu_count)),
    UNIQUE (tenant_id, idempotency_key)
);
CREATE INDEX reservations_tenant ON ordering.reservations (tenant_id, starts_at DESC);
CREATE INDEX reservations_machine ON ordering.reservations (machine_id, starts_at DESC);
-- The sweeper gives back the quota of blocks that are over.
CREATE INDEX reservations_quota_held ON ordering.reservations (ends_at)
    WHERE quota_released_at IS NULL AND status IN ('booked', 'cancelled');
CREATE UNIQUE INDEX reservations_listing ON ordering.reservations (listing_id)
    WHERE listing_id IS NOT NULL;

-- A holder's offer to sell future hours of a reservation (all its GPUs).
CREATE TABLE ordering.resale_listings (
    id                   UUID PRIMARY KEY,
    reservation_id       UUID NOT NULL REFERENCES ordering.reservations (id),
    seller_tenant_id     UUID NOT NULL,
    machine_id           UUID NOT NULL,
    gpu_model            TEXT NOT NULL,
    gpu_count            INTEGER NOT NULL CHECK (gpu_count > 0),
    starts_at            TIMESTAMPTZ NOT NULL,
    ends_at              TIMESTAMPTZ NOT NULL,
    price_per_gpu_hour   NUMERIC(24, 9) NOT NULL CHECK (price_per_gpu_hour > 0),
    amount               NUMERIC(24, 9) NOT NULL CHECK (amount > 0),
    currency             TEXT NOT NULL,
    state                TEXT NOT NULL CHECK (state IN ('open', 'selling', 'sold', 'withdrawn', 'expired')),
    -- The purchase under way or done: who, under which key, into which reservation.
    buyer_tenant_id      UUID,
    buyer_key            TEXT,
    buyer_fingerprint    TEXT,
    child_reservation_id UUID,
    created_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK (ends_at > starts_at),
    CHECK ((state IN ('selling', 'sold')) = (buyer_tenant_id IS NOT NULL AND child_reservation_id IS NOT NULL)),
    -- Hours are listed (or sold) once: no two live listings of one
    -- reservation overlap.
    EXCLUDE USING gist (reservation_id WITH =, tstzrange(starts_at, ends_at) WITH &&)
        WHERE (state IN ('open', 'selling', 'sold'))
);
CREATE INDEX resale_listings_open ON ordering.resale_listings (starts_at) WHERE state = 'open';
CREATE INDEX resale_listings_seller ON ordering.resale_listings (seller_tenant_id, created_at DESC);

-- An instance (and its order) launched on a reservation's GPUs.
ALTER TABLE ordering.orders ADD COLUMN reservation_id UUID;
ALTER TABLE ordering.instances ADD COLUMN reservation_id UUID;
