-- The role gpumarket_ordering is cluster-wide and may serve other databases; it stays.
DROP SCHEMA ordering CASCADE;
