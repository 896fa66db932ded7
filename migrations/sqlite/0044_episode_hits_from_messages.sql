-- Issue 14: the episodes' own FTS5 index is gone. Every message stored rewrote its episode's whole document in it
-- (a 'delete' of the old terms, then the new ones: some 30 messages' terms a message, ~95% of what a turn wrote
-- to FTS5), and FTS5 paid it back in merges: one write in ~60 waited 20-55 ms for an automerge (1,000 people x
-- 1,000 messages). Recall now finds a question's episodes through the messages' index, whose postings it walks
-- anyway (memory/sqlite_terms.py): an episode holds a term exactly when one of its messages does, and it is still
-- scored as one document over its stored terms. The index's pages stay in the file for later writes (`sqlite3 hilo.db
-- VACUUM` with hilo stopped gives them back to the disk).
DROP TRIGGER episodes_fts_insert;
DROP TRIGGER episodes_fts_delete;
DROP TRIGGER episodes_fts_update;
DROP TABLE episodes_fts_vocab;
DROP TABLE episodes_fts;
DROP VIEW episodes_fts_source;
