-- The correlation id of the event that opened an interval (the instance's
-- `running` event for GPU time, `storage_started` for storage and
-- bandwidth), so that what metering announces on its own later, the
-- periodic settlement segments and their corrections, can be followed back
-- to the order (docs/operations.md, "Following one order"). NULL for
-- intervals opened before this migration and for events that carried none.
ALTER TABLE metering.intervals ADD COLUMN correlation_id TEXT;
