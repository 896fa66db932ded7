-- The retention policy (issue 13, data; HILO_RETENTION_DAYS): the `retention` job deletes messages older than a
-- surface's number of days, with what is derived from them (vectors, search terms, episodes left empty), a batch
-- per transaction, and each batch that deleted something is one row here, with its counts: what `hilo stats`
-- shows of it. No person is named in a row.
CREATE TABLE retention_runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ran_at TEXT NOT NULL,
    surface TEXT NOT NULL,
    days INTEGER NOT NULL,
    messages INTEGER NOT NULL,
    vectors INTEGER NOT NULL,
    episodes INTEGER NOT NULL
);
CREATE INDEX retention_runs_ran_at ON retention_runs(ran_at);
-- the job's look-up: a surface's messages older than its cut-off, oldest first
CREATE INDEX messages_surface_created_at ON messages(surface, created_at);
