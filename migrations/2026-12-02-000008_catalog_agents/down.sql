DROP INDEX catalog.machines_listed_heartbeat;
DROP TABLE catalog.agent_reports;
DROP TABLE catalog.heartbeat_gaps;
DROP TRIGGER machines_listing_period ON catalog.machines;
DROP FUNCTION catalog.record_listing_period();
DROP TABLE catalog.listing_periods;
