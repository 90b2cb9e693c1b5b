ALTER TABLE provisioner.jobs DROP CONSTRAINT jobs_kind_known;
