-- When each API key last authenticated (written at most once a minute per
-- key, docs/security.md), and the key a rotation replaced.
ALTER TABLE quota.api_keys
    ADD COLUMN last_used_at TIMESTAMPTZ,
    ADD COLUMN rotated_from UUID REFERENCES quota.api_keys (id);
