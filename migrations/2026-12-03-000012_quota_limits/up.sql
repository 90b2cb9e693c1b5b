-- Quota in every dimension the issue names, for tenants and their teams.
-- A NULL limit is "not limited at this level"; per-model limits are a JSON
-- object {"<catalog GPU model name>": <max GPUs>}.

ALTER TABLE quota.tenant_quotas
    ADD COLUMN max_gpus_per_model    JSONB NOT NULL DEFAULT '{}'::jsonb
        CHECK (jsonb_typeof(max_gpus_per_model) = 'object'),
    ADD COLUMN max_running_instances INTEGER CHECK (max_running_instances >= 0),
    ADD COLUMN monthly_budget        NUMERIC(24, 9) CHECK (monthly_budget >= 0);

-- Teams (projects) of a tenant. The nominal quota never exceeds the
-- tenant's (checked by the service under the tenant's quota row lock); the
-- borrowing limit is how far beyond it a team may use the tenant's unused
-- quota (NULL: no borrowing on that dimension).
CREATE TABLE quota.teams (
    id                       UUID PRIMARY KEY,
    tenant_id                UUID NOT NULL REFERENCES quota.tenants (id),
    name                     TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    idempotency_key          TEXT NOT NULL,
    max_gpus                 INTEGER CHECK (max_gpus >= 0),
    max_gpus_per_model       JSONB NOT NULL DEFAULT '{}'::jsonb
        CHECK (jsonb_typeof(max_gpus_per_model) = 'object'),
    max_running_instances    INTEGER CHECK (max_running_instances >= 0),
    monthly_budget           NUMERIC(24, 9) CHECK (monthly_budget >= 0),
    borrow_gpus              INTEGER CHECK (borrow_gpus >= 0),
    borrow_gpus_per_model    JSONB NOT NULL DEFAULT '{}'::jsonb
        CHECK (jsonb_typeof(borrow_gpus_per_model) = 'object'),
    borrow_running_instances INTEGER CHECK (borrow_running_instances >= 0),
    borrow_monthly_budget    NUMERIC(24, 9) CHECK (borrow_monthly_budget >= 0),
    created_at               TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at               TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, idempotency_key),
    UNIQUE (tenant_id, name)
);

-- What a hold counts in each dimension. Holds made before this migration
-- have no model and a zero rate: they still count as GPUs and instances.
ALTER TABLE quota.reservations
    ADD COLUMN gpu_model   TEXT NOT NULL DEFAULT '',
    ADD COLUMN hourly_rate NUMERIC(24, 9) NOT NULL DEFAULT 0 CHECK (hourly_rate >= 0),
    ADD COLUMN team_id     UUID REFERENCES quota.teams (id);

-- The month's spend reads a tenant's holds that were live in the month.
CREATE INDEX reservations_month ON quota.reservations (tenant_id, released_at);
CREATE INDEX reservations_team_live ON quota.reservations (team_id)
    WHERE released_at IS NULL AND team_id IS NOT NULL;
