-- Issue 14: lexical recall bounded in the history's size (memory/sqlite_terms.py, memory/pg_terms.py).
-- SQLite computes BM25 over a bounded set of candidates instead of FTS5's bm25() (which counted every row of each
-- phrase on every question): it reads each term's document frequency for episodes too, as for messages.
CREATE VIRTUAL TABLE episodes_fts_vocab USING fts5vocab(episodes_fts, 'row');
-- A person's newest episodes, one index range (Postgres looks for its common terms there); it serves the
-- person's other look-ups (forget, the foreign key) as episodes_user did.
CREATE INDEX episodes_user_started ON episodes(user_id, started_at);
DROP INDEX episodes_user;
