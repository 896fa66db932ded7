-- Memories' terms become stems (memory/memory_match.py over memory/stems.py, as messages' since 0013): the old
-- terms (plain words) are emptied here, and memory/reindex.py stores each row's stems after the migrations (at
-- `hilo migrate` and every open: resumable, by id, over the partial index); meanwhile a row's terms are computed
-- when it is read (memory/rows.py to_memory).
UPDATE memories SET terms = '';
CREATE INDEX memories_without_terms ON memories(id) WHERE terms = '';
