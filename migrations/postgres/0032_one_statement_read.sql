-- Issue 14: a Postgres turn in at most 8 round trips on the wire, through a transaction pooler too. The turn's
-- context is read in one statement (memory/pg_context.py), recall included: lexical recall over messages and over
-- episodes (memory/pg_terms.py's LEXICAL and EPISODES, the same SQL) are functions here, so that the statement
-- needs no round trip of its own for the term statistics, and so that each call plans its queries with the real
-- values (EXECUTE: a custom plan every time; a prepared statement goes generic after five runs, and recall's
-- generic plan had the 13.7 ms p99, docs/architecture.md).
--
-- hilo_term_weights(table, terms, avgdl): each term's idf and whether it is rare, as pg_terms.stats computes them
-- (the planner's statistics; before any ANALYZE the matches counted, capped at 1000); the table's mean
-- row length is `avgdl`, or read from its newest 1,000 rows when NULL.
CREATE FUNCTION hilo_term_weights(p_table text, p_terms text[], p_avgdl double precision,
    OUT idfs double precision[], OUT rare boolean[], OUT mean double precision)
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    total double precision;
    analyzed boolean;
    elems text[];
    freqs real[];
    floor_df double precision;
    t text;
    share double precision;
    df double precision;
    ratio double precision;
BEGIN
    SELECT greatest(c.reltuples, 0), st.attname IS NOT NULL, st.most_common_elems::text::text[],
           st.most_common_elem_freqs
      INTO total, analyzed, elems, freqs
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      LEFT JOIN pg_stats st ON st.schemaname = n.nspname AND st.tablename = c.relname AND st.attname = 'search'
     WHERE c.oid = p_table::regclass;
    idfs := '{}';
    rare := '{}';
    IF analyzed THEN
        -- a word the statistics do not list: as the planner guesses it, never above the rarest listed
        floor_df := least(coalesce(freqs[cardinality(elems) + 1], 0), 0.005) * total;
    ELSE
        EXECUTE format('SELECT coalesce(max(id), 0) FROM %I', p_table) INTO total;
    END IF;
    FOREACH t IN ARRAY p_terms LOOP
        IF analyzed THEN
            share := freqs[array_position(elems, t)];
            df := greatest(1.0, coalesce(share * total, floor_df));
            rare := rare || (share IS NULL OR df <= 500);
        ELSE
            EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM %I x WHERE $1 IS NOT NULL '
                           'AND x.search @@ to_tsquery(''simple'', quote_literal($1)) LIMIT 1000) s', p_table)
               USING t INTO df;
            rare := rare || (df <= 500);
        END IF;
        ratio := (total - df + 0.5) / (df + 0.5);
        idfs := idfs || CASE WHEN total > 0 AND ratio > 0 THEN greatest(1e-6, ln(ratio)) ELSE 1e-6 END;
    END LOOP;
    IF p_avgdl IS NULL THEN
        EXECUTE format('SELECT coalesce(avg(length(x.search) - 1), 1) FROM (SELECT search FROM %I '
                       'ORDER BY id DESC LIMIT 1000) x', p_table) INTO mean;
        mean := greatest(1.0, mean);
    ELSE
        mean := p_avgdl;
    END IF;
END
$fn$;

-- The tsquery text OR-ing the terms whose `rare` is `which` (pg_terms.tsquery_text), NULL when there are none.
CREATE FUNCTION hilo_tsquery_text(p_terms text[], p_rare boolean[], p_which boolean) RETURNS text
LANGUAGE sql IMMUTABLE AS $fn$
    SELECT string_agg('''' || replace(replace(u.t, '''', ''''''), '\', '\\') || '''', ' | ' ORDER BY u.i)
      FROM unnest(p_terms, p_rare) WITH ORDINALITY AS u(t, r, i) WHERE u.r = p_which
$fn$;

-- Recall's hits for a question's terms: (0, message, BM25) the best `p_lexical` messages, (1, episode, BM25) the
-- best `p_episodes` episodes, under pg_terms.LEXICAL's and EPISODES' rules; then (2, NULL, the mean row length of
-- messages) and (3, NULL, of episodes), which the caller caches and passes back (NULL: read here).
CREATE FUNCTION hilo_recall_hits(p_terms text[], p_user bigint, p_at timestamptz, p_excluded bigint[],
    p_current bigint, p_conversation bigint, p_lexical integer, p_episodes integer,
    p_avgdl_messages double precision, p_avgdl_episodes double precision)
RETURNS TABLE(hit_kind integer, hit_id bigint, hit_score double precision)
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    w record;
BEGIN
    IF coalesce(cardinality(p_terms), 0) = 0 THEN
        RETURN;
    END IF;
    SELECT * INTO w FROM hilo_term_weights('messages', p_terms, p_avgdl_messages);
    RETURN QUERY EXECUTE 'SELECT 0, h.id::bigint, h.score::float8 FROM (WITH rare AS (SELECT x.id FROM messages x WHERE $4::text IS NOT NULL AND x.search @@ (to_tsquery(''simple'', $4) && quote_literal(''_u'' || $5::bigint::text)::tsquery) AND x.user_id = $5 LIMIT 4000), newest AS (SELECT x.id, x.search FROM messages x WHERE $11::text IS NOT NULL AND x.user_id = $5 ORDER BY x.created_at DESC LIMIT $12), cand AS (SELECT id FROM rare UNION SELECT n.id FROM newest n WHERE n.search @@ to_tsquery(''simple'', $11)) SELECT m.id, (SELECT sum(t.idf) FROM unnest($1::text[], $2::float8[]) AS t(term, idf) WHERE m.search @@ t.term::tsquery) * 2.2 / (1 + 1.2 * (0.25 + 0.75 * greatest(length(m.search) - 1, 1) / $3::float8)) AS score FROM messages m WHERE m.id IN (SELECT id FROM cand) AND m.user_id = $5 AND m.created_at <= $6 AND m.id <> ALL($7::bigint[]) AND ($8::bigint IS NULL OR NOT (m.conversation_id IS NOT DISTINCT FROM $9::bigint AND m.role = ''user'' AND m.id > $8)) ORDER BY score DESC, m.id DESC LIMIT $10) AS h'
        USING p_terms, w.idfs, w.mean, hilo_tsquery_text(p_terms, w.rare, true), p_user, p_at, p_excluded,
              p_current, p_conversation, p_lexical, hilo_tsquery_text(p_terms, w.rare, false), 1000;
    RETURN QUERY SELECT 2, NULL::bigint, w.mean;
    SELECT * INTO w FROM hilo_term_weights('episodes', p_terms, p_avgdl_episodes);
    RETURN QUERY EXECUTE 'SELECT 1, h.id::bigint, h.score::float8 FROM (WITH rare AS (SELECT x.id FROM episodes x WHERE $4::text IS NOT NULL AND x.search @@ (to_tsquery(''simple'', $4) && quote_literal(''_u'' || $5::bigint::text)::tsquery) AND x.user_id = $5 LIMIT 4000), newest AS (SELECT x.id, x.search FROM episodes x WHERE $8::text IS NOT NULL AND x.user_id = $5 ORDER BY x.started_at DESC LIMIT $9), cand AS (SELECT id FROM rare UNION SELECT n.id FROM newest n WHERE n.search @@ to_tsquery(''simple'', $8)) SELECT e.id, (SELECT sum(t.idf) FROM unnest($1::text[], $2::float8[]) AS t(term, idf) WHERE e.search @@ t.term::tsquery) * 2.2 / (1 + 1.2 * (0.25 + 0.75 * greatest(length(e.search) - 1, 1) / $3::float8)) AS score FROM episodes e WHERE e.id IN (SELECT id FROM cand) AND e.user_id = $5 AND e.started_at <= $6 ORDER BY score DESC, e.id DESC LIMIT $7) AS h'
        USING p_terms, w.idfs, w.mean, hilo_tsquery_text(p_terms, w.rare, true), p_user, p_at, p_episodes,
              hilo_tsquery_text(p_terms, w.rare, false), 200;
    RETURN QUERY SELECT 3, NULL::bigint, w.mean;
END
$fn$;
