-- SQLite keeps an fts5vocab table to read term document frequencies. Postgres needs none: the store reads the
-- planner's statistics, or before the first ANALYZE counts a term's matches through the GIN index, capped (see
-- memory/pg_terms.py selective_terms). Kept so migration numbers and names match across dialects.
SELECT 1;
