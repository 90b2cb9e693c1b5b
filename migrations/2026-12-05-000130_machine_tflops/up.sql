-- Issue 17: the price-per-TFLOP sort read from an index. The ratio needs the
-- model's TFLOPS, which lived only in catalog.gpu_models, so every live offer
-- was joined and sorted. The machine now carries a copy of its model's FP16
-- TFLOPS, kept equal to the catalog's by the two triggers below (no code path
-- writes it), and expression indexes on exactly the sort keys the offer
-- search orders by let a page be read in order and stop at its end.

ALTER TABLE catalog.machines ADD COLUMN fp16_tflops NUMERIC(8, 1);
UPDATE catalog.machines m SET fp16_tflops = g.fp16_tflops
FROM catalog.gpu_models g WHERE g.name = m.gpu_model;
-- Every machine's model is in the catalog (machines_gpu_model_fk).
ALTER TABLE catalog.machines ALTER COLUMN fp16_tflops SET NOT NULL;

-- A machine's copy follows its model: set on insert and whenever the model
-- (or the copy itself, so a stray write cannot make it disagree) is written.
-- NOT NULL is checked after BEFORE triggers, so inserts need not name it.
CREATE FUNCTION catalog.machine_model_tflops() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    SELECT g.fp16_tflops INTO NEW.fp16_tflops
    FROM catalog.gpu_models g WHERE g.name = NEW.gpu_model;
    RETURN NEW;
END
$$;

CREATE TRIGGER machines_model_tflops
    BEFORE INSERT OR UPDATE OF gpu_model, fp16_tflops ON catalog.machines
    FOR EACH ROW EXECUTE FUNCTION catalog.machine_model_tflops();

-- A model's TFLOPS corrected in the catalog reaches every machine of it.
CREATE FUNCTION catalog.model_tflops_to_machines() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE catalog.machines SET fp16_tflops = NEW.fp16_tflops
    WHERE gpu_model = NEW.name AND fp16_tflops IS DISTINCT FROM NEW.fp16_tflops;
    RETURN NULL;
END
$$;

CREATE TRIGGER gpu_models_tflops_to_machines
    AFTER UPDATE OF fp16_tflops ON catalog.gpu_models
    FOR EACH ROW WHEN (OLD.fp16_tflops IS DISTINCT FROM NEW.fp16_tflops)
    EXECUTE FUNCTION catalog.model_tflops_to_machines();

-- The offer search's price-per-TFLOP keys, on-demand and interruptible
-- (the minimum bid), spelled exactly as services/catalog/src/offers.rs
-- orders by them.
CREATE INDEX machines_listed_price_per_tflop
    ON catalog.machines ((round(price_per_gpu_hour / fp16_tflops, 9)), id) WHERE listed;
CREATE INDEX machines_listed_bid_per_tflop
    ON catalog.machines ((round(min_bid_per_gpu_hour / fp16_tflops, 9)), id) WHERE listed;
-- And the interruptible search's price sort, by the minimum bid.
CREATE INDEX machines_listed_bid ON catalog.machines (min_bid_per_gpu_hour, id) WHERE listed;

-- Statistics on the search's filter expressions. Without them the planner
-- guesses (1% for the allowed-counts test that nearly every machine passes),
-- believes a few rows survive the filters and sorts them all rather than
-- walking a sort key's index to the page's end.
CREATE STATISTICS catalog.machines_allowed_counts ON (cardinality(allowed_gpu_counts)) FROM catalog.machines;
CREATE STATISTICS catalog.machines_gpus_free ON (gpu_count - gpus_allocated) FROM catalog.machines;
CREATE STATISTICS catalog.machines_cuda_code ON (coalesce(cuda_version_code, 0)) FROM catalog.machines;
