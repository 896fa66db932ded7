-- SQLite indexes each person's terms apart (migrations/sqlite/0033): FTS5 walked a term's postings over everyone
-- to find one person's. Postgres filters by user_id in its own plans (migration 0032's functions). Nothing to do
-- here; kept so that migration numbers and names match across dialects.
SELECT 1;
