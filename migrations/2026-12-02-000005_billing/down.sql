-- The role gpumarket_billing is cluster-wide and may serve other databases; it stays.
DROP SCHEMA billing CASCADE;
