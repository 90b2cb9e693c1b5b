-- Issue 19: a provisioning job's kind is one the worker knows
-- (provisioner::jobs::JobKind): `provision`, `provision:<attempt>`,
-- `deprovision`, `cleanup`, `cleanup:<attempt>` or `stop:<command id>`.
-- The worker used to run any other kind as a stop. NOT VALID: rows written
-- before are not re-checked (they were all of these kinds), new ones are.
ALTER TABLE provisioner.jobs
    ADD CONSTRAINT jobs_kind_known CHECK (
        kind ~ '^(provision(:[0-9]+)?|deprovision|cleanup(:[0-9]+)?|stop:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$'
    ) NOT VALID;
