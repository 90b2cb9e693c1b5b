-- Spend control (docs/spend-control.md).
--
-- A renter's usage charges per calendar month (UTC, by the segment's start),
-- kept in the posting's transaction so a monthly spend cap is checked when a
-- charge is posted, like the prepaid floor, not by a sweep that can
-- overshoot. `cap_reached_at` makes the announcement once per crossing.
CREATE TABLE billing.monthly_spend (
    tenant_id       UUID NOT NULL,
    month           DATE NOT NULL,
    currency        TEXT NOT NULL,
    spent           NUMERIC(24, 9) NOT NULL DEFAULT 0,
    last_charged_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    cap_reached_at  TIMESTAMPTZ,
    PRIMARY KEY (tenant_id, month)
);
CREATE INDEX monthly_spend_recent ON billing.monthly_spend (last_charged_at);

-- The tenant's monthly budget as the quota service last reported it
-- (quota owns it; billing refreshes this copy every settlement interval
-- for tenants that are being charged). NULL cap: no budget.
CREATE TABLE billing.spend_caps (
    tenant_id   UUID PRIMARY KEY,
    monthly_cap NUMERIC(24, 9),
    synced_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- A low-runway warning in force: inserted when the runway drops below the
-- warning, deleted when it recovers, so each crossing is announced once
-- however many billing replicas watch.
CREATE TABLE billing.runway_alerts (
    tenant_id      UUID PRIMARY KEY,
    low_since      TIMESTAMPTZ NOT NULL,
    balance        NUMERIC(24, 9) NOT NULL,
    burn_per_hour  NUMERIC(24, 9) NOT NULL,
    runway_seconds BIGINT NOT NULL
);
