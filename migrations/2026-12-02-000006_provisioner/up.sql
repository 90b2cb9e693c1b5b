-- The provisioner service's schema, reachable only by its own role.
DO $$
BEGIN
    -- Roles are cluster-wide: other databases (one per test) share them, and
    -- two migrations may race to create one.
    CREATE ROLE gpumarket_provisioner LOGIN;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END
$$;

CREATE SCHEMA provisioner;
REVOKE ALL ON SCHEMA provisioner FROM PUBLIC;
GRANT USAGE ON SCHEMA provisioner TO gpumarket_provisioner;
ALTER DEFAULT PRIVILEGES IN SCHEMA provisioner GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO gpumarket_provisioner;
ALTER DEFAULT PRIVILEGES IN SCHEMA provisioner GRANT USAGE, SELECT ON SEQUENCES TO gpumarket_provisioner;

-- The database, not an unacked delivery, holds a job's progress.
CREATE TABLE provisioner.jobs (
    id          UUID PRIMARY KEY,
    instance_id UUID NOT NULL,
    kind        TEXT NOT NULL,
    machine_id  UUID NOT NULL,
    payload     JSONB NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('running', 'succeeded', 'failed')),
    attempts    INTEGER NOT NULL DEFAULT 0,
    last_error  TEXT,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at TIMESTAMPTZ,
    UNIQUE (instance_id, kind)
);

CREATE TABLE provisioner.job_steps (
    job_id      UUID NOT NULL REFERENCES provisioner.jobs (id),
    step        TEXT NOT NULL,
    position    INTEGER NOT NULL,
    attempts    INTEGER NOT NULL DEFAULT 0,
    started_at  TIMESTAMPTZ NOT NULL,
    finished_at TIMESTAMPTZ,
    duration_ms BIGINT,
    last_error  TEXT,
    PRIMARY KEY (job_id, step)
);

-- State of the simulated driver's machines: what is bound to which
-- instance. The primary key is what makes a GPU index bindable once.
CREATE TABLE provisioner.sim_resources (
    machine_id  UUID NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('gpu', 'container', 'network', 'ssh_key', 'volume')),
    name        TEXT NOT NULL,
    instance_id UUID NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (machine_id, kind, name)
);
CREATE INDEX sim_resources_instance ON provisioner.sim_resources (instance_id);

-- Idempotent consumer: a message id is recorded in the effect's transaction.
CREATE TABLE provisioner.inbox (
    message_id   UUID PRIMARY KEY,
    kind         TEXT NOT NULL,
    processed_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
