-- Issue 16: what a rental runs and how its renter reaches it.
-- `env` holds the renter's secrets (never logged, never returned by an API).
ALTER TABLE ordering.instances
    ADD COLUMN command JSONB,
    ADD COLUMN env JSONB NOT NULL DEFAULT '{}'::jsonb,
    ADD COLUMN ports INT4[] NOT NULL DEFAULT '{}',
    -- The host agent's connection for the current run; cleared when the run
    -- ends (stop, destroy, failure).
    ADD COLUMN connection JSONB;

-- What an agent's answer handed back (the readiness check's connection),
-- and how many progress reports a command got (bounded).
ALTER TABLE provisioner.agent_commands
    ADD COLUMN detail JSONB,
    ADD COLUMN progress_count INT4 NOT NULL DEFAULT 0;
