-- SQLite drops its episodes' FTS5 index (migrations/sqlite/0044): recall finds episodes through the messages' index.
-- Postgres keeps episodes.search (a generated tsvector under a GIN index, no rewrite of another index's rows):
-- nothing to do here; kept so that migration numbers and names match across dialects.
SELECT 1;
