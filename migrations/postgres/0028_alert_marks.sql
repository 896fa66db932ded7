-- Alerts (issue 13 item 4; bot/alerts.py): when each kind of alert was last sent, so that every process on one
-- database keeps to one alert per kind per HILO_ALERT_MIN_INTERVAL. Taking a kind's turn is one upsert that
-- returns the row only when the last one is older than the interval. No person's data: kinds and times only.
CREATE TABLE alert_marks (
    kind text NOT NULL PRIMARY KEY,
    sent_at timestamptz NOT NULL
);
-- Row-level security on every table, as migrations/postgres/0011_rls.sql explains. No sequence here.
ALTER TABLE alert_marks ENABLE ROW LEVEL SECURITY;
DO $$
DECLARE
    grantee text;
BEGIN
    FOREACH grantee IN ARRAY ARRAY['anon', 'authenticated'] LOOP
        CONTINUE WHEN NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = grantee);
        EXECUTE format('REVOKE TRUNCATE, REFERENCES, TRIGGER ON TABLE alert_marks FROM %I', grantee);
    END LOOP;
END
$$;
