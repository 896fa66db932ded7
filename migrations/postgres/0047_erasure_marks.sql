-- The record of erasures kept outside the database (bot/erasures.py, HILO_DATA_DIR/erasures.jsonl): how far each
-- record (named by a digest of its first line) has been applied to this database. A start walks everyone only
-- when its record holds an erasure newer than `through`: after a restore (the mark comes back as old as the
-- backup) or after new erasures; otherwise it skips the walk (1,000,000 people: ~4.7 s on SQLite).
CREATE TABLE erasure_marks (
    record text NOT NULL PRIMARY KEY,
    through timestamptz NOT NULL
);
-- Row-level security on every table, as migrations/postgres/0011_rls.sql explains.
ALTER TABLE erasure_marks ENABLE ROW LEVEL SECURITY;
DO $$
DECLARE
    grantee text;
BEGIN
    FOREACH grantee IN ARRAY ARRAY['anon', 'authenticated'] LOOP
        CONTINUE WHEN NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = grantee);
        EXECUTE format('REVOKE TRUNCATE, REFERENCES, TRIGGER ON TABLE erasure_marks FROM %I', grantee);
    END LOOP;
END
$$;
