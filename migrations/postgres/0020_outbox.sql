-- The outbox (issue 12 item 3): `deliveries` (0005, one row per part with the provider's id and status)
-- becomes the queue too. A reply's parts are written as rows of status 'pending' in the transaction that stores
-- the reply; the sender (bot/outbox.py) claims a recipient's first undelivered part ('sending', with a lease),
-- sends it and records 'sent' with the provider's id, or 'pending' again with the next attempt's time, or
-- 'failed'. Rows from before this migration are sent or failed parts and keep their meaning.
ALTER TABLE deliveries ADD COLUMN body text;
ALTER TABLE deliveries ADD COLUMN reply_to text;
ALTER TABLE deliveries ADD COLUMN next_at timestamptz;
ALTER TABLE deliveries ADD COLUMN lease_owner text;
ALTER TABLE deliveries ADD COLUMN lease_until timestamptz;
-- a recipient's undelivered parts in order (the claim's head check) and the due ones (the claim itself)
CREATE INDEX deliveries_queue ON deliveries(surface, recipient, id) WHERE status IN ('pending', 'sending');
-- recovery (bot/job_list.py): the person's messages of a time window, newest last
CREATE INDEX messages_user_created_at ON messages(created_at) WHERE role = 'user';
