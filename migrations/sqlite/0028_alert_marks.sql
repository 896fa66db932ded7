-- Alerts (issue 13 item 4; bot/alerts.py): when each kind of alert was last sent, so that every process on one
-- database keeps to one alert per kind per HILO_ALERT_MIN_INTERVAL. Taking a kind's turn is one upsert that
-- returns the row only when the last one is older than the interval. No person's data: kinds and times only.
CREATE TABLE alert_marks (
    kind TEXT NOT NULL PRIMARY KEY,
    sent_at TEXT NOT NULL
);
