-- Issue 14: a turn's context read WITH a query vector in one statement too (memory/pg_context.py). The person's
-- nearest message vectors were one statement of a read transaction whose BEGIN carried
-- `SET LOCAL hnsw.iterative_scan = relaxed_order; SET LOCAL hnsw.ef_search = 200` (memory/dialect_pg.py): a
-- statement outside a transaction cannot SET LOCAL, and a plain SET does not survive a transaction pooler
-- (pgbouncer, Supabase's port 6543), where the next transaction may run on another server connection.
-- hilo_nearest carries the two settings in its own SET clauses instead: Postgres applies them for the function's
-- call and restores them after, whatever the session or the pooler, so the search can be a sub-statement of the
-- one-statement read (and of any other statement) with no SET of its own and nothing left behind in the session.
--
-- The search itself is memory/dialect_pg.py's NEAREST as it was: the person's rows of one embedder, by the HNSW
-- index of (embedder, dim), whose partial predicate and expression need the name and the dimension spelt in (hence
-- EXECUTE format(...): a custom plan every call, with the question's vector parsed once); the iterative scan (its
-- relaxed order put right by the outer ORDER BY) goes on until it has `p_limit` of the person's rows, and
-- ef_search 200 keeps recall's up to 128 vector hits within the search list (pgvector's default, 40, missed what
-- SQLite's exact scan finds). Ties (equal vectors) go to the newer message, as on SQLite.
--
-- hilo_define_nearest makes it: with the iterative scan when pgvector is 0.8 or later (or not there yet), ef_search
-- alone with an older one. pgvector's settings are known once its library is loaded (any of its functions loads
-- it); before that they are placeholders, which only a superuser may put in a SET clause: without pgvector a role
-- that is not one gets the function without its settings (hilo never calls it there: the store keeps no vectors),
-- and the store defines it again at start once the column is a halfvec (memory/dialect_pg.py, migrate).
CREATE FUNCTION hilo_define_nearest() RETURNS boolean
LANGUAGE plpgsql AS $define$
DECLARE
    version text := (SELECT extversion FROM pg_extension WHERE extname = 'vector');
    iterative boolean := version IS NULL
        OR string_to_array(regexp_replace(version, '[^0-9.].*$', ''), '.')::int[] >= ARRAY[0, 8];
    settings text := 'SET hnsw.ef_search = 200'
        || CASE WHEN iterative THEN ' SET hnsw.iterative_scan = relaxed_order' ELSE '' END;
    make text := $create$
CREATE OR REPLACE FUNCTION hilo_nearest(p_embedder text, p_dim integer, p_vector text, p_user bigint,
    p_excluded bigint[], p_limit integer)
RETURNS TABLE(message_id bigint, cosine double precision)
LANGUAGE plpgsql STABLE %s
AS $fn$
BEGIN
    IF p_vector IS NULL OR coalesce(p_limit, 0) <= 0 THEN
        RETURN;
    END IF;
    RETURN QUERY EXECUTE format('WITH hits AS MATERIALIZED (SELECT v.message_id, v.vector::halfvec(%%1$s) <=> (SELECT $1::text::halfvec(%%1$s)) AS distance FROM message_vectors v WHERE v.user_id = $2 AND v.embedder = %%2$L AND v.dim = %%1$s AND v.message_id <> ALL($3::bigint[]) ORDER BY distance LIMIT 2 * $4) SELECT hits.message_id::bigint, (1 - hits.distance)::float8 FROM hits ORDER BY hits.distance, hits.message_id DESC LIMIT $4', p_dim, p_embedder)
        USING p_vector, p_user, p_excluded, p_limit;
END
$fn$
$create$;
BEGIN
    IF version IS NOT NULL THEN
        EXECUTE 'SELECT ''[1]''::vector';
    END IF;
    BEGIN
        EXECUTE format(make, settings);
        RETURN true;
    EXCEPTION WHEN insufficient_privilege THEN
        EXECUTE format(make, '');
        RETURN false;
    END;
END
$define$;

SELECT hilo_define_nearest();
