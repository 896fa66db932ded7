-- Indexes Postgres has had since 0001, 0005 and 0007 and SQLite never got (tests/test_schema_parity.py compares
-- the two schemas). Without deliveries_message, every message `hilo forget` deletes scans the deliveries table
-- for the ON DELETE CASCADE, under the single write lock (9 s instead of 0.25 s for a person with 30,000
-- messages and deliveries beside 3,000 other deliveries: bench/forget_bench.py); messages_reply_to serves "is
-- this message answered?", link_codes_identity the retiring of an identity's unused codes.
-- IF NOT EXISTS: a database that an operator already mended by hand upgrades too.
CREATE INDEX IF NOT EXISTS messages_reply_to ON messages(reply_to) WHERE reply_to IS NOT NULL;
CREATE INDEX IF NOT EXISTS deliveries_message ON deliveries(message_id);
CREATE INDEX IF NOT EXISTS link_codes_identity ON link_codes(surface, external_user_id) WHERE used_at IS NULL;
