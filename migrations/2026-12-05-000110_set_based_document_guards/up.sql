-- The set-based invoicing and statement runs insert a chunk's lines and
-- items (hundreds of thousands of rows per run) in a few statements. The
-- "only while its document is a draft" rule is checked once per statement
-- over the inserted rows instead of once per row; updates and deletes stay
-- refused row by row.

CREATE FUNCTION billing.guard_invoice_children_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    finalized UUID;
BEGIN
    SELECT n.invoice_id INTO finalized
    FROM new_rows n LEFT JOIN billing.invoices i ON i.id = n.invoice_id
    WHERE i.status IS DISTINCT FROM 'draft'
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'invoice % is finalized and cannot be edited', finalized
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER invoice_lines_guard ON billing.invoice_lines;
DROP TRIGGER invoice_items_guard ON billing.invoice_items;
CREATE TRIGGER invoice_lines_guard BEFORE UPDATE OR DELETE ON billing.invoice_lines
    FOR EACH ROW EXECUTE FUNCTION billing.guard_invoice_child();
CREATE TRIGGER invoice_items_guard BEFORE UPDATE OR DELETE ON billing.invoice_items
    FOR EACH ROW EXECUTE FUNCTION billing.guard_invoice_child();
CREATE TRIGGER invoice_lines_insert_guard AFTER INSERT ON billing.invoice_lines
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION billing.guard_invoice_children_inserted();
CREATE TRIGGER invoice_items_insert_guard AFTER INSERT ON billing.invoice_items
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION billing.guard_invoice_children_inserted();

CREATE FUNCTION billing.guard_statement_children_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    finalized UUID;
BEGIN
    SELECT n.statement_id INTO finalized
    FROM new_rows n LEFT JOIN billing.statements s ON s.id = n.statement_id
    WHERE s.status IS DISTINCT FROM 'draft'
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'statement % is finalized and cannot be edited', finalized
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER statement_lines_guard ON billing.statement_lines;
DROP TRIGGER statement_items_guard ON billing.statement_items;
CREATE TRIGGER statement_lines_guard BEFORE UPDATE OR DELETE ON billing.statement_lines
    FOR EACH ROW EXECUTE FUNCTION billing.guard_statement_child();
CREATE TRIGGER statement_items_guard BEFORE UPDATE OR DELETE ON billing.statement_items
    FOR EACH ROW EXECUTE FUNCTION billing.guard_statement_child();
CREATE TRIGGER statement_lines_insert_guard AFTER INSERT ON billing.statement_lines
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION billing.guard_statement_children_inserted();
CREATE TRIGGER statement_items_insert_guard AFTER INSERT ON billing.statement_items
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION billing.guard_statement_children_inserted();
