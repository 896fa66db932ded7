-- Linking with consent on both sides. A code keeps who asked for it and where (their display name, shown to
-- whoever redeems it before they confirm; their language and conversation, where they are told who joined)
-- and the identity that was last shown that prompt: only that identity can confirm.
ALTER TABLE link_codes ADD COLUMN owner_name TEXT;
ALTER TABLE link_codes ADD COLUMN language TEXT;
ALTER TABLE link_codes ADD COLUMN conversation_ref TEXT;
ALTER TABLE link_codes ADD COLUMN prompted_surface TEXT;
ALTER TABLE link_codes ADD COLUMN prompted_external_user_id TEXT;
