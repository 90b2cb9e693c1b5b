DROP TRIGGER reservations_gpu_eighths ON quota.reservations;
DROP FUNCTION quota.default_gpu_eighths();
ALTER TABLE quota.reservations DROP COLUMN gpu_eighths;
ALTER TABLE ordering.orders DROP COLUMN mig_profile, DROP COLUMN gpu_eighths, DROP COLUMN planned_instance_id;
ALTER TABLE ordering.instances DROP COLUMN gpu_indices, DROP COLUMN mig_profile, DROP COLUMN mig_slice;
DROP TABLE catalog.gpu_holds;
ALTER TABLE catalog.allocations
    DROP CONSTRAINT allocations_slice_on_demand,
    DROP CONSTRAINT allocations_slice_complete,
    DROP COLUMN gpu_indices, DROP COLUMN mig_profile, DROP COLUMN mig_gpu_index,
    DROP COLUMN mig_start, DROP COLUMN mig_size;
DROP STATISTICS catalog.machines_gpus_free;
ALTER TABLE catalog.machines DROP CONSTRAINT machines_whole_and_mig_within_count, DROP COLUMN mig_gpus;
CREATE STATISTICS catalog.machines_gpus_free ON (gpu_count - gpus_allocated) FROM catalog.machines;
DROP TABLE catalog.mig_free;
DROP TABLE catalog.mig_prices;
DROP TABLE catalog.mig_gpus;
DROP TABLE catalog.mig_profiles;
