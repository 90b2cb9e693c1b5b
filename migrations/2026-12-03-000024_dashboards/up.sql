-- Billing dashboards (docs/dashboards.md): a renter's usage series and a
-- host's earnings by machine are read by tenant and by the instant a usage
-- segment started, aggregated in SQL.

-- The renter of a usage posting beside its details, so a renter's usage in
-- a time range is one index range, not every posting the tenant ever made.
-- A copy of `transactions.tenant_id`, filled on insert by the trigger below
-- (the writer of `usage_details` need not know of it). Rows written before
-- this migration keep NULL: ledger rows are never edited; the dashboards
-- read those through the posting's own tenant (`usage_details_untenanted`).
ALTER TABLE billing.usage_details ADD COLUMN tenant_id UUID;

CREATE FUNCTION billing.usage_details_tenant() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.tenant_id IS NULL THEN
        SELECT t.tenant_id INTO NEW.tenant_id
        FROM billing.transactions t
        WHERE t.id = NEW.transaction_id;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER usage_details_tenant BEFORE INSERT ON billing.usage_details
    FOR EACH ROW EXECUTE FUNCTION billing.usage_details_tenant();

CREATE INDEX usage_details_tenant ON billing.usage_details (tenant_id, started_at)
    WHERE tenant_id IS NOT NULL;
-- Only the rows from before this migration: small, and never grows.
CREATE INDEX usage_details_untenanted ON billing.usage_details (started_at)
    WHERE tenant_id IS NULL;

-- The machine of a downtime credit is found through the instance's usage.
CREATE INDEX transactions_usage_instance ON billing.transactions (instance_id)
    WHERE kind = 'usage';

-- A host's downtime credits by time.
CREATE INDEX transactions_downtime_tenant ON billing.transactions (created_at)
    WHERE kind = 'downtime_credit';
