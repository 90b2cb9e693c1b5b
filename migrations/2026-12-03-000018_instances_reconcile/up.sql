-- The reconciler's pass reads instances that are running or on a lost host,
-- and those changed recently (a bitmap OR of these two); the expiry task
-- reads instances left `stopping`.
CREATE INDEX instances_live ON ordering.instances (id)
    WHERE state IN ('running', 'host_lost', 'stopping');
CREATE INDEX instances_updated ON ordering.instances (updated_at);
