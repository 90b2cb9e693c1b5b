DROP INDEX ordering.orders_expired_unreleased;
DROP INDEX ordering.orders_in_saga;
ALTER TABLE ordering.orders DROP COLUMN holdings_released_at, DROP COLUMN expired_at;
