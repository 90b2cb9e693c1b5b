-- Running intervals are settled every settlement interval, not only when
-- they close: `settled_seconds` is how much of the interval has been
-- announced to billing so far (whole seconds from its start).
ALTER TABLE metering.intervals
    ADD COLUMN settled_seconds bigint NOT NULL DEFAULT 0;

CREATE INDEX intervals_open ON metering.intervals (started_at)
    WHERE recorded_at IS NULL AND ended_at IS NULL AND started_at IS NOT NULL;
