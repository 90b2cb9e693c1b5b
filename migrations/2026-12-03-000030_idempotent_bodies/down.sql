DROP TABLE billing.credit_grants;
DROP TABLE catalog.machine_registrations;
