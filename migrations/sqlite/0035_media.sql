-- Voice notes and audio (issue 15): one row per downloaded media file of a person's message. The message keeps the
-- platform's reference in its metadata from the moment it is stored (before the webhook is acknowledged); this row
-- says what became of it: the file kept under HILO_DATA_DIR/media (`path`, NULL once the retention job or
-- `hilo forget` deleted it), its size and duration, and the transcriber whose text is now the message's content
-- (`status`: transcribed, not_configured, failed, empty, too_large). A message deleted by retention leaves its
-- row (message_id NULL) until the media retention deletes the file; forgetting the person deletes both.
CREATE TABLE media (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    message_id BIGINT REFERENCES messages(id) ON DELETE SET NULL,
    surface TEXT NOT NULL,
    kind TEXT NOT NULL,
    mime TEXT,
    bytes INTEGER,
    duration_s INTEGER,
    path TEXT,
    transcriber TEXT,
    status TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX media_user_id ON media(user_id);
CREATE INDEX media_message_id ON media(message_id);
-- the retention job's look-up: files still kept, oldest first
CREATE INDEX media_kept ON media(created_at) WHERE path IS NOT NULL;
