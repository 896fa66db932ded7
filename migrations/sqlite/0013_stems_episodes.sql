-- Issue 11: stemmed lexical recall and episodes.
-- messages.terms: the message's index terms (memory/stems.py: English and Spanish Snowball stems of its
-- diacritic-folded words), computed in Python when the message is stored. NULL for rows stored before this
-- migration until memory/reindex.py fills them (`hilo migrate`, store open): FTS5 indexes the content meanwhile.
-- episodes: one conversation's run of messages with no gap over an hour (memory/episodes.py); `terms` is the
-- whole run's index terms, scored as one document; the summary columns are for model-written summaries.
ALTER TABLE messages ADD COLUMN terms TEXT;
-- the rows memory/reindex.py still has to do (empty once done): finding them costs nothing on every open
CREATE INDEX messages_without_terms ON messages(id) WHERE terms IS NULL;

CREATE TABLE episodes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    surface TEXT NOT NULL,
    started_at TEXT NOT NULL,
    ended_at TEXT NOT NULL,
    message_count INTEGER NOT NULL DEFAULT 0,
    token_count INTEGER NOT NULL DEFAULT 0,
    terms TEXT NOT NULL DEFAULT '',
    summary TEXT,
    summary_model TEXT,
    summary_at TEXT
);
CREATE INDEX episodes_conversation ON episodes(conversation_id, ended_at);
CREATE INDEX episodes_user ON episodes(user_id);

ALTER TABLE messages ADD COLUMN episode_id INTEGER REFERENCES episodes(id) ON DELETE SET NULL;
CREATE INDEX messages_episode ON messages(episode_id);

-- The messages' FTS5 index, rebuilt over the terms (the content until a row has them).
DROP TABLE messages_fts_vocab;
DROP TRIGGER messages_fts_insert;
DROP TRIGGER messages_fts_delete;
DROP TRIGGER messages_fts_update;
DROP TABLE messages_fts;
DROP VIEW messages_fts_source;

CREATE VIEW messages_fts_source AS
    SELECT id, coalesce(terms, content) AS content, 'u' || user_id AS owner FROM messages;

CREATE VIRTUAL TABLE messages_fts USING fts5(
    content, owner,
    content = 'messages_fts_source', content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);

CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content, owner)
        VALUES (new.id, coalesce(new.terms, new.content), 'u' || new.user_id);
END;

CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content, owner)
        VALUES ('delete', old.id, coalesce(old.terms, old.content), 'u' || old.user_id);
END;

CREATE TRIGGER messages_fts_update AFTER UPDATE OF content, terms, user_id ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content, owner)
        VALUES ('delete', old.id, coalesce(old.terms, old.content), 'u' || old.user_id);
    INSERT INTO messages_fts(rowid, content, owner)
        VALUES (new.id, coalesce(new.terms, new.content), 'u' || new.user_id);
END;

INSERT INTO messages_fts(messages_fts) VALUES ('rebuild');
CREATE VIRTUAL TABLE messages_fts_vocab USING fts5vocab(messages_fts, 'row');

-- The episodes' FTS5 index: the whole run's terms, with the owner token as for messages.
CREATE VIEW episodes_fts_source AS
    SELECT id, terms, 'u' || user_id AS owner FROM episodes;

CREATE VIRTUAL TABLE episodes_fts USING fts5(
    terms, owner,
    content = 'episodes_fts_source', content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);

CREATE TRIGGER episodes_fts_insert AFTER INSERT ON episodes BEGIN
    INSERT INTO episodes_fts(rowid, terms, owner) VALUES (new.id, new.terms, 'u' || new.user_id);
END;

CREATE TRIGGER episodes_fts_delete AFTER DELETE ON episodes BEGIN
    INSERT INTO episodes_fts(episodes_fts, rowid, terms, owner)
        VALUES ('delete', old.id, old.terms, 'u' || old.user_id);
END;

CREATE TRIGGER episodes_fts_update AFTER UPDATE OF terms, user_id ON episodes BEGIN
    INSERT INTO episodes_fts(episodes_fts, rowid, terms, owner)
        VALUES ('delete', old.id, old.terms, 'u' || old.user_id);
    INSERT INTO episodes_fts(rowid, terms, owner) VALUES (new.id, new.terms, 'u' || new.user_id);
END;
