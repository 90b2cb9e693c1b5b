-- Outbound webhooks (issue 18): every payload carries its resource's own
-- sequence number, so a receiver can order one resource's events (delivery
-- order is not guaranteed). The publisher takes the next number in the
-- transaction of the change and its outbox row (platform::sequence): the
-- upsert holds the resource's row lock until commit, so for one resource
-- the numbers increase in commit order. One counter per resource key
-- (`tenant:<uuid>`, `invoice:<uuid>`, `machine:<uuid>`, ...); the schemas'
-- default privileges grant the tables to their service's role.
CREATE TABLE billing.resource_sequences (
    resource TEXT PRIMARY KEY,
    seq BIGINT NOT NULL CHECK (seq > 0)
);

CREATE TABLE catalog.resource_sequences (
    resource TEXT PRIMARY KEY,
    seq BIGINT NOT NULL CHECK (seq > 0)
);

-- The webhook service's own `endpoint.disabled`, per endpoint.
CREATE TABLE webhooks.resource_sequences (
    resource TEXT PRIMARY KEY,
    seq BIGINT NOT NULL CHECK (seq > 0)
);
