DROP INDEX billing.transactions_downtime_tenant;
DROP INDEX billing.transactions_usage_instance;
DROP INDEX billing.usage_details_untenanted;
DROP INDEX billing.usage_details_tenant;
DROP TRIGGER usage_details_tenant ON billing.usage_details;
DROP FUNCTION billing.usage_details_tenant();
ALTER TABLE billing.usage_details DROP COLUMN tenant_id;
