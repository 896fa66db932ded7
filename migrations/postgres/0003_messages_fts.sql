-- Lexical recall: a stored tsvector of every message, GIN-indexed; every search also filters by user_id.
-- The 'simple' configuration lowercases and neither stems nor drops stopwords (memory/search_terms.py picks
-- the terms). Runs of anything but letters and digits become spaces first, so a message is split into words
-- exactly as search_terms splits a query ("example.com" is "example" and "com"; "3.5" is "3" and "5").
-- The owner's token ('_u' and the user id: never a word, since '_' splits words) is part of the vector, so a
-- search is an AND with it inside the GIN index: other people's matches are skipped, not fetched and filtered.
-- A generated column: rows stored before this migration are indexed too, and a merge (user_id change)
-- re-indexes by itself.

ALTER TABLE messages ADD COLUMN search tsvector
    GENERATED ALWAYS AS (
        to_tsvector('simple'::regconfig, regexp_replace(content, '[^[:alnum:]]+', ' ', 'g'))
        || array_to_tsvector(ARRAY['_u' || user_id::text])
    ) STORED;
CREATE INDEX messages_search ON messages USING gin (search);
