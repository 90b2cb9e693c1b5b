-- A top-up whose PaymentIntent could not be created ends `failed` with the
-- reason the caller was given, instead of staying `creating` as if Stripe
-- were still being asked. A retry with the same idempotency key clears it.
ALTER TABLE billing.top_ups ADD COLUMN failure_reason TEXT;
