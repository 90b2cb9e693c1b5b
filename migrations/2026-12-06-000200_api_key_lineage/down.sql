DROP INDEX quota.api_keys_created_by_key;
ALTER TABLE quota.api_keys DROP COLUMN created_by_key;
