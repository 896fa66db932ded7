-- Row-level security on every table hilo creates, fit for Supabase, whose Data API (PostgREST) serves the public
-- schema to anyone holding the project's anon key (public by design), and for any other Postgres.
--
-- Who sees what:
-- * The daemon. It connects as the role that ran these migrations (`postgres` on Supabase, your own role
--   elsewhere), so it owns every table, and a table's owner is not subject to its row-level security unless
--   FORCE ROW LEVEL SECURITY is set. It is NOT set, on purpose: FORCE would make a plain owner without BYPASSRLS
--   (an operator's own Postgres; tests/test_rls.py's owner) read no row and write none, and pg_stats would hide
--   the term statistics recall reads (memory/pg_terms.py STATS_SQL). FORCE only guards against the owner's own
--   queries, and those are the daemon's. Superusers, and Supabase's service_role (BYPASSRLS), bypass RLS anyway.
-- * anon and authenticated: no policy, so they read no row of these tables and write none (an INSERT is refused,
--   an UPDATE or DELETE touches nothing). "Their own rows" has no safe meaning here: hilo's people are not Supabase
--   Auth users (a site login is the identity (web, "site:<sub>"), linked by hilo itself, and linking can move it to
--   another user), so nothing maps auth.uid() to a hilo user. An operator who wants such access adds a policy in a
--   migration of their own; nothing here grants any.
-- * What RLS does not gate is revoked from anon and authenticated where those roles exist (Supabase grants ALL on
--   new public tables and sequences to them by default): TRUNCATE (it ignores RLS), REFERENCES and TRIGGER on the
--   tables, and everything on their identity sequences (setval would make the daemon's inserts collide). SELECT,
--   INSERT, UPDATE and DELETE stay granted, and RLS answers them. service_role keeps its grants.
--
-- Plain SQL with one DO block, no psql commands: it runs under `hilo migrate`, in Supabase's SQL editor, and on a
-- Postgres without Supabase's roles (the REVOKEs are skipped there). Running it again changes nothing.
-- A table added later enables RLS and makes the same REVOKEs in its own migration: tests/test_rls.py checks every
-- table of the schema.
DO $$
DECLARE
    hilo_tables text[] := ARRAY['schema_migrations', 'users', 'identities', 'conversations', 'messages',
                                'model_calls', 'facts', 'deliveries', 'link_codes', 'link_failures',
                                'identity_audit'];
    t text;
    grantee text;
    seq regclass;
BEGIN
    FOREACH t IN ARRAY hilo_tables LOOP
        CONTINUE WHEN to_regclass(t) IS NULL;  -- dropped since (facts: 0016_memories), when run again by hand
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
    END LOOP;
    FOREACH grantee IN ARRAY ARRAY['anon', 'authenticated'] LOOP
        CONTINUE WHEN NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = grantee);
        FOREACH t IN ARRAY hilo_tables LOOP
            CONTINUE WHEN to_regclass(t) IS NULL;
            EXECUTE format('REVOKE TRUNCATE, REFERENCES, TRIGGER ON TABLE %I FROM %I', t, grantee);
            FOR seq IN
                SELECT d.objid::regclass FROM pg_depend d JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S'
                WHERE d.classid = 'pg_class'::regclass AND d.refobjid = t::regclass AND d.deptype IN ('a', 'i')
            LOOP
                EXECUTE format('REVOKE ALL ON SEQUENCE %s FROM %I', seq, grantee);
            END LOOP;
        END LOOP;
    END LOOP;
END
$$;
