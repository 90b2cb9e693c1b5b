-- A host deletes a machine (issue 15, item 21): it is kept for its history
-- (allocations, heartbeat gaps and usage refer to it) but marked deleted,
-- unlisted, and hidden from its host; its broker queue and user are gone.
ALTER TABLE catalog.machines ADD COLUMN deleted_at TIMESTAMPTZ;
