CREATE INDEX transactions_usage_instance ON billing.transactions (instance_id)
    WHERE kind = 'usage';

DROP TRIGGER usage_details_tenant ON billing.usage_details;
CREATE TRIGGER usage_details_tenant BEFORE INSERT ON billing.usage_details
    FOR EACH ROW EXECUTE FUNCTION billing.usage_details_tenant();

DROP TRIGGER usage_details_no_truncate ON billing.usage_details;
DROP TRIGGER transactions_no_truncate ON billing.transactions;
DROP TRIGGER entries_no_truncate ON billing.entries;

DROP TRIGGER entries_balanced ON billing.entries;
DROP FUNCTION billing.check_balanced_statement();
CREATE FUNCTION billing.check_balanced() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    total NUMERIC;
BEGIN
    SELECT COALESCE(sum(amount), 0) INTO total FROM billing.entries WHERE transaction_id = NEW.transaction_id;
    IF total <> 0 THEN
        RAISE EXCEPTION 'ledger transaction % does not balance (sum %)', NEW.transaction_id, total
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER entries_balanced
    AFTER INSERT ON billing.entries
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION billing.check_balanced();
