DROP TABLE webhooks.resource_sequences;
DROP TABLE catalog.resource_sequences;
DROP TABLE billing.resource_sequences;
