-- Lexical recall: an FTS5 external-content index over messages.content, kept in sync by triggers.
-- The `owner` column holds one token per row ('u' || user_id) so a search is an AND with the owner's
-- posting list: FTS5 skips through the other users' rows instead of ranking all of them.
-- The view is the external content (FTS5 reads it for 'rebuild' and 'integrity-check').

CREATE VIEW messages_fts_source AS
    SELECT id, content, 'u' || user_id AS owner FROM messages;

CREATE VIRTUAL TABLE messages_fts USING fts5(
    content, owner,
    content = 'messages_fts_source', content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);

CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content, owner) VALUES (new.id, new.content, 'u' || new.user_id);
END;

CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content, owner)
        VALUES ('delete', old.id, old.content, 'u' || old.user_id);
END;

CREATE TRIGGER messages_fts_update AFTER UPDATE OF content, user_id ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content, owner)
        VALUES ('delete', old.id, old.content, 'u' || old.user_id);
    INSERT INTO messages_fts(rowid, content, owner) VALUES (new.id, new.content, 'u' || new.user_id);
END;

-- Messages stored before this migration.
INSERT INTO messages_fts(messages_fts) VALUES ('rebuild');
