ALTER TABLE ordering.instances DROP COLUMN continue_up_to_per_gpu_hour;
ALTER TABLE catalog.allocations
    DROP CONSTRAINT allocations_continue_inside_a_block,
    DROP COLUMN continue_up_to_per_gpu_hour;
