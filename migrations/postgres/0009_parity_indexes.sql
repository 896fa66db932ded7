-- SQLite gets here the indexes Postgres already has (messages_reply_to, deliveries_message and
-- link_codes_identity: migrations/postgres/0001, 0005, 0007). Postgres needs nothing; kept so that migration
-- numbers and names match across dialects.
SELECT 1;
