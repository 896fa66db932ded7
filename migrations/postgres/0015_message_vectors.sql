-- One vector per message, of the embedder that made it (bot/embedders: `name`, `dim`): memory/vectors.py. A
-- changed embedder (another name) makes no row comparable: the rows of the old name are re-embedded by the
-- backfill (`hilo embed`) and the embed job, and replaced. `user_id` is the message's owner (kept in step when
-- people are linked: memory/sql_linking.py), so that search reads one person's rows and nobody else's.
--
-- Postgres: `vector` is a pgvector `halfvec` (float16, as SQLite's blob) when the `vector` extension can be
-- created here; the HNSW index over it is made by the store for each (embedder, dim) it writes (an expression index
-- `(vector::halfvec(dim)) halfvec_cosine_ops WHERE embedder = '...'`: memory/dialect_pg.py), since the dimension
-- is the embedder's. Without the extension (not installed, or this role may not create it: it is not a trusted
-- extension, so a superuser runs `CREATE EXTENSION vector` first; or the database says `hilo.vectors = off`),
-- the column is `bytea`, no vector is ever written and retrieval is lexical only: the store says so once at start.
-- To turn vectors on later: create the extension, then
--     ALTER TABLE message_vectors ALTER COLUMN vector TYPE halfvec USING NULL;  -- the table is empty then
-- and run `hilo embed`.
DO $$
DECLARE
    wanted boolean := coalesce(current_setting('hilo.vectors', true), '') <> 'off'
        AND EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector');
    usable boolean := false;
BEGIN
    IF wanted THEN
        BEGIN
            CREATE EXTENSION IF NOT EXISTS vector;
            usable := true;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE NOTICE 'hilo: the vector extension cannot be created by this role: lexical retrieval only';
        END;
    END IF;
    EXECUTE format(
        'CREATE TABLE IF NOT EXISTS message_vectors ('
        'message_id bigint NOT NULL PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE, '
        'user_id bigint NOT NULL REFERENCES users(id) ON DELETE CASCADE, '
        'embedder text NOT NULL, dim integer NOT NULL, vector %s NOT NULL)',
        CASE WHEN usable THEN 'halfvec' ELSE 'bytea' END);
END
$$;
CREATE INDEX IF NOT EXISTS message_vectors_user ON message_vectors(user_id, embedder, message_id);
-- Row-level security, as migrations/postgres/0011_rls.sql explains. No sequence here.
ALTER TABLE message_vectors ENABLE ROW LEVEL SECURITY;
DO $$
DECLARE
    grantee text;
BEGIN
    FOREACH grantee IN ARRAY ARRAY['anon', 'authenticated'] LOOP
        CONTINUE WHEN NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = grantee);
        EXECUTE format('REVOKE TRUNCATE, REFERENCES, TRIGGER ON TABLE message_vectors FROM %I', grantee);
    END LOOP;
END
$$;
