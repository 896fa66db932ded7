-- What a model call was for: a turn's answer ('turn', every row before this migration), or the background jobs'
-- memory extraction ('extract', bot/extract_job.py) and episode summaries ('summary', bot/summary_job.py), whose
-- rows have no message_id (they answer no turn), so that cost accounting sees every call.
ALTER TABLE model_calls ADD COLUMN purpose TEXT NOT NULL DEFAULT 'turn' CHECK (purpose IN ('turn', 'extract', 'summary'));
