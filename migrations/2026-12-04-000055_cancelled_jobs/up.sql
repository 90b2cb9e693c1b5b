-- A provisioning job stopped because its instance was destroyed while it ran.
ALTER TABLE provisioner.jobs DROP CONSTRAINT jobs_status_check;
ALTER TABLE provisioner.jobs
    ADD CONSTRAINT jobs_status_check CHECK (status IN ('running', 'succeeded', 'failed', 'cancelled'));
