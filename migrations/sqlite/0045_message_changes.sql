-- The conversation windows a SQLite store keeps between turns (memory/windows.py) were all dropped whenever
-- another connection committed anything (PRAGMA data_version moved): a second daemon on the file, `hilo import` or
-- `hilo chat` storing a turn, so that with two processes on one file no window outlived the other's next message.
-- Only a change or a deletion of a message a window may hold makes it stale: a new row is found by the window's
-- `id > n` read whoever wrote it (SQLite commits one writer at a time, and a new row's id is above every id
-- stored). Those two count here, whichever connection makes them; a store reads the count, in its transaction's
-- snapshot, once another connection committed, and reads its windows anew only when it moved. The columns are
-- memory/windows.py's WATCHED_COLUMNS (reindex's terms and episode updates leave the windows as they are).
CREATE TABLE message_changes (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    n INTEGER NOT NULL
);
INSERT INTO message_changes (id, n) VALUES (1, 0);
CREATE TRIGGER message_changes_update AFTER UPDATE OF id, conversation_id, user_id, surface, role, content,
    token_count, external_id, created_at, metadata, reply_to ON messages
BEGIN
    UPDATE message_changes SET n = n + 1 WHERE id = 1;
END;
CREATE TRIGGER message_changes_delete AFTER DELETE ON messages
BEGIN
    UPDATE message_changes SET n = n + 1 WHERE id = 1;
END;
