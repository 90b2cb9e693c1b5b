DROP TRIGGER statement_lines_insert_guard ON billing.statement_lines;
DROP TRIGGER statement_items_insert_guard ON billing.statement_items;
DROP TRIGGER statement_lines_guard ON billing.statement_lines;
DROP TRIGGER statement_items_guard ON billing.statement_items;
CREATE TRIGGER statement_lines_guard BEFORE INSERT OR UPDATE OR DELETE ON billing.statement_lines
    FOR EACH ROW EXECUTE FUNCTION billing.guard_statement_child();
CREATE TRIGGER statement_items_guard BEFORE INSERT OR UPDATE OR DELETE ON billing.statement_items
    FOR EACH ROW EXECUTE FUNCTION billing.guard_statement_child();
DROP FUNCTION billing.guard_statement_children_inserted();

DROP TRIGGER invoice_lines_insert_guard ON billing.invoice_lines;
DROP TRIGGER invoice_items_insert_guard ON billing.invoice_items;
DROP TRIGGER invoice_lines_guard ON billing.invoice_lines;
DROP TRIGGER invoice_items_guard ON billing.invoice_items;
CREATE TRIGGER invoice_lines_guard BEFORE INSERT OR UPDATE OR DELETE ON billing.invoice_lines
    FOR EACH ROW EXECUTE FUNCTION billing.guard_invoice_child();
CREATE TRIGGER invoice_items_guard BEFORE INSERT OR UPDATE OR DELETE ON billing.invoice_items
    FOR EACH ROW EXECUTE FUNCTION billing.guard_invoice_child();
DROP FUNCTION billing.guard_invoice_children_inserted();
