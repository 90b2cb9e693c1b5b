-- The GPU model catalog, host profiles with verification, full machine
-- specifications and listing terms.

-- Dense tensor throughput with FP32 accumulate, from NVIDIA's datasheets
-- (sparsity figures are halved; consumer cards quote FP16-accumulate figures
-- twice as high, which training does not use).
CREATE TABLE catalog.gpu_models (
    name               TEXT PRIMARY KEY,
    vram_gib           INTEGER NOT NULL CHECK (vram_gib > 0),
    architecture       TEXT NOT NULL,
    compute_capability TEXT NOT NULL,
    fp16_tflops        NUMERIC(8, 1) NOT NULL CHECK (fp16_tflops > 0),
    bf16_tflops        NUMERIC(8, 1) NOT NULL CHECK (bf16_tflops > 0)
);

INSERT INTO catalog.gpu_models (name, vram_gib, architecture, compute_capability, fp16_tflops, bf16_tflops) VALUES
    ('H200 141GB SXM',  141, 'Hopper',       '9.0', 989.5, 989.5),
    ('H100 80GB SXM',    80, 'Hopper',       '9.0', 989.5, 989.5),
    ('H100 80GB PCIe',   80, 'Hopper',       '9.0', 756.5, 756.5),
    ('H100 NVL',         94, 'Hopper',       '9.0', 835.5, 835.5),
    ('A100 80GB SXM',    80, 'Ampere',       '8.0', 312.0, 312.0),
    ('A100 80GB PCIe',   80, 'Ampere',       '8.0', 312.0, 312.0),
    ('A100 40GB PCIe',   40, 'Ampere',       '8.0', 312.0, 312.0),
    ('L40S',             48, 'Ada Lovelace', '8.9', 362.1, 362.1),
    ('L40',              48, 'Ada Lovelace', '8.9', 181.0, 181.0),
    ('L4',               24, 'Ada Lovelace', '8.9', 121.0, 121.0),
    ('A40',              48, 'Ampere',       '8.6', 149.7, 149.7),
    ('A10',              24, 'Ampere',       '8.6', 125.0, 125.0),
    ('RTX 6000 Ada',     48, 'Ada Lovelace', '8.9', 364.2, 364.2),
    ('RTX A6000',        48, 'Ampere',       '8.6', 154.8, 154.8),
    ('RTX 4090',         24, 'Ada Lovelace', '8.9', 165.2, 165.2),
    ('RTX 3090',         24, 'Ampere',       '8.6',  71.0,  71.0),
    ('V100 32GB SXM2',   32, 'Volta',        '7.0', 125.0, 125.0);

-- Machines registered before the catalog existed keep working only if their
-- model is in it; an unknown model would have no TFLOPS to rank by.
ALTER TABLE catalog.machines
    ADD CONSTRAINT machines_gpu_model_fk FOREIGN KEY (gpu_model) REFERENCES catalog.gpu_models (name);

CREATE TABLE catalog.host_profiles (
    tenant_id           UUID PRIMARY KEY,
    legal_name          TEXT CHECK (length(legal_name) BETWEEN 1 AND 300),
    country             TEXT CHECK (country ~ '^[A-Z]{2}$'),
    payout_currency     TEXT CHECK (payout_currency ~ '^[A-Z]{3}$'),
    verification        TEXT NOT NULL DEFAULT 'unverified' CHECK (verification IN ('unverified', 'verified', 'suspended')),
    verification_reason TEXT,
    verified_by         UUID,
    updated_at          TIMESTAMPTZ NOT NULL DEFAULT now()
);

ALTER TABLE catalog.machines
    ADD COLUMN cpu_model                   TEXT NOT NULL DEFAULT 'unknown',
    ADD COLUMN disk_type                   TEXT NOT NULL DEFAULT 'nvme' CHECK (disk_type IN ('nvme', 'ssd', 'hdd')),
    ADD COLUMN upload_mbps                 INTEGER NOT NULL DEFAULT 100 CHECK (upload_mbps > 0),
    ADD COLUMN download_mbps               INTEGER NOT NULL DEFAULT 100 CHECK (download_mbps > 0),
    ADD COLUMN region                      TEXT NOT NULL DEFAULT '',
    ADD COLUMN datacenter                  BOOLEAN NOT NULL DEFAULT false,
    ADD COLUMN driver_version              TEXT,
    -- NVML's encoding: major * 1000 + minor * 10 (12.4 → 12040).
    ADD COLUMN cuda_version_code           INTEGER CHECK (cuda_version_code > 0),
    ADD COLUMN min_bid_per_gpu_hour        NUMERIC(24, 9) CHECK (min_bid_per_gpu_hour >= 0),
    ADD COLUMN storage_price_per_gb_month  NUMERIC(24, 9) NOT NULL DEFAULT 0 CHECK (storage_price_per_gb_month >= 0),
    ADD COLUMN bandwidth_up_price_per_tb   NUMERIC(24, 9) NOT NULL DEFAULT 0 CHECK (bandwidth_up_price_per_tb >= 0),
    ADD COLUMN bandwidth_down_price_per_tb NUMERIC(24, 9) NOT NULL DEFAULT 0 CHECK (bandwidth_down_price_per_tb >= 0),
    -- Empty means any count up to the machine's GPUs.
    ADD COLUMN allowed_gpu_counts          INTEGER[] NOT NULL DEFAULT '{}',
    ADD COLUMN list_until                  TIMESTAMPTZ,
    -- Written by the agent's heartbeats and the reliability job.
    ADD COLUMN last_heartbeat_at           TIMESTAMPTZ,
    ADD COLUMN reliability                 NUMERIC(5, 4) CHECK (reliability BETWEEN 0 AND 1),
    ADD COLUMN self_test_passed_at         TIMESTAMPTZ;

-- Search filters and sorts over listed machines.
CREATE INDEX machines_listed_model ON catalog.machines (gpu_model, price_per_gpu_hour) WHERE listed;
CREATE INDEX machines_listed_country ON catalog.machines (country) WHERE listed;
CREATE INDEX machines_listed_reliability ON catalog.machines (reliability DESC NULLS LAST, id) WHERE listed;
CREATE INDEX machines_listed_download ON catalog.machines (download_mbps DESC, id) WHERE listed;
