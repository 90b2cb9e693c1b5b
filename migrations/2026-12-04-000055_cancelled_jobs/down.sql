UPDATE provisioner.jobs SET status = 'failed' WHERE status = 'cancelled';
ALTER TABLE provisioner.jobs DROP CONSTRAINT jobs_status_check;
ALTER TABLE provisioner.jobs
    ADD CONSTRAINT jobs_status_check CHECK (status IN ('running', 'succeeded', 'failed'));
