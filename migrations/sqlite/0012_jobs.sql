-- Background jobs (bot/jobs.py schedules them, memory/jobs.py claims them): one row per job, named after it.
-- A run is claimed with a lease, so that ONE process of many runs it: `owner` names the run that holds it and
-- `expires_at` is when it lapses unless renewed (a process that died leaves a lease that is taken over once
-- expired). `due_at` is when the job is next due (NULL: only on demand); `requested_at`, an on-demand request
-- that came while it ran (it runs again right after). The last run: when it started and finished, its outcome
-- (ok, failed, cancelled, lost), the type of its error (never its text), how long it took, and how many runs so far.
CREATE TABLE jobs (
    name TEXT NOT NULL PRIMARY KEY,
    owner TEXT,
    expires_at TEXT,
    due_at TEXT,
    requested_at TEXT,
    started_at TEXT,
    finished_at TEXT,
    outcome TEXT,
    error TEXT,
    duration_ms INTEGER,
    runs INTEGER NOT NULL DEFAULT 0
);
