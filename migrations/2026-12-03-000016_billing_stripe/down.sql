DROP TABLE billing.stripe_events;
DROP TABLE billing.top_ups;
DROP TABLE billing.stripe_customers;
