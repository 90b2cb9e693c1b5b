DROP INDEX billing.usage_details_host;
ALTER TABLE billing.usage_details
    DROP COLUMN gpu_model,
    DROP COLUMN machine_id,
    DROP COLUMN host_tenant_id;
ALTER TABLE metering.intervals
    DROP COLUMN gpu_model,
    DROP COLUMN machine_id;
