-- A traffic sample for an instance metering has not heard of yet waits
-- unscreened; the instance's first event screens it against the link
-- (metering::meters::settle_traffic) with the bandwidth the catalog attached
-- to it. Before, such a sample was counted unscreened: a host's agent could
-- bill its renter any byte count by reporting before the start arrived.
ALTER TABLE metering.traffic_samples
    ADD COLUMN screened      BOOLEAN NOT NULL DEFAULT true,
    ADD COLUMN upload_mbps   INTEGER,
    ADD COLUMN download_mbps INTEGER;
CREATE INDEX traffic_samples_unscreened ON metering.traffic_samples (instance_id)
    WHERE NOT screened;
