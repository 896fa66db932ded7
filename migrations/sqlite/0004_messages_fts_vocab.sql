-- Document frequency of every indexed term, read before a search so that terms found in a large share of
-- all messages (which BM25 weighs near zero, yet whose every row it must score) are left out of the query.
CREATE VIRTUAL TABLE messages_fts_vocab USING fts5vocab(messages_fts, 'row');
