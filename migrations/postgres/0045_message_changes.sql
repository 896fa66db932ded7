-- SQLite counts the changes and deletions of messages for its conversation windows (migrations/sqlite/0045,
-- memory/windows.py). Postgres keeps no windows (pg_context.py reads the window in its one statement): nothing to
-- do here; kept so that migration numbers and names match across dialects.
SELECT 1;
