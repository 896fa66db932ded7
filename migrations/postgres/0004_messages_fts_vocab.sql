-- SQLite keeps an fts5vocab table to read term document frequencies. Postgres needs none: the store counts a
-- term's matches through the GIN index, capped (see memory/pg_db.py selective_terms). Kept so migration
-- numbers and names match across dialects.
SELECT 1;
