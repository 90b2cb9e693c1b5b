ALTER TABLE provisioner.agent_commands DROP COLUMN progress_count, DROP COLUMN detail;
ALTER TABLE ordering.instances
    DROP COLUMN connection, DROP COLUMN ports,
    DROP COLUMN env, DROP COLUMN command;
