-- A person can ask a surface to stop writing to them (WhatsApp STOP) until they ask again (START).
ALTER TABLE identities ADD COLUMN opted_out_at timestamptz;
