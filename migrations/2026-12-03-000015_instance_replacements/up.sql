-- Machines a never-run instance's provisioning failed on, in order. An order
-- by constraints whose first run fails is re-placed on another matching
-- machine (never one of these) while its quota stays held.
ALTER TABLE ordering.instances
    ADD COLUMN failed_machine_ids uuid[] NOT NULL DEFAULT '{}';
