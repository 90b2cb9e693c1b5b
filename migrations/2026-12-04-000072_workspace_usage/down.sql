ALTER TABLE ordering.instances
    DROP COLUMN disk_measured_at,
    DROP COLUMN disk_used_bytes;
