-- Issue 15 item 5: the time zone a person is in (an IANA name: "Europe/Madrid"), for the time tool and reminders.
-- Set by the person (/timezone, the set_timezone tool) or by the web widget's browser zone; NULL: not known (UTC).
ALTER TABLE users ADD COLUMN timezone TEXT;
