-- Issue 14: recall's term statistics read once per process every ten minutes (memory/pg_terms.py's STATS and
-- TermStats), not twice per question. Until now hilo_recall_hits (migration 0032) called hilo_term_weights for
-- messages and for episodes with every question: each read pg_stats and parsed its 1,000 most common elements
-- (0.4 ms each at 1,000 people x 1,000 messages, 4.5 ms on a connection's first call). The caller now hands
-- each table's idfs and rare flags, computed from the same statistics with the same float operations
-- (tests/test_pg_term_stats.py); NULL (no ANALYZE yet, or nothing cached) computes them here as before.
-- And each candidate's score matches it against the terms parsed once ($1::text[]::tsquery[], folded into a
-- constant by the custom plan) instead of parsing every term again for every candidate (t.term::tsquery): the
-- same hits, hilo_recall_hits p50/p99 2.19/4.00 -> 1.88/3.04 ms at 1,000 x 1,000 (360 interleaved pairs).
DROP FUNCTION hilo_recall_hits(text[], bigint, timestamptz, bigint[], bigint, bigint, integer, integer,
    double precision, double precision);

CREATE FUNCTION hilo_recall_hits(p_terms text[], p_user bigint, p_at timestamptz, p_excluded bigint[],
    p_current bigint, p_conversation bigint, p_lexical integer, p_episodes integer,
    p_avgdl_messages double precision, p_avgdl_episodes double precision,
    p_idfs_messages double precision[], p_rare_messages boolean[],
    p_idfs_episodes double precision[], p_rare_episodes boolean[])
RETURNS TABLE(hit_kind integer, hit_id bigint, hit_score double precision)
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    idfs double precision[];
    rare boolean[];
    mean double precision;
BEGIN
    IF coalesce(cardinality(p_terms), 0) = 0 THEN
        RETURN;
    END IF;
    IF p_idfs_messages IS NULL OR p_avgdl_messages IS NULL THEN
        SELECT w.idfs, w.rare, w.mean INTO idfs, rare, mean FROM hilo_term_weights('messages', p_terms, p_avgdl_messages) w;
    ELSE
        idfs := p_idfs_messages; rare := p_rare_messages; mean := p_avgdl_messages;
    END IF;
    RETURN QUERY EXECUTE 'SELECT 0, h.id::bigint, h.score::float8 FROM (WITH rare AS (SELECT x.id FROM messages x WHERE $4::text IS NOT NULL AND x.search @@ (to_tsquery(''simple'', $4) && quote_literal(''_u'' || $5::bigint::text)::tsquery) AND x.user_id = $5 LIMIT 4000), newest AS (SELECT x.id, x.search FROM messages x WHERE $11::text IS NOT NULL AND x.user_id = $5 ORDER BY x.created_at DESC LIMIT $12), cand AS (SELECT id FROM rare UNION SELECT n.id FROM newest n WHERE n.search @@ to_tsquery(''simple'', $11)) SELECT m.id, (SELECT sum(t.idf) FROM unnest($1::text[]::tsquery[], $2::float8[]) AS t(term, idf) WHERE m.search @@ t.term) * 2.2 / (1 + 1.2 * (0.25 + 0.75 * greatest(length(m.search) - 1, 1) / $3::float8)) AS score FROM messages m WHERE m.id IN (SELECT id FROM cand) AND m.user_id = $5 AND m.created_at <= $6 AND m.id <> ALL($7::bigint[]) AND ($8::bigint IS NULL OR NOT (m.conversation_id IS NOT DISTINCT FROM $9::bigint AND m.role = ''user'' AND m.id > $8)) ORDER BY score DESC, m.id DESC LIMIT $10) AS h'
        USING p_terms, idfs, mean, hilo_tsquery_text(p_terms, rare, true), p_user, p_at, p_excluded,
              p_current, p_conversation, p_lexical, hilo_tsquery_text(p_terms, rare, false), 1000;
    RETURN QUERY SELECT 2, NULL::bigint, mean;
    IF p_idfs_episodes IS NULL OR p_avgdl_episodes IS NULL THEN
        SELECT w.idfs, w.rare, w.mean INTO idfs, rare, mean FROM hilo_term_weights('episodes', p_terms, p_avgdl_episodes) w;
    ELSE
        idfs := p_idfs_episodes; rare := p_rare_episodes; mean := p_avgdl_episodes;
    END IF;
    RETURN QUERY EXECUTE 'SELECT 1, h.id::bigint, h.score::float8 FROM (WITH rare AS (SELECT x.id FROM episodes x WHERE $4::text IS NOT NULL AND x.search @@ (to_tsquery(''simple'', $4) && quote_literal(''_u'' || $5::bigint::text)::tsquery) AND x.user_id = $5 LIMIT 4000), newest AS (SELECT x.id, x.search FROM episodes x WHERE $8::text IS NOT NULL AND x.user_id = $5 ORDER BY x.started_at DESC LIMIT $9), cand AS (SELECT id FROM rare UNION SELECT n.id FROM newest n WHERE n.search @@ to_tsquery(''simple'', $8)) SELECT e.id, (SELECT sum(t.idf) FROM unnest($1::text[]::tsquery[], $2::float8[]) AS t(term, idf) WHERE e.search @@ t.term) * 2.2 / (1 + 1.2 * (0.25 + 0.75 * greatest(length(e.search) - 1, 1) / $3::float8)) AS score FROM episodes e WHERE e.id IN (SELECT id FROM cand) AND e.user_id = $5 AND e.started_at <= $6 ORDER BY score DESC, e.id DESC LIMIT $7) AS h'
        USING p_terms, idfs, mean, hilo_tsquery_text(p_terms, rare, true), p_user, p_at, p_episodes,
              hilo_tsquery_text(p_terms, rare, false), 200;
    RETURN QUERY SELECT 3, NULL::bigint, mean;
END
$fn$;
