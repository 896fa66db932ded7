-- SQLite writes its messages' FTS5 index behind the turns, in batches (migrations/sqlite/0046,
-- memory/sqlite_fts.py). Postgres indexes the generated `search` column with its GIN index, whose pending list
-- already batches the inserts: nothing to do here; kept so that migration numbers and names match across dialects.
SELECT 1;
