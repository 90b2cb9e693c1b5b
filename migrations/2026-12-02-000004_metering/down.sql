-- The role gpumarket_metering is cluster-wide and may serve other databases; it stays.
DROP SCHEMA metering CASCADE;
