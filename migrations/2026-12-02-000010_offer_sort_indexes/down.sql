CREATE INDEX machines_listed_reliability ON catalog.machines (reliability DESC NULLS LAST, id) WHERE listed;
DROP INDEX catalog.machines_listed_reliability_key;
