DROP INDEX metering.intervals_open;
ALTER TABLE metering.intervals DROP COLUMN settled_seconds;
