-- Reminders (issue 15 item 5): what the `remind` tool scheduled for a person. `due_at` is when it is delivered
-- (UTC); the `reminders` job delivers each due one exactly once: in one transaction it becomes hilo's message in
-- the person's conversation on their last-active surface, its outbox parts are queued (`deliveries`), and its
-- status leaves 'pending' (sent | cancelled | failed, with `error` saying why: never the text). `message_id`: the
-- person's message whose turn scheduled it; `delivered_id`: hilo's message that delivered it.
CREATE TABLE reminders (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    message_id BIGINT REFERENCES messages(id) ON DELETE SET NULL,
    text TEXT NOT NULL,
    due_at TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    surface TEXT,
    delivered_id BIGINT REFERENCES messages(id) ON DELETE SET NULL,
    error TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX reminders_user ON reminders(user_id, id);
-- the job's look-up: pending reminders, soonest first
CREATE INDEX reminders_due ON reminders(due_at) WHERE status = 'pending';
CREATE INDEX reminders_message_id ON reminders(message_id);
CREATE INDEX reminders_delivered_id ON reminders(delivered_id);
-- An outbox part sent as an approved WhatsApp template (its Content SID; `body` holds the template's variable):
-- a reminder outside WhatsApp's 24-hour window. NULL: a free-form message.
ALTER TABLE deliveries ADD COLUMN template TEXT;
