-- Verified identity linking: one-time codes, failed attempts per identity (lockout), and an audit trail.
-- Codes are stored as SHA-256 hashes: a copy of the database does not hand out working codes.
CREATE TABLE link_codes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    code_hash TEXT NOT NULL UNIQUE,
    user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    -- the identity that asked for the code: it can never redeem it itself
    surface TEXT NOT NULL,
    external_user_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    used_at TEXT,
    attempts INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX link_codes_user ON link_codes(user_id);

CREATE TABLE link_failures (
    surface TEXT NOT NULL,
    external_user_id TEXT NOT NULL,
    failures INTEGER NOT NULL DEFAULT 0,
    window_start TEXT NOT NULL,
    locked_until TEXT,
    PRIMARY KEY (surface, external_user_id)
);

CREATE TABLE identity_audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    -- `hilo forget` deletes a person's audit rows too: they name the person's identities
    user_id INTEGER REFERENCES users(id) ON DELETE CASCADE,
    action TEXT NOT NULL,
    surface TEXT NOT NULL,
    external_user_id TEXT NOT NULL,
    actor TEXT NOT NULL,
    detail TEXT,
    created_at TEXT NOT NULL
);
CREATE INDEX identity_audit_user ON identity_audit(user_id, id);
