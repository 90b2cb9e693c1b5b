-- Usage ingest (issue 17): a batch of 500 usage events writes about 1,500
-- legs in one statement. The double-entry check moves from a deferred
-- trigger per leg (which summed the leg's whole posting again, so once per
-- leg at commit) to one trigger per INSERT statement over the rows it
-- inserted: every posting that statement gave legs to must have legs summing
-- to zero within the statement. The guarantee is kept, and made stricter:
-- a posting balances as a whole because each statement's share of it
-- balances, so a posting's legs are written by one statement (`ledger::post`
-- and every set-based writer do).
CREATE FUNCTION billing.check_balanced_statement() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    unbalanced TEXT;
    total NUMERIC;
BEGIN
    SELECT n.transaction_id, sum(n.amount) INTO unbalanced, total
    FROM new_entries n
    GROUP BY n.transaction_id
    HAVING sum(n.amount) <> 0
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ledger transaction % does not balance (sum %)', unbalanced, total
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER entries_balanced ON billing.entries;
DROP FUNCTION billing.check_balanced();
CREATE TRIGGER entries_balanced AFTER INSERT ON billing.entries
    REFERENCING NEW TABLE AS new_entries
    FOR EACH STATEMENT EXECUTE FUNCTION billing.check_balanced_statement();

-- Append-only means TRUNCATE too: the row triggers above never see it.
CREATE TRIGGER entries_no_truncate BEFORE TRUNCATE ON billing.entries
    FOR EACH STATEMENT EXECUTE FUNCTION billing.forbid_change();
CREATE TRIGGER transactions_no_truncate BEFORE TRUNCATE ON billing.transactions
    FOR EACH STATEMENT EXECUTE FUNCTION billing.forbid_change();
CREATE TRIGGER usage_details_no_truncate BEFORE TRUNCATE ON billing.usage_details
    FOR EACH STATEMENT EXECUTE FUNCTION billing.forbid_change();

-- The writer (ingest) now sends each detail's tenant: the lookup runs only
-- for a writer that does not.
DROP TRIGGER usage_details_tenant ON billing.usage_details;
CREATE TRIGGER usage_details_tenant BEFORE INSERT ON billing.usage_details
    FOR EACH ROW WHEN (NEW.tenant_id IS NULL)
    EXECUTE FUNCTION billing.usage_details_tenant();

-- `transactions_instance_usage (instance_id, created_at) WHERE kind =
-- 'usage'` (migration 000023) already answers every lookup by instance:
-- this one only cost a write per usage posting.
DROP INDEX billing.transactions_usage_instance;
