-- Cost control (issue 13 item 3; bot/prices.py, bot/spend.py, memory/sql_spend.py). Each model call keeps its
-- cost in USD, computed from the price table (HILO_PRICES over the shipped defaults); failed and skipped calls
-- cost 0, rows from before this migration 0.
ALTER TABLE model_calls ADD COLUMN cost_usd double precision NOT NULL DEFAULT 0;
-- What was spent (and is reserved by calls in flight) per window: `scope` 'day' or 'month', `window_start` the
-- window's first day (UTC, 'YYYY-MM-DD'), `user_id` the person (NULL: everyone, the global caps). A call
-- reserves its worst case in every window that has a cap, in one transaction, only if each stays within its
-- cap (memory/sql_spend.py), and settles it to its real cost when it ends: caps hold across processes.
CREATE TABLE spend_counters (
    scope text NOT NULL CHECK (scope IN ('day', 'month')),
    user_id bigint REFERENCES users(id) ON DELETE CASCADE,
    window_start text NOT NULL,
    spent_usd double precision NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL
);
CREATE UNIQUE INDEX spend_counters_person ON spend_counters(scope, user_id, window_start) WHERE user_id IS NOT NULL;
CREATE UNIQUE INDEX spend_counters_global ON spend_counters(scope, window_start) WHERE user_id IS NULL;
-- Row-level security on every table, as migrations/postgres/0011_rls.sql explains. No sequence here.
ALTER TABLE spend_counters ENABLE ROW LEVEL SECURITY;
DO $$
DECLARE
    grantee text;
BEGIN
    FOREACH grantee IN ARRAY ARRAY['anon', 'authenticated'] LOOP
        CONTINUE WHEN NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = grantee);
        EXECUTE format('REVOKE TRUNCATE, REFERENCES, TRIGGER ON TABLE spend_counters FROM %I', grantee);
    END LOOP;
END
$$;
