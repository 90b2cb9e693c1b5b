-- Issue 20, item 5: an instance launched on a reservation may ask to go on
-- at the machine's on-demand price when the block ends (createOrder's
-- whenBlockEnds: ON_DEMAND). The ceiling the renter gave is kept where the
-- decision is made (the catalog's allocation, at the block's end) and where
-- a restart builds its allocate request again (ordering's instance). NULL:
-- the instance stops with the block.
ALTER TABLE catalog.allocations
    ADD COLUMN continue_up_to_per_gpu_hour NUMERIC(24, 9)
        CHECK (continue_up_to_per_gpu_hour IS NULL OR continue_up_to_per_gpu_hour > 0),
    ADD CONSTRAINT allocations_continue_inside_a_block
        CHECK (continue_up_to_per_gpu_hour IS NULL OR reservation_id IS NOT NULL);

ALTER TABLE ordering.instances
    ADD COLUMN continue_up_to_per_gpu_hour NUMERIC(24, 9)
        CHECK (continue_up_to_per_gpu_hour IS NULL OR continue_up_to_per_gpu_hour > 0);
