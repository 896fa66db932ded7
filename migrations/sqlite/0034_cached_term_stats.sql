-- Postgres' recall is handed its term statistics by the caller (migrations/postgres/0034); SQLite's are read
-- and cached in Python already (memory/sqlite_terms.py). Nothing to do here; kept so that migration numbers
-- and names match across dialects.
SELECT 1;
