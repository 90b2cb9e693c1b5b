-- Issue 19: every column that stores one of the wire enums of
-- libs/contracts/src/states.rs takes only that enum's names, so the
-- database refuses what the Rust type could not load (tests/system/states.rs
-- keeps each list equal to its enum). Invoice and statement lines may also
-- say 'unknown': usage posted before postings carried their meter.
-- Added NOT VALID, then validated: the check of existing rows takes no lock
-- that stops writers.
ALTER TABLE ordering.instances ADD CONSTRAINT instances_state_known CHECK (state IN ('pending', 'allocating', 'provisioning', 'running', 'stopping', 'stopped', 'deprovisioning', 'destroyed', 'failed', 'host_lost', 'preempted')) NOT VALID;
ALTER TABLE ordering.instances ADD CONSTRAINT instances_rental_type_known CHECK (rental_type IN ('on_demand', 'interruptible')) NOT VALID;
ALTER TABLE ordering.orders ADD CONSTRAINT orders_state_known CHECK (state IN ('pending', 'allocating', 'provisioning', 'running', 'stopping', 'stopped', 'deprovisioning', 'destroyed', 'failed', 'host_lost', 'preempted')) NOT VALID;
ALTER TABLE ordering.orders ADD CONSTRAINT orders_rental_type_known CHECK (rental_type IN ('on_demand', 'interruptible')) NOT VALID;
ALTER TABLE ordering.instance_transitions ADD CONSTRAINT instance_transitions_states_known CHECK ((from_state IS NULL OR from_state IN ('pending', 'allocating', 'provisioning', 'running', 'stopping', 'stopped', 'deprovisioning', 'destroyed', 'failed', 'host_lost', 'preempted')) AND to_state IN ('pending', 'allocating', 'provisioning', 'running', 'stopping', 'stopped', 'deprovisioning', 'destroyed', 'failed', 'host_lost', 'preempted')) NOT VALID;
ALTER TABLE ordering.instance_events ADD CONSTRAINT instance_events_kind_known CHECK (kind IN ('state_changed', 'provisioning_step', 'rule_warning', 'rule_enforced', 'rules_changed')) NOT VALID;
ALTER TABLE ordering.instance_events ADD CONSTRAINT instance_events_states_known CHECK ((from_state IS NULL OR from_state IN ('pending', 'allocating', 'provisioning', 'running', 'stopping', 'stopped', 'deprovisioning', 'destroyed', 'failed', 'host_lost', 'preempted')) AND (to_state IS NULL OR to_state IN ('pending', 'allocating', 'provisioning', 'running', 'stopping', 'stopped', 'deprovisioning', 'destroyed', 'failed', 'host_lost', 'preempted'))) NOT VALID;
ALTER TABLE metering.intervals ADD CONSTRAINT intervals_meter_known CHECK (meter IN ('bandwidth_down', 'bandwidth_up', 'gpu', 'storage')) NOT VALID;
ALTER TABLE billing.usage_details ADD CONSTRAINT usage_details_meter_known CHECK (meter IN ('bandwidth_down', 'bandwidth_up', 'gpu', 'storage')) NOT VALID;
ALTER TABLE billing.invoice_lines ADD CONSTRAINT invoice_lines_meter_known CHECK (meter IN ('bandwidth_down', 'bandwidth_up', 'gpu', 'storage', 'unknown')) NOT VALID;
ALTER TABLE billing.statement_lines ADD CONSTRAINT statement_lines_meter_known CHECK (meter IN ('bandwidth_down', 'bandwidth_up', 'gpu', 'storage', 'unknown')) NOT VALID;
ALTER TABLE ordering.instances VALIDATE CONSTRAINT instances_state_known;
ALTER TABLE ordering.instances VALIDATE CONSTRAINT instances_rental_type_known;
ALTER TABLE ordering.orders VALIDATE CONSTRAINT orders_state_known;
ALTER TABLE ordering.orders VALIDATE CONSTRAINT orders_rental_type_known;
ALTER TABLE ordering.instance_transitions VALIDATE CONSTRAINT instance_transitions_states_known;
ALTER TABLE ordering.instance_events VALIDATE CONSTRAINT instance_events_kind_known;
ALTER TABLE ordering.instance_events VALIDATE CONSTRAINT instance_events_states_known;
ALTER TABLE metering.intervals VALIDATE CONSTRAINT intervals_meter_known;
ALTER TABLE billing.usage_details VALIDATE CONSTRAINT usage_details_meter_known;
ALTER TABLE billing.invoice_lines VALIDATE CONSTRAINT invoice_lines_meter_known;
ALTER TABLE billing.statement_lines VALIDATE CONSTRAINT statement_lines_meter_known;
