-- Every inbound delivery that is not a turn (a turn's message is deduplicated by messages' UNIQUE (surface,
-- external_id)): commands, refusals (too long, empty, not allowed, media the bot cannot read) and STOP / START,
-- recorded BEFORE the platform is acknowledged and before the command runs, so that a redelivery, in the same
-- process or after a restart, is never answered twice nor re-runs a command (memory/sql_inbound.py). `kind` says
-- what it was (command, refused, opt); rows older than HILO_INBOUND_RETENTION_DAYS are purged by the cleanup job.
CREATE TABLE inbound (
    surface TEXT NOT NULL,
    external_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (surface, external_id)
);
CREATE INDEX inbound_created ON inbound(created_at);
