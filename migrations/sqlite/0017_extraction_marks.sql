-- Automatic memory extraction (bot/extract_job.py; memory/sql_extract.py): one row per person, their watermark.
-- `seen_id`: the newest of the person's messages counted into `pending` (the scan of new messages goes on from
-- the highest seen_id of all rows); `pending`: their messages not yet sent to the extractor, as counted;
-- `done_id`: the newest message sent to the extractor whose answer was kept (the watermark: the next batch starts
-- after it, so a crash before an answer is kept sends the same messages again). `failures`: unusable answers or
-- failed models in a row for the current batch; `retry_at`: not before then; `extracted_at`: the last kept answer.
-- Deleting the person deletes the row. The key is BIGINT, not INTEGER: an INTEGER PRIMARY KEY would be an alias
-- of the rowid, which defaults to a new number (Postgres' key has no default).
CREATE TABLE extraction_marks (
    user_id BIGINT NOT NULL PRIMARY KEY REFERENCES users(id) ON DELETE CASCADE,
    seen_id INTEGER NOT NULL DEFAULT 0,
    pending INTEGER NOT NULL DEFAULT 0,
    done_id INTEGER NOT NULL DEFAULT 0,
    failures INTEGER NOT NULL DEFAULT 0,
    retry_at TEXT,
    extracted_at TEXT
);
CREATE INDEX extraction_marks_seen ON extraction_marks(seen_id);
