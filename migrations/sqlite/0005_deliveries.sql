-- What was sent to a person on a surface, part by part, and what became of it (sent, failed, and the
-- provider's later status: delivered, read, undelivered). A send that finally fails is a row, not a log line.
CREATE TABLE deliveries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    -- the reply sent (or, when no reply was stored, the person's message it answered)
    message_id INTEGER REFERENCES messages(id) ON DELETE CASCADE,
    surface TEXT NOT NULL,
    recipient TEXT NOT NULL,
    part INTEGER NOT NULL DEFAULT 1,
    parts INTEGER NOT NULL DEFAULT 1,
    status TEXT NOT NULL,
    provider_ref TEXT,
    error TEXT,
    attempts INTEGER NOT NULL DEFAULT 1,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX deliveries_user ON deliveries(user_id, id);
CREATE INDEX deliveries_provider_ref ON deliveries(surface, provider_ref) WHERE provider_ref IS NOT NULL;
