-- Issue 16: how much of its disk a rental's /workspace holds, as its agent
-- last measured it (the engines' local volumes enforce no size).
ALTER TABLE ordering.instances
    ADD COLUMN disk_used_bytes BIGINT CHECK (disk_used_bytes >= 0),
    ADD COLUMN disk_measured_at TIMESTAMPTZ;
