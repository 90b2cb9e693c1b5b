-- Fractional GPUs (issue 21, docs/mig.md): MIG profiles as data, per-GPU
-- modes chosen by the host, and GPUs held by index, one row per memory slice,
-- so the database itself rejects two holders on one slice of one GPU.

-- NVIDIA's GPU instance profiles per model (MIG user guide, "Supported MIG
-- profiles"; `nvidia-smi mig -lgipp`): compute and memory slices, memory,
-- valid start memory slices, and the NVML profile constant
-- (NVML_GPU_INSTANCE_PROFILE_1_SLICE = 0, 2_SLICE = 1, 3_SLICE = 2,
-- 4_SLICE = 3, 7_SLICE = 4, 1_SLICE_REV2 = 9).
CREATE TABLE catalog.mig_profiles (
    gpu_model      TEXT NOT NULL REFERENCES catalog.gpu_models (name),
    name           TEXT NOT NULL CHECK (name ~ '^[1-7]g\.[0-9]+gb$'),
    compute_slices SMALLINT NOT NULL CHECK (compute_slices BETWEEN 1 AND 7),
    memory_slices  SMALLINT NOT NULL CHECK (memory_slices IN (1, 2, 4, 8)),
    memory_gib     INTEGER NOT NULL CHECK (memory_gib > 0),
    placements     SMALLINT[] NOT NULL CHECK (cardinality(placements) > 0),
    nvml_profile   INTEGER NOT NULL CHECK (nvml_profile >= 0),
    PRIMARY KEY (gpu_model, name)
);

INSERT INTO catalog.mig_profiles (gpu_model, name, compute_slices, memory_slices, memory_gib, placements, nvml_profile)
SELECT m.model, p.name, p.c, p.m, p.gib, p.starts, p.nvml
FROM (VALUES ('A100 80GB SXM'), ('A100 80GB PCIe'), ('H100 80GB SXM'), ('H100 80GB PCIe')) AS m (model),
     (VALUES ('1g.10gb', 1, 1, 10, '{0,1,2,3,4,5,6}'::smallint[], 0),
             ('1g.20gb', 1, 2, 20, '{0,2,4,6}'::smallint[], 9),
             ('2g.20gb', 2, 2, 20, '{0,2,4}'::smallint[], 1),
             ('3g.40gb', 3, 4, 40, '{0,4}'::smallint[], 2),
             ('4g.40gb', 4, 4, 40, '{0}'::smallint[], 3),
             ('7g.80gb', 7, 8, 80, '{0}'::smallint[], 4)) AS p (name, c, m, gib, starts, nvml);
INSERT INTO catalog.mig_profiles (gpu_model, name, compute_slices, memory_slices, memory_gib, placements, nvml_profile) VALUES
    ('A100 40GB PCIe', '1g.5gb',  1, 1, 5,  '{0,1,2,3,4,5,6}', 0),
    ('A100 40GB PCIe', '1g.10gb', 1, 2, 10, '{0,2,4,6}', 9),
    ('A100 40GB PCIe', '2g.10gb', 2, 2, 10, '{0,2,4}', 1),
    ('A100 40GB PCIe', '3g.20gb', 3, 4, 20, '{0,4}', 2),
    ('A100 40GB PCIe', '4g.20gb', 4, 4, 20, '{0}', 3),
    ('A100 40GB PCIe', '7g.40gb', 7, 8, 40, '{0}', 4),
    ('H200 141GB SXM', '1g.18gb', 1, 1, 18, '{0,1,2,3,4,5,6}', 0),
    ('H200 141GB SXM', '1g.35gb', 1, 2, 35, '{0,2,4,6}', 9),
    ('H200 141GB SXM', '2g.35gb', 2, 2, 35, '{0,2,4}', 1),
    ('H200 141GB SXM', '3g.71gb', 3, 4, 71, '{0,4}', 2),
    ('H200 141GB SXM', '4g.71gb', 4, 4, 71, '{0}', 3),
    ('H200 141GB SXM', '7g.141gb', 7, 8, 141, '{0}', 4);

-- A GPU the host runs in MIG mode; a GPU without a row is rented whole.
-- `layout` is the fixed layout (mig_fixed): [{profile, start}].
CREATE TABLE catalog.mig_gpus (
    machine_id UUID NOT NULL REFERENCES catalog.machines (id),
    gpu_index  SMALLINT NOT NULL CHECK (gpu_index >= 0),
    mode       TEXT NOT NULL CHECK (mode IN ('mig_auto', 'mig_fixed')),
    layout     JSONB NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(layout) = 'array'),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (machine_id, gpu_index),
    CHECK ((mode = 'mig_fixed') = (layout <> '[]'))
);

-- A host's price per slice-hour of a profile on a machine.
CREATE TABLE catalog.mig_prices (
    machine_id     UUID NOT NULL REFERENCES catalog.machines (id),
    profile        TEXT NOT NULL,
    price_per_hour NUMERIC(24, 9) NOT NULL CHECK (price_per_hour >= 0),
    PRIMARY KEY (machine_id, profile)
);

-- What each machine's MIG GPUs can still take, per profile, and at what
-- price: rewritten under the machine's row lock by every change of its
-- holds, modes or prices, so offer search filters, counts ("why no offers")
-- and shows slices in SQL.
CREATE TABLE catalog.mig_free (
    machine_id     UUID NOT NULL REFERENCES catalog.machines (id),
    profile        TEXT NOT NULL,
    memory_gib     INTEGER NOT NULL,
    compute_slices SMALLINT NOT NULL,
    memory_slices  SMALLINT NOT NULL,
    free           INTEGER NOT NULL CHECK (free >= 0),
    price_per_hour NUMERIC(24, 9) NOT NULL,
    PRIMARY KEY (machine_id, profile)
);

-- GPUs in MIG mode are not rented whole: the whole-GPU counter's bound.
ALTER TABLE catalog.machines
    ADD COLUMN mig_gpus INTEGER NOT NULL DEFAULT 0 CHECK (mig_gpus >= 0),
    ADD CONSTRAINT machines_whole_and_mig_within_count
        CHECK (gpus_allocated + mig_gpus <= gpu_count);

-- The search's free-GPU expression now leaves out MIG GPUs; its statistics
-- follow it (migration 2026-12-05-000130 says why they exist).
DROP STATISTICS catalog.machines_gpus_free;
CREATE STATISTICS catalog.machines_gpus_free ON (gpu_count - gpus_allocated - mig_gpus) FROM catalog.machines;

-- What an allocation holds: whole GPUs by index, or one slice.
ALTER TABLE catalog.allocations
    ADD COLUMN gpu_indices SMALLINT[] NOT NULL DEFAULT '{}',
    ADD COLUMN mig_profile TEXT,
    ADD COLUMN mig_gpu_index SMALLINT,
    ADD COLUMN mig_start SMALLINT,
    ADD COLUMN mig_size SMALLINT,
    ADD CONSTRAINT allocations_slice_complete CHECK (
        (mig_profile IS NULL) = (mig_gpu_index IS NULL)
        AND (mig_profile IS NULL) = (mig_start IS NULL)
        AND (mig_profile IS NULL) = (mig_size IS NULL)),
    ADD CONSTRAINT allocations_slice_on_demand CHECK (
        mig_profile IS NULL OR (rental_type = 'on_demand' AND gpu_count = 1));

-- One row per held memory slice of a GPU: a whole GPU holds all eight, a
-- slice its own. The primary key is the no-overlap rule.
CREATE TABLE catalog.gpu_holds (
    machine_id   UUID NOT NULL REFERENCES catalog.machines (id),
    gpu_index    SMALLINT NOT NULL CHECK (gpu_index >= 0),
    memory_slice SMALLINT NOT NULL CHECK (memory_slice BETWEEN 0 AND 7),
    holder       UUID NOT NULL REFERENCES catalog.allocations (order_id),
    PRIMARY KEY (machine_id, gpu_index, memory_slice)
);
CREATE INDEX gpu_holds_holder ON catalog.gpu_holds (holder);

-- Live whole allocations get indices in the order they were made.
WITH live AS (
    SELECT order_id, gpu_count,
           sum(gpu_count) OVER (PARTITION BY machine_id ORDER BY created_at, order_id) - gpu_count AS first
    FROM catalog.allocations
    WHERE released_at IS NULL
)
UPDATE catalog.allocations a
SET gpu_indices = ARRAY(SELECT generate_series(l.first, l.first + l.gpu_count - 1))::smallint[]
FROM live l
WHERE a.order_id = l.order_id;
INSERT INTO catalog.gpu_holds (machine_id, gpu_index, memory_slice, holder)
SELECT a.machine_id, i, s, a.order_id
FROM catalog.allocations a, unnest(a.gpu_indices) AS i, generate_series(0, 7) AS s
WHERE a.released_at IS NULL;

-- The instance knows what it holds, so every later provisioning attempt
-- (start, re-placement) sends the same GPUs or slice.
ALTER TABLE ordering.instances
    ADD COLUMN gpu_indices INTEGER[] NOT NULL DEFAULT '{}',
    ADD COLUMN mig_profile TEXT,
    ADD COLUMN mig_slice JSONB;
ALTER TABLE ordering.orders
    ADD COLUMN mig_profile TEXT,
    -- The quota share of the quoted slice (NULL: whole GPUs).
    ADD COLUMN gpu_eighths INTEGER CHECK (gpu_eighths > 0),
    -- A slice order's instance id, chosen when the order is recorded, so
    -- its allocation names the instance (the host portal shows who holds
    -- each slice). Slices are never preempted, so nothing looks the
    -- instance up before it exists.
    ADD COLUMN planned_instance_id UUID;

-- Quota counts GPU-equivalents in eighths of a GPU.
ALTER TABLE quota.reservations
    ADD COLUMN gpu_eighths INTEGER CHECK (gpu_eighths > 0);
UPDATE quota.reservations SET gpu_eighths = gpu_count * 8;
ALTER TABLE quota.reservations ALTER COLUMN gpu_eighths SET NOT NULL;
-- A quota process of the previous release (during a rolling deploy) inserts
-- without it: whole GPUs then.
CREATE FUNCTION quota.default_gpu_eighths() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.gpu_eighths := coalesce(NEW.gpu_eighths, NEW.gpu_count * 8);
    RETURN NEW;
END
$$;
CREATE TRIGGER reservations_gpu_eighths BEFORE INSERT ON quota.reservations
    FOR EACH ROW EXECUTE FUNCTION quota.default_gpu_eighths();
