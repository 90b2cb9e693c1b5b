-- The role gpumarket_webhooks is cluster-wide and may serve other databases; it stays.
DROP SCHEMA webhooks CASCADE;
