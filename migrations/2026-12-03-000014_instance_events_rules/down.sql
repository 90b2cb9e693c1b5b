DROP TABLE catalog.gpu_utilisation;
DROP TABLE ordering.instance_rules;
DROP TABLE ordering.instance_events;
