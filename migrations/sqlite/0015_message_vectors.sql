-- One vector per message, of the embedder that made it (bot/embedders: `name`, `dim`): memory/vectors.py. A
-- changed embedder (another name) makes no row comparable: the rows of the old name are re-embedded by the
-- backfill (`hilo embed`) and the embed job, and replaced. `user_id` is the message's owner (kept in step when
-- people are linked: memory/sql_linking.py), so that search reads one person's rows and nobody else's.
-- SQLite: `vector` is a blob of `dim` little-endian float16 (half the bytes of float32; recall loss measured in
-- bench/vector_bench.py), searched per person with numpy (memory/dialect_sqlite.py keeps the person's matrix).
-- BIGINT, not INTEGER: not an alias of the rowid (the id is the message's, never this table's own).
CREATE TABLE message_vectors (
    message_id BIGINT NOT NULL PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE,
    user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    embedder TEXT NOT NULL,
    dim INTEGER NOT NULL,
    vector BLOB NOT NULL
);
CREATE INDEX message_vectors_user ON message_vectors(user_id, embedder, message_id);
