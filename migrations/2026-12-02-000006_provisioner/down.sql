-- The role gpumarket_provisioner is cluster-wide and may serve other databases; it stays.
DROP SCHEMA provisioner CASCADE;
