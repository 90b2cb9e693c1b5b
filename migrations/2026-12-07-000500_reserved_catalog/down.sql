DROP TABLE catalog.ending_warnings;
DROP TABLE catalog.block_gpu_uses;
DROP INDEX catalog.allocations_in_block;
DROP INDEX catalog.allocations_block_hold;
ALTER TABLE catalog.allocations
    DROP CONSTRAINT allocations_blocks_whole_on_demand,
    DROP CONSTRAINT allocations_block_or_instance,
    DROP COLUMN block_reservation_id,
    DROP COLUMN reservation_id;
DROP TABLE catalog.booked_gpus;
DROP TABLE catalog.bookings;
DROP TABLE catalog.reserved_terms;
-- Nothing else used btree_gist before this migration (ordering's 000520,
-- reverted first, creates it only if missing); without CASCADE a later
-- user makes this fail loudly rather than lose its constraints.
DROP EXTENSION IF EXISTS btree_gist;
