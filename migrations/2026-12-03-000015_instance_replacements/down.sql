ALTER TABLE ordering.instances DROP COLUMN failed_machine_ids;
