-- The role gpumarket_catalog is cluster-wide and may serve other databases; it stays.
DROP SCHEMA catalog CASCADE;
