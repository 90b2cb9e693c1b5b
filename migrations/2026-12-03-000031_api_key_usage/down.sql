ALTER TABLE quota.api_keys DROP COLUMN rotated_from, DROP COLUMN last_used_at;
