-- One active turn per conversation, across processes and through a transaction pooler: a lease on the
-- conversation row (memory/turn_lease.py). `turn_owner` names the turn that holds it, `turn_expires_at` is when
-- it lapses unless renewed (a process that died leaves a lease that the next turn takes over once expired).
-- Session advisory locks did this before; behind pgbouncer or Supabase's port 6543 they land on another session.
ALTER TABLE conversations ADD COLUMN turn_owner text;
ALTER TABLE conversations ADD COLUMN turn_expires_at timestamptz;
