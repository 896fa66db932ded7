-- Whose delivery an inbound record is (issue 13, data): `sender` is the identity's id on its surface (the
-- InboundMessage's sender), so that `hilo forget` deletes a person's records with everything else (a Telegram
-- record's external_id holds the chat's id). NULL for records from before this migration: the cleanup job purges
-- them within HILO_INBOUND_RETENTION_DAYS.
ALTER TABLE inbound ADD COLUMN sender TEXT;
CREATE INDEX inbound_sender ON inbound(surface, sender);
