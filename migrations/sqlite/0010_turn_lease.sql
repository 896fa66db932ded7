-- One active turn per conversation, across processes (two `hilo` processes on one file): a lease on the
-- conversation row (memory/turn_lease.py). `turn_owner` names the turn that holds it, `turn_expires_at` is when
-- it lapses unless renewed (a process that died leaves a lease that the next turn takes over once expired).
ALTER TABLE conversations ADD COLUMN turn_owner TEXT;
ALTER TABLE conversations ADD COLUMN turn_expires_at TEXT;
