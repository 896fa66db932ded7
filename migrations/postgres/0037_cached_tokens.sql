-- Issue 15 item 7: prompt caching. Of a call's tokens_in, those the provider read from its prompt cache (OpenAI's
-- prompt_tokens_details.cached_tokens, Anthropic's cache_read_input_tokens), priced at the cached-input price.
ALTER TABLE model_calls ADD COLUMN tokens_cached integer NOT NULL DEFAULT 0;
