-- Reserved capacity (issue 20, docs/reservations.md, docs/catalog.md
-- "Reserved blocks"): the catalog's side. A host's terms per machine, one
-- booking per reservation, one row per booked GPU index and period under an
-- exclusion constraint (the no-double-booking rule), and the block's hold on
-- its GPUs while it runs (an allocation marked with the reservation).
CREATE EXTENSION IF NOT EXISTS btree_gist;

-- A host's terms for reserved blocks on one machine (no row: not offered).
CREATE TABLE catalog.reserved_terms (
    machine_id         UUID PRIMARY KEY REFERENCES catalog.machines (id),
    price_per_gpu_hour NUMERIC(24, 9) NOT NULL CHECK (price_per_gpu_hour > 0),
    max_lead_days      INTEGER NOT NULL CHECK (max_lead_days BETWEEN 1 AND 365),
    min_block_hours    INTEGER NOT NULL CHECK (min_block_hours BETWEEN 1 AND 2160),
    updated_at         TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- One reservation's GPUs of one machine. `starts_at`/`ends_at` are the block
-- as booked (or as carved, for a resale child); what is booked now is in
-- `booked_gpus` (cancelling shortens it, carving cuts a hole in it).
CREATE TABLE catalog.bookings (
    reservation_id              UUID PRIMARY KEY,
    tenant_id                   UUID NOT NULL,
    machine_id                  UUID NOT NULL REFERENCES catalog.machines (id),
    host_tenant_id              UUID NOT NULL,
    gpu_model                   TEXT NOT NULL,
    gpu_indices                 SMALLINT[] NOT NULL CHECK (cardinality(gpu_indices) > 0),
    starts_at                   TIMESTAMPTZ NOT NULL,
    ends_at                     TIMESTAMPTZ NOT NULL,
    -- The reserved price committed with the booking, and the machine's
    -- storage and bandwidth rates then (what instances in the block pay).
    price_per_gpu_hour          NUMERIC(24, 9) NOT NULL CHECK (price_per_gpu_hour > 0),
    currency                    TEXT NOT NULL,
    storage_price_per_gb_month  NUMERIC(24, 9) NOT NULL,
    bandwidth_up_price_per_tb   NUMERIC(24, 9) NOT NULL,
    bandwidth_down_price_per_tb NUMERIC(24, 9) NOT NULL,
    -- A resale: the booking these hours were carved from.
    parent_id                   UUID REFERENCES catalog.bookings (reservation_id),
    -- Nothing at or after this instant is booked any more.
    cancelled_from              TIMESTAMPTZ,
    -- The block first took its GPUs; it gave them back for the last time.
    activated_at                TIMESTAMPTZ,
    finished_at                 TIMESTAMPTZ,
    created_at                  TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK (ends_at > starts_at),
    CHECK (parent_id <> reservation_id),
    -- For booked_gpus' reference: a booked GPU is on its booking's machine.
    UNIQUE (reservation_id, machine_id)
);
-- The sweeper and unlisting look at the bookings not finished, per machine.
CREATE INDEX bookings_unfinished ON catalog.bookings (machine_id) WHERE finished_at IS NULL;
CREATE INDEX bookings_parent ON catalog.bookings (parent_id) WHERE parent_id IS NOT NULL;

-- One row per booked GPU index and period. The exclusion constraint is the
-- no-double-booking rule: two periods of one GPU never overlap.
CREATE TABLE catalog.booked_gpus (
    reservation_id UUID NOT NULL,
    machine_id     UUID NOT NULL,
    gpu_index      SMALLINT NOT NULL CHECK (gpu_index >= 0),
    period         TSTZRANGE NOT NULL CHECK (
        NOT isempty(period) AND lower_inc(period) AND NOT upper_inc(period)
        AND NOT lower_inf(period) AND NOT upper_inf(period)),
    PRIMARY KEY (reservation_id, gpu_index, period),
    FOREIGN KEY (reservation_id, machine_id) REFERENCES catalog.bookings (reservation_id, machine_id),
    CONSTRAINT booked_gpus_no_overlap
        EXCLUDE USING gist (machine_id WITH =, gpu_index WITH =, period WITH &&)
);
-- Warnings look for blocks starting soon and blocks ending soon.
CREATE INDEX booked_gpus_starts ON catalog.booked_gpus (lower(period));
CREATE INDEX booked_gpus_ends ON catalog.booked_gpus (upper(period));

-- `reservation_id`: an instance's allocation inside a running block (GPUs
-- of the block, no GPU price, nothing held on the machine's counter).
-- `block_reservation_id`: the block's own hold on its GPUs while it runs.
ALTER TABLE catalog.allocations
    ADD COLUMN reservation_id UUID REFERENCES catalog.bookings (reservation_id),
    ADD COLUMN block_reservation_id UUID REFERENCES catalog.bookings (reservation_id),
    ADD CONSTRAINT allocations_block_or_instance
        CHECK (reservation_id IS NULL OR block_reservation_id IS NULL),
    ADD CONSTRAINT allocations_blocks_whole_on_demand
        CHECK ((reservation_id IS NULL AND block_reservation_id IS NULL)
               OR (mig_profile IS NULL AND rental_type = 'on_demand'));
-- A block holds its GPUs once at a time.
CREATE UNIQUE INDEX allocations_block_hold ON catalog.allocations (block_reservation_id)
    WHERE released_at IS NULL AND block_reservation_id IS NOT NULL;
CREATE INDEX allocations_in_block ON catalog.allocations (reservation_id)
    WHERE released_at IS NULL AND reservation_id IS NOT NULL;

-- Which GPU of a running block each instance allocation inside it uses: a
-- GPU of a machine is used by one instance at a time (the primary key).
CREATE TABLE catalog.block_gpu_uses (
    machine_id     UUID NOT NULL REFERENCES catalog.machines (id),
    gpu_index      SMALLINT NOT NULL CHECK (gpu_index >= 0),
    reservation_id UUID NOT NULL REFERENCES catalog.bookings (reservation_id),
    holder         UUID NOT NULL REFERENCES catalog.allocations (order_id),
    PRIMARY KEY (machine_id, gpu_index)
);
CREATE INDEX block_gpu_uses_holder ON catalog.block_gpu_uses (holder);

-- `catalog.allocation.ending_soon` sent: once per allocation and instant.
CREATE TABLE catalog.ending_warnings (
    order_id UUID NOT NULL REFERENCES catalog.allocations (order_id),
    ends_at  TIMESTAMPTZ NOT NULL,
    sent_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (order_id, ends_at)
);
