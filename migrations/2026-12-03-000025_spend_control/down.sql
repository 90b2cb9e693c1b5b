DROP TABLE billing.runway_alerts;
DROP TABLE billing.spend_caps;
DROP TABLE billing.monthly_spend;
