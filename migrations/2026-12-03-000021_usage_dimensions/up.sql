-- The dimensions dashboards and host statements group usage by: the machine
-- and GPU model of the rental (from the `running` event) and the host it
-- earned for. Rows written before this migration keep NULLs (they predate
-- the dimensions, and ledger rows are never edited).
ALTER TABLE metering.intervals
    ADD COLUMN machine_id UUID,
    ADD COLUMN gpu_model  TEXT;

ALTER TABLE billing.usage_details
    ADD COLUMN host_tenant_id UUID,
    ADD COLUMN machine_id     UUID,
    ADD COLUMN gpu_model      TEXT;

CREATE INDEX usage_details_host ON billing.usage_details (host_tenant_id, started_at)
    WHERE host_tenant_id IS NOT NULL;
