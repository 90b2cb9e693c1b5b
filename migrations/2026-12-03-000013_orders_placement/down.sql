DROP TABLE ordering.preemptions;
ALTER TABLE ordering.instances
    DROP COLUMN storage_price_per_gb_month,
    DROP COLUMN bandwidth_up_price_per_tb,
    DROP COLUMN bandwidth_down_price_per_tb,
    DROP COLUMN preempted_at;
-- A placed order's offer is the machine it was placed on; unplaced ones never held anything.
UPDATE ordering.orders SET offer_id = machine_id WHERE offer_id IS NULL AND machine_id IS NOT NULL;
DELETE FROM ordering.orders WHERE offer_id IS NULL;
ALTER TABLE ordering.orders
    DROP CONSTRAINT orders_offer_or_constraints,
    DROP COLUMN bid_per_gpu_hour,
    DROP COLUMN constraints,
    DROP COLUMN gpu_model,
    ALTER COLUMN offer_id SET NOT NULL;
DROP INDEX catalog.allocations_preemptible;
ALTER TABLE catalog.allocations
    DROP CONSTRAINT allocations_bid_when_interruptible,
    DROP COLUMN rental_type,
    DROP COLUMN bid_per_gpu_hour,
    DROP COLUMN instance_id,
    DROP COLUMN price_per_gpu_hour,
    DROP COLUMN storage_price_per_gb_month,
    DROP COLUMN bandwidth_up_price_per_tb,
    DROP COLUMN bandwidth_down_price_per_tb,
    DROP COLUMN currency,
    DROP COLUMN preempted_at,
    DROP COLUMN preempted_by;
