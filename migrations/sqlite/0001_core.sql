-- People, how each surface knows them, their conversations, messages and model calls.
-- Timestamps are fixed-width UTC ISO text ('YYYY-MM-DDTHH:MM:SS.ffffffZ'): text order is time order.
-- AUTOINCREMENT: ids are never reused after `hilo forget`, as with Postgres sequences.

CREATE TABLE users (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    handle TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL
);

CREATE TABLE identities (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    surface TEXT NOT NULL,
    external_user_id TEXT NOT NULL,
    user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    created_at TEXT NOT NULL,
    UNIQUE (surface, external_user_id)
);
CREATE INDEX identities_user ON identities(user_id);

CREATE TABLE conversations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    surface TEXT NOT NULL,
    title TEXT,
    singleton INTEGER NOT NULL DEFAULT 0 CHECK (singleton IN (0, 1)),
    -- the "conversation" key of `hilo import` (web conversations), NULL otherwise
    external_ref TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
-- One conversation per (user, surface) on Telegram, WhatsApp and the CLI.
CREATE UNIQUE INDEX conversations_singleton ON conversations(user_id, surface) WHERE singleton = 1;
CREATE UNIQUE INDEX conversations_external_ref ON conversations(user_id, surface, external_ref)
    WHERE external_ref IS NOT NULL;
CREATE INDEX conversations_user_updated ON conversations(user_id, updated_at);

CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    surface TEXT NOT NULL,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    token_count INTEGER NOT NULL DEFAULT 0,
    external_id TEXT,
    created_at TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    -- the user message an assistant message answers; no FOREIGN KEY on purpose: a self-reference would make
    -- every cascaded delete look up children, and both ends always go together with their conversation
    reply_to INTEGER,
    -- redeliveries drop here (restart-safe); NULL external_ids (replies, some imports) never collide
    UNIQUE (surface, external_id)
);
CREATE INDEX messages_user_created ON messages(user_id, created_at);
CREATE INDEX messages_conversation ON messages(conversation_id, id);

CREATE TABLE model_calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    -- the user message of the turn
    message_id INTEGER REFERENCES messages(id) ON DELETE CASCADE,
    user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    model TEXT NOT NULL,
    provider TEXT NOT NULL,
    tokens_in INTEGER NOT NULL DEFAULT 0,
    tokens_out INTEGER NOT NULL DEFAULT 0,
    latency_ms INTEGER NOT NULL DEFAULT 0,
    outcome TEXT NOT NULL,
    fallback_from TEXT,
    error TEXT,
    created_at TEXT NOT NULL
);
CREATE INDEX model_calls_user ON model_calls(user_id, id);
CREATE INDEX model_calls_message ON model_calls(message_id);
