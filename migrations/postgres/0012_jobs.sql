-- Background jobs (bot/jobs.py schedules them, memory/jobs.py claims them): one row per job, named after it.
-- A run is claimed with a lease, so that ONE process of many runs it: SELECT ... FOR UPDATE SKIP LOCKED on the
-- row, then `owner` (the run that holds it) and `expires_at` (when it lapses unless renewed) are set, in one
-- READ COMMITTED transaction; nothing lives in a server session, so it holds behind a transaction pooler. A
-- process that died leaves a lease that is taken over once expired. `due_at` is when the job is next due (NULL:
-- only on demand); `requested_at`, an on-demand request that came while it ran (it runs again right after).
-- The last run: when it started and finished, its outcome (ok, failed, cancelled, lost), the type of its error
-- (never its text), how long it took, and how many runs so far.
CREATE TABLE jobs (
    name text NOT NULL PRIMARY KEY,
    owner text,
    expires_at timestamptz,
    due_at timestamptz,
    requested_at timestamptz,
    started_at timestamptz,
    finished_at timestamptz,
    outcome text,
    error text,
    duration_ms bigint,
    runs bigint NOT NULL DEFAULT 0
);
-- Row-level security on every table, as migrations/postgres/0011_rls.sql explains: the daemon owns the table (not
-- FORCEd); anon and authenticated (Supabase) read no row and write none, since no policy grants them one; what RLS
-- does not gate (TRUNCATE, REFERENCES, TRIGGER) is revoked from them where those roles exist. No sequence here.
ALTER TABLE jobs ENABLE ROW LEVEL SECURITY;
DO $$
DECLARE
    grantee text;
BEGIN
    FOREACH grantee IN ARRAY ARRAY['anon', 'authenticated'] LOOP
        CONTINUE WHEN NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = grantee);
        EXECUTE format('REVOKE TRUNCATE, REFERENCES, TRIGGER ON TABLE jobs FROM %I', grantee);
    END LOOP;
END
$$;
