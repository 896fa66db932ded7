-- Issue 14: each person's FTS5 postings apart. Until 0032 a message was indexed as its terms plus an owner column
-- ('u<id>'), and recall matched `owner : "u<id>" AND terms : "t"`: FTS5 walked t's postings over everyone until it
-- had found the person's newest (at 1,000 people x 1,000 messages, 4.0 ms of a question's 8 terms against 0.2 ms
-- with scoped tokens; memory/sqlite_terms.py). Here every index term is written 'u<id>x<term>' (a user id is
-- digits, so the first 'x' ends it): the person's postings of a term are their own doclist, and fts5vocab's
-- document frequency of 'u<id>x<term>' is the term's count in that person's history. Each row also holds the bare
-- owner token 'u<id>' (its document frequency: the person's row count, their BM25 N). detail=none: recall reads
-- rowids only (it scores the stored terms itself), so positions and columns are not kept.

DROP TRIGGER messages_fts_insert;
DROP TRIGGER messages_fts_delete;
DROP TRIGGER messages_fts_update;
DROP TABLE messages_fts_vocab;
DROP TABLE messages_fts;
DROP VIEW messages_fts_source;

CREATE VIEW messages_fts_source AS
    SELECT id, 'u' || user_id || ' u' || user_id || 'x'
        || replace(coalesce(terms, content), ' ', ' u' || user_id || 'x') AS terms FROM messages;

CREATE VIRTUAL TABLE messages_fts USING fts5(
    terms,
    content = 'messages_fts_source', content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2', detail = none
);

CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, terms)
        VALUES (new.id, 'u' || new.user_id || ' u' || new.user_id || 'x'
            || replace(coalesce(new.terms, new.content), ' ', ' u' || new.user_id || 'x'));
END;

CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, terms)
        VALUES ('delete', old.id, 'u' || old.user_id || ' u' || old.user_id || 'x'
            || replace(coalesce(old.terms, old.content), ' ', ' u' || old.user_id || 'x'));
END;

CREATE TRIGGER messages_fts_update AFTER UPDATE OF content, terms, user_id ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, terms)
        VALUES ('delete', old.id, 'u' || old.user_id || ' u' || old.user_id || 'x'
            || replace(coalesce(old.terms, old.content), ' ', ' u' || old.user_id || 'x'));
    INSERT INTO messages_fts(rowid, terms)
        VALUES (new.id, 'u' || new.user_id || ' u' || new.user_id || 'x'
            || replace(coalesce(new.terms, new.content), ' ', ' u' || new.user_id || 'x'));
END;

INSERT INTO messages_fts(messages_fts) VALUES ('rebuild');
CREATE VIRTUAL TABLE messages_fts_vocab USING fts5vocab(messages_fts, 'row');

-- The episodes' index, scoped the same way.
DROP TRIGGER episodes_fts_insert;
DROP TRIGGER episodes_fts_delete;
DROP TRIGGER episodes_fts_update;
DROP TABLE episodes_fts_vocab;
DROP TABLE episodes_fts;
DROP VIEW episodes_fts_source;

CREATE VIEW episodes_fts_source AS
    SELECT id, 'u' || user_id || ' u' || user_id || 'x' || replace(terms, ' ', ' u' || user_id || 'x') AS terms
    FROM episodes;

CREATE VIRTUAL TABLE episodes_fts USING fts5(
    terms,
    content = 'episodes_fts_source', content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2', detail = none
);

CREATE TRIGGER episodes_fts_insert AFTER INSERT ON episodes BEGIN
    INSERT INTO episodes_fts(rowid, terms)
        VALUES (new.id, 'u' || new.user_id || ' u' || new.user_id || 'x'
            || replace(new.terms, ' ', ' u' || new.user_id || 'x'));
END;

CREATE TRIGGER episodes_fts_delete AFTER DELETE ON episodes BEGIN
    INSERT INTO episodes_fts(episodes_fts, rowid, terms)
        VALUES ('delete', old.id, 'u' || old.user_id || ' u' || old.user_id || 'x'
            || replace(old.terms, ' ', ' u' || old.user_id || 'x'));
END;

CREATE TRIGGER episodes_fts_update AFTER UPDATE OF terms, user_id ON episodes BEGIN
    INSERT INTO episodes_fts(episodes_fts, rowid, terms)
        VALUES ('delete', old.id, 'u' || old.user_id || ' u' || old.user_id || 'x'
            || replace(old.terms, ' ', ' u' || old.user_id || 'x'));
    INSERT INTO episodes_fts(rowid, terms)
        VALUES (new.id, 'u' || new.user_id || ' u' || new.user_id || 'x'
            || replace(new.terms, ' ', ' u' || new.user_id || 'x'));
END;

INSERT INTO episodes_fts(episodes_fts) VALUES ('rebuild');
CREATE VIRTUAL TABLE episodes_fts_vocab USING fts5vocab(episodes_fts, 'row');
