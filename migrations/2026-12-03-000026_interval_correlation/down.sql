ALTER TABLE metering.intervals DROP COLUMN correlation_id;
