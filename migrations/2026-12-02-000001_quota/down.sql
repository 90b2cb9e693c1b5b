-- The role gpumarket_quota is cluster-wide and may serve other databases; it stays.
DROP SCHEMA quota CASCADE;
