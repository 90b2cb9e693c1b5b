-- The offer search sorts by these expressions; indexes on exactly them let a
-- page be read in order instead of sorting every live offer.
CREATE INDEX machines_listed_reliability_key ON catalog.machines ((coalesce(reliability, 0)) DESC, id) WHERE listed;
DROP INDEX catalog.machines_listed_reliability;
