-- Fixed-window counters kept in the database, so that every process on one database counts the same hits
-- (memory/sql_limits.py): the web's rate limits per IP and per visitor (surfaces/web_guard.py), and the readiness
-- probe's write (bot/health.py, key 'probe'). One row per key: `window_start` (epoch seconds, a multiple of the
-- window), the `hits` counted in it and `prev_hits`, those of the window before it (a sliding-window estimate:
-- the previous window's hits weighted by how much of it the last window_s seconds still cover, plus this
-- window's). A hit in a newer window starts it again at 1. Rows of windows long past are deleted by the cleanup
-- job.
CREATE TABLE rate_counters (
    key text NOT NULL PRIMARY KEY,
    window_start bigint NOT NULL,
    hits bigint NOT NULL,
    prev_hits bigint NOT NULL DEFAULT 0
);
CREATE INDEX rate_counters_window ON rate_counters(window_start);
-- Row-level security on every table, as migrations/postgres/0011_rls.sql explains. No sequence here.
ALTER TABLE rate_counters ENABLE ROW LEVEL SECURITY;
DO $$
DECLARE
    grantee text;
BEGIN
    FOREACH grantee IN ARRAY ARRAY['anon', 'authenticated'] LOOP
        CONTINUE WHEN NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = grantee);
        EXECUTE format('REVOKE TRUNCATE, REFERENCES, TRIGGER ON TABLE rate_counters FROM %I', grantee);
    END LOOP;
END
$$;
