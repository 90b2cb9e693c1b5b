ALTER TABLE catalog.machines DROP COLUMN deleted_at;
