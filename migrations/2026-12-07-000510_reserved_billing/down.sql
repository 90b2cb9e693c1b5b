DROP INDEX billing.transactions_escrow_tenant;
DROP TABLE billing.resale_transfers;
DROP TABLE billing.escrow_postings;
DROP TABLE billing.escrow_holders;
DROP TABLE billing.escrows;
ALTER TABLE billing.statement_lines DROP CONSTRAINT statement_lines_meter_known;
ALTER TABLE billing.statement_lines ADD CONSTRAINT statement_lines_meter_known CHECK (meter IN (
    'bandwidth_down', 'bandwidth_up', 'gpu', 'storage', 'unknown'));
ALTER TABLE billing.invoice_lines DROP CONSTRAINT invoice_lines_meter_known;
ALTER TABLE billing.invoice_lines ADD CONSTRAINT invoice_lines_meter_known CHECK (meter IN (
    'bandwidth_down', 'bandwidth_up', 'gpu', 'storage', 'unknown'));
ALTER TABLE billing.accounts DROP CONSTRAINT accounts_kind_check;
ALTER TABLE billing.accounts ADD CONSTRAINT accounts_kind_check CHECK (kind IN (
    'renter_balance', 'host_earnings', 'platform_fee', 'payment_clearing', 'payouts', 'rounding'));
