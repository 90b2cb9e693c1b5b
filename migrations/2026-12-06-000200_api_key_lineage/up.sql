-- The key a key was created with (NULL: created by a login). Revoking a key
-- revokes every key created with it or with a key it replaced, so a leaked
-- key cannot leave behind keys that outlive its revocation.
ALTER TABLE quota.api_keys
    ADD COLUMN created_by_key UUID REFERENCES quota.api_keys (id);
CREATE INDEX api_keys_created_by_key ON quota.api_keys (created_by_key)
    WHERE created_by_key IS NOT NULL;
