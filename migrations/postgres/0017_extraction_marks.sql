-- Automatic memory extraction (bot/extract_job.py; memory/sql_extract.py): one row per person, their watermark.
-- `seen_id`: the newest of the person's messages counted into `pending` (the scan of new messages goes on from
-- the highest seen_id of all rows); `pending`: their messages not yet sent to the extractor, as counted;
-- `done_id`: the newest message sent to the extractor whose answer was kept (the watermark: the next batch starts
-- after it, so a crash before an answer is kept sends the same messages again). `failures`: unusable answers or
-- failed models in a row for the current batch; `retry_at`: not before then; `extracted_at`: the last kept answer.
-- Deleting the person deletes the row.
CREATE TABLE extraction_marks (
    user_id bigint NOT NULL PRIMARY KEY REFERENCES users(id) ON DELETE CASCADE,
    seen_id bigint NOT NULL DEFAULT 0,
    pending bigint NOT NULL DEFAULT 0,
    done_id bigint NOT NULL DEFAULT 0,
    failures bigint NOT NULL DEFAULT 0,
    retry_at timestamptz,
    extracted_at timestamptz
);
CREATE INDEX extraction_marks_seen ON extraction_marks(seen_id);
-- Row-level security on every table, as migrations/postgres/0011_rls.sql explains: the daemon owns the table (not
-- FORCEd); anon and authenticated (Supabase) read no row and write none, since no policy grants them one; what RLS
-- does not gate (TRUNCATE, REFERENCES, TRIGGER) is revoked from them where those roles exist. No sequence here.
ALTER TABLE extraction_marks ENABLE ROW LEVEL SECURITY;
DO $$
DECLARE
    grantee text;
BEGIN
    FOREACH grantee IN ARRAY ARRAY['anon', 'authenticated'] LOOP
        CONTINUE WHEN NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = grantee);
        EXECUTE format('REVOKE TRUNCATE, REFERENCES, TRIGGER ON TABLE extraction_marks FROM %I', grantee);
    END LOOP;
END
$$;
