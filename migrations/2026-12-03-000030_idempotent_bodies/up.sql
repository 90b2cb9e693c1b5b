-- The same idempotency key with a different body is a CONFLICT, never a
-- silent replay of the first result (docs/architecture.md, "Idempotency").
-- These two keyed mutations had nothing to compare a replay against.

-- A machine's fields change after registration (prices, listing, what its
-- agent reports), so the registration request is kept as a hash.
CREATE TABLE catalog.machine_registrations (
    machine_id     UUID PRIMARY KEY REFERENCES catalog.machines (id) ON DELETE CASCADE,
    request_sha256 TEXT NOT NULL
);

-- One row per grantCredit key: an operator's key names one grant, whatever
-- the tenant.
CREATE TABLE billing.credit_grants (
    idempotency_key TEXT PRIMARY KEY,
    tenant_id       UUID NOT NULL,
    amount          NUMERIC(24, 9) NOT NULL,
    reason          TEXT NOT NULL,
    transaction_id  TEXT NOT NULL UNIQUE REFERENCES billing.transactions (id),
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Grants made before: their posting id is credit:<tenant uuid>:<key>, and
-- the renter's leg is the positive one. A key used for two tenants keeps
-- its first grant.
INSERT INTO billing.credit_grants (idempotency_key, tenant_id, amount, reason, transaction_id, created_at)
SELECT DISTINCT ON (substring(t.id FROM 45))
       substring(t.id FROM 45), t.tenant_id, e.amount, t.description, t.id, t.created_at
FROM billing.transactions t
JOIN billing.entries e ON e.transaction_id = t.id AND e.amount > 0
WHERE t.kind = 'credit' AND t.id LIKE 'credit:%' AND t.tenant_id IS NOT NULL
  AND length(t.id) > 44
ORDER BY substring(t.id FROM 45), t.created_at;
