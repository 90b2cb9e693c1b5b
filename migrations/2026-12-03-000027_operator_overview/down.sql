DROP INDEX billing.usage_details_started;
