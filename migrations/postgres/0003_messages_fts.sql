-- Lexical recall: a stored tsvector of every message, GIN-indexed; every search also filters by user_id.
-- The 'simple' configuration lowercases and neither stems nor drops stopwords (memory/search_terms.py picks
-- the terms). Runs of anything but letters and digits become spaces first, so a message is split into words
-- exactly as search_terms splits a query ("example.com" is "example" and "com"; "3.5" is "3" and "5").
-- A generated column: rows stored before this migration are indexed too, and a merge (user_id change)
-- needs no re-indexing here since the owner filter is the user_id column itself.

ALTER TABLE messages ADD COLUMN search tsvector
    GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, regexp_replace(content, '[^[:alnum:]]+', ' ', 'g')))
    STORED;
CREATE INDEX messages_search ON messages USING gin (search);
