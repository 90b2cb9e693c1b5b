-- Storage and bandwidth meters (docs/metering.md).

-- The disk a renter asked for (GiB); NULL on an order that named none (it
-- got the default). An instance's disk is always set from now on; NULL
-- marks an instance from before the storage meter, whose disk is not
-- metered (it was never announced, and billing it now would surprise).
ALTER TABLE ordering.orders
    ADD COLUMN disk_gib INTEGER CHECK (disk_gib >= 1);
ALTER TABLE ordering.instances
    ADD COLUMN disk_gib INTEGER CHECK (disk_gib >= 1);

-- Storage intervals rate disk_gib × unit_price (per GB-month) exactly;
-- bandwidth intervals carry their price per TB in unit_price, and count
-- announced bytes in settled_seconds.
ALTER TABLE metering.intervals
    ADD COLUMN disk_gib   INTEGER,
    ADD COLUMN unit_price NUMERIC(24, 9);

-- Cumulative traffic counters of an instance as its host's agent sampled
-- them. A (boot, seq) is one sample: a repeat is the same sample and is
-- kept once (the first copy wins). Totals are always recomputed from every
-- sample, so late and reordered samples give the same total.
CREATE TABLE metering.traffic_samples (
    instance_id UUID NOT NULL,
    boot_id     UUID NOT NULL,
    seq         BIGINT NOT NULL,
    machine_id  UUID NOT NULL,
    sent_at     TIMESTAMPTZ NOT NULL,
    tx_bytes    BIGINT NOT NULL CHECK (tx_bytes >= 0),
    rx_bytes    BIGINT NOT NULL CHECK (rx_bytes >= 0),
    received_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (instance_id, boot_id, seq)
);

-- What a usage posting counted when it is not seconds (`byte`), the
-- quantity an invoice shows (GiB-seconds for storage, bytes for bandwidth;
-- NULL: `seconds`), and the meter's list price in its own unit (per
-- GB-month, per TB; NULL: `price_per_hour`).
ALTER TABLE billing.usage_details
    ADD COLUMN unit       TEXT NOT NULL DEFAULT 'second',
    ADD COLUMN quantity   BIGINT,
    ADD COLUMN unit_price NUMERIC(24, 9);
