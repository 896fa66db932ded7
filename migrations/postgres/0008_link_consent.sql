-- Linking with consent on both sides. A code keeps who asked for it and where (their display name, shown to
-- whoever redeems it before they confirm; their language and conversation, where they are told who joined)
-- and the identity that was last shown that prompt: only that identity can confirm.
ALTER TABLE link_codes ADD COLUMN owner_name text;
ALTER TABLE link_codes ADD COLUMN language text;
ALTER TABLE link_codes ADD COLUMN conversation_ref text;
ALTER TABLE link_codes ADD COLUMN prompted_surface text;
ALTER TABLE link_codes ADD COLUMN prompted_external_user_id text;
