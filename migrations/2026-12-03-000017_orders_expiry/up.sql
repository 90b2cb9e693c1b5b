-- An order whose createOrder request died mid-saga (pending or allocating,
-- no instance) holds quota and maybe GPUs that nobody will use. Past a
-- deadline the expiry task fails it (expired_at) and then gives its holdings
-- back (holdings_released_at); the two steps are separate so a crash between
-- them is finished by the next pass.
ALTER TABLE ordering.orders
    ADD COLUMN expired_at timestamptz,
    ADD COLUMN holdings_released_at timestamptz;

CREATE INDEX orders_in_saga ON ordering.orders (updated_at)
    WHERE state IN ('pending', 'allocating');
CREATE INDEX orders_expired_unreleased ON ordering.orders (expired_at)
    WHERE expired_at IS NOT NULL AND holdings_released_at IS NULL;
