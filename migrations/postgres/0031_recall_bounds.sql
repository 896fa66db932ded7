-- Issue 14: lexical recall bounded in the history's size (memory/pg_terms.py, memory/sqlite_terms.py).
-- SQLite adds an fts5vocab table of the episodes' terms here; Postgres reads the planner's statistics instead.
-- A person's newest episodes, one index range (the common terms of a question are looked for there); it serves
-- the person's other look-ups (forget, the foreign key) as episodes_user did.
CREATE INDEX episodes_user_started ON episodes(user_id, started_at);
DROP INDEX episodes_user;
