ALTER TABLE billing.top_ups DROP COLUMN failure_reason;
