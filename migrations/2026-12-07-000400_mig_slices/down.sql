ALTER TABLE quota.reservations DROP COLUMN gpu_eighths;
ALTER TABLE ordering.orders DROP COLUMN mig_profile, DROP COLUMN gpu_eighths, DROP COLUMN planned_instance_id;
ALTER TABLE ordering.instances DROP COLUMN gpu_indices, DROP COLUMN mig_profile, DROP COLUMN mig_slice;
DROP TABLE catalog.gpu_holds;
ALTER TABLE catalog.allocations
    DROP CONSTRAINT allocations_slice_on_demand,
    DROP CONSTRAINT allocations_slice_complete,
    DROP COLUMN gpu_indices, DROP COLUMN mig_profile, DROP COLUMN mig_gpu_index,
    DROP COLUMN mig_start, DROP COLUMN mig_size;
ALTER TABLE catalog.machines DROP CONSTRAINT machines_whole_and_mig_within_count, DROP COLUMN mig_gpus;
DROP TABLE catalog.mig_free;
DROP TABLE catalog.mig_prices;
DROP TABLE catalog.mig_gpus;
DROP TABLE catalog.mig_profiles;
