-- Memories replace facts (issue 11): what hilo knows about a person, each with its kind, an optional slot (`key`:
-- "employer", "city"; a newer memory of the same kind and key supersedes the older), content, index terms for
-- lexical matching (memory/memory_match.py), importance and confidence in [0, 1], where it came from (`source`:
-- stated by the person, confidence 1.0; inferred by the model, 0.7; observed, 0.5), the messages it came from (ids
-- and their external ids, JSON arrays), an optional vector of the embedder `embedder` (float32 bytes), its times
-- (created, updated, last used in a context, how often), an optional expiry, and its end: `ended_at` (superseded
-- or expired: kept, never in the context) and `superseded_by` (the memory that replaced it).
-- Existing facts become stated memories (confidence 1.0), keeping their ids; `facts` is dropped.
CREATE TABLE memories (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    kind TEXT NOT NULL DEFAULT 'fact' CHECK (kind IN ('fact', 'preference', 'event', 'plan', 'relationship')),
    key TEXT,
    content TEXT NOT NULL,
    token_count INTEGER NOT NULL DEFAULT 0,
    terms TEXT NOT NULL DEFAULT '',
    importance REAL NOT NULL DEFAULT 0.5 CHECK (importance >= 0 AND importance <= 1),
    confidence REAL NOT NULL DEFAULT 1.0 CHECK (confidence >= 0 AND confidence <= 1),
    source TEXT NOT NULL DEFAULT 'stated' CHECK (source IN ('stated', 'inferred', 'observed')),
    source_message_ids TEXT NOT NULL DEFAULT '[]',
    source_external_ids TEXT NOT NULL DEFAULT '[]',
    embedder TEXT,
    vector BLOB,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    last_accessed_at TEXT,
    access_count INTEGER NOT NULL DEFAULT 0,
    expires_at TEXT,
    ended_at TEXT,
    superseded_by INTEGER REFERENCES memories(id) ON DELETE SET NULL
);
CREATE INDEX memories_user ON memories(user_id, id);
CREATE INDEX memories_superseded_by ON memories(superseded_by);

INSERT INTO memories(id, user_id, kind, content, token_count, importance, confidence, source, created_at, updated_at)
SELECT id, user_id, 'fact', content, token_count, 0.5, 1.0, 'stated', created_at, created_at FROM facts;
DROP TABLE facts;
