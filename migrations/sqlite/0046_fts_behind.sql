-- Issue 14: the messages' FTS5 index is written behind the turns, in batches (memory/sqlite_fts.py). A trigger
-- indexed each message in the transaction that stored it, and FTS5 flushed each transaction's one message as a
-- segment of its own when it committed: 480k of a web turn's 4,835k instructions, ~8 of its ~44 WAL frames.
-- `upto` is the newest message id the index holds; the index holds exactly the messages up to it: the external
-- content shows those only (so 'integrity-check' and 'rebuild' agree with the index) and the delete and update
-- triggers touch the index only for them. Every message stored so far is indexed (the old trigger did it).
CREATE TABLE fts_progress (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    upto INTEGER NOT NULL
);
INSERT INTO fts_progress (id, upto) VALUES (1, (SELECT coalesce(max(id), 0) FROM messages));

DROP TRIGGER messages_fts_insert;
DROP TRIGGER messages_fts_delete;
DROP TRIGGER messages_fts_update;
DROP VIEW messages_fts_source;

CREATE VIEW messages_fts_source AS
    SELECT id, 'u' || user_id || ' u' || user_id || 'x'
        || replace(coalesce(terms, content), ' ', ' u' || user_id || 'x') AS terms FROM messages
    WHERE id <= (SELECT upto FROM fts_progress);

CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages WHEN old.id <= (SELECT upto FROM fts_progress) BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, terms)
        VALUES ('delete', old.id, 'u' || old.user_id || ' u' || old.user_id || 'x'
            || replace(coalesce(old.terms, old.content), ' ', ' u' || old.user_id || 'x'));
END;

CREATE TRIGGER messages_fts_update AFTER UPDATE OF content, terms, user_id ON messages
    WHEN old.id <= (SELECT upto FROM fts_progress) BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, terms)
        VALUES ('delete', old.id, 'u' || old.user_id || ' u' || old.user_id || 'x'
            || replace(coalesce(old.terms, old.content), ' ', ' u' || old.user_id || 'x'));
    INSERT INTO messages_fts(rowid, terms)
        VALUES (new.id, 'u' || new.user_id || ' u' || new.user_id || 'x'
            || replace(coalesce(new.terms, new.content), ' ', ' u' || new.user_id || 'x'));
END;
