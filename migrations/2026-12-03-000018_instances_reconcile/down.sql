DROP INDEX ordering.instances_updated;
DROP INDEX ordering.instances_live;
