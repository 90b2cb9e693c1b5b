-- Orders by constraints, prices enforced at commit, interruptible rentals.

-- The catalog keeps what each allocation is (rental type, bid) and the rates
-- it was committed at, so a repeated allocate answers the same snapshot, and
-- preemption can choose the lowest bids among live interruptible holdings.
ALTER TABLE catalog.allocations
    ADD COLUMN rental_type TEXT NOT NULL DEFAULT 'on_demand'
        CHECK (rental_type IN ('on_demand', 'interruptible')),
    ADD COLUMN bid_per_gpu_hour NUMERIC(24, 9) CHECK (bid_per_gpu_hour >= 0),
    ADD COLUMN instance_id UUID,
    ADD COLUMN price_per_gpu_hour NUMERIC(24, 9),
    ADD COLUMN storage_price_per_gb_month NUMERIC(24, 9),
    ADD COLUMN bandwidth_up_price_per_tb NUMERIC(24, 9),
    ADD COLUMN bandwidth_down_price_per_tb NUMERIC(24, 9),
    ADD COLUMN currency TEXT,
    ADD COLUMN preempted_at TIMESTAMPTZ,
    ADD COLUMN preempted_by UUID,
    ADD CONSTRAINT allocations_bid_when_interruptible
        CHECK ((rental_type = 'interruptible') = (bid_per_gpu_hour IS NOT NULL));
CREATE INDEX allocations_preemptible ON catalog.allocations (machine_id, bid_per_gpu_hour, created_at)
    WHERE released_at IS NULL AND rental_type = 'interruptible';

-- An order by constraints has no offer until it is placed.
ALTER TABLE ordering.orders
    ALTER COLUMN offer_id DROP NOT NULL,
    ADD COLUMN bid_per_gpu_hour NUMERIC(24, 9),
    ADD COLUMN constraints JSONB,
    -- The model of the quoted offer: quota is held per model, so an order
    -- by constraints is placed on offers of this model.
    ADD COLUMN gpu_model TEXT,
    ADD CONSTRAINT orders_offer_or_constraints CHECK (offer_id IS NOT NULL OR constraints IS NOT NULL);

-- The rates billed besides the GPU price, as committed at allocation.
ALTER TABLE ordering.instances
    ADD COLUMN storage_price_per_gb_month NUMERIC(24, 9) NOT NULL DEFAULT 0,
    ADD COLUMN bandwidth_up_price_per_tb NUMERIC(24, 9) NOT NULL DEFAULT 0,
    ADD COLUMN bandwidth_down_price_per_tb NUMERIC(24, 9) NOT NULL DEFAULT 0,
    ADD COLUMN preempted_at TIMESTAMPTZ;

-- Allocations the catalog preempted, by holding key (an order id or a start
-- attempt's key). Written by the preemption consumer; checked by the saga and
-- by start before they create or restart an instance on those GPUs, so a
-- preemption that lands before the instance exists is not lost.
CREATE TABLE ordering.preemptions (
    allocation_key UUID PRIMARY KEY,
    instance_id    UUID,
    machine_id     UUID NOT NULL,
    preempted_at   TIMESTAMPTZ NOT NULL,
    reason         TEXT NOT NULL,
    recorded_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
