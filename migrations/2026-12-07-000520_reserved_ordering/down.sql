ALTER TABLE ordering.instances DROP COLUMN reservation_id;
ALTER TABLE ordering.orders DROP COLUMN reservation_id;
DROP TABLE ordering.resale_listings;
DROP TABLE ordering.reservations;
