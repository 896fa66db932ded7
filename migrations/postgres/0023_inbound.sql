-- Every inbound delivery that is not a turn (a turn's message is deduplicated by messages' UNIQUE (surface,
-- external_id)): commands, refusals (too long, empty, not allowed, media the bot cannot read) and STOP / START,
-- recorded BEFORE the platform is acknowledged and before the command runs, so that a redelivery, in the same
-- process or after a restart, is never answered twice nor re-runs a command (memory/sql_inbound.py). `kind` says
-- what it was (command, refused, opt); rows older than HILO_INBOUND_RETENTION_DAYS are purged by the cleanup job.
CREATE TABLE inbound (
    surface text NOT NULL,
    external_id text NOT NULL,
    kind text NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (surface, external_id)
);
CREATE INDEX inbound_created ON inbound(created_at);
-- Row-level security on every table, as migrations/postgres/0011_rls.sql explains: the daemon owns the table (not
-- FORCEd); anon and authenticated (Supabase) read no row and write none; TRUNCATE, REFERENCES and TRIGGER are
-- revoked from them where those roles exist. No sequence here.
ALTER TABLE inbound ENABLE ROW LEVEL SECURITY;
DO $$
DECLARE
    grantee text;
BEGIN
    FOREACH grantee IN ARRAY ARRAY['anon', 'authenticated'] LOOP
        CONTINUE WHEN NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = grantee);
        EXECUTE format('REVOKE TRUNCATE, REFERENCES, TRIGGER ON TABLE inbound FROM %I', grantee);
    END LOOP;
END
$$;
