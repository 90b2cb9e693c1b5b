DROP INDEX metering.traffic_samples_unscreened;
ALTER TABLE metering.traffic_samples
    DROP COLUMN screened,
    DROP COLUMN upload_mbps,
    DROP COLUMN download_mbps;
