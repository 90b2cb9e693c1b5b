-- Operators' marketplace overview (docs/dashboards.md, "Operator overview"):
-- all usage whose segment started in a time range, whatever the tenant. The
-- per-tenant and per-host indexes of migrations 21 and 24 lead with the
-- tenant, so without this a range over every tenant reads the whole table.
CREATE INDEX usage_details_started ON billing.usage_details (started_at);
