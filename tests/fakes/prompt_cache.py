"""Prompt caching as the two providers account for it, for tests/fakes/model_server.py (tokens are words here).

Anthropic (docs: "Prompt caching"): a request marks where its cacheable prefix ends with `cache_control` on a
block; the prefix is everything before it in the order tools, system, messages, and it is cached only if it holds
at least the model's minimum (1,024 tokens for most models). The first request with that exact prefix writes it
(`cache_creation_input_tokens`), later ones read it (`cache_read_input_tokens`); `input_tokens` counts only the
rest. Only system blocks are marked by hilo, so the fake looks at tools and system.

OpenAI (docs: "Prompt caching"): automatic for prompts of 1,024 tokens or more: the longest prefix that an
earlier request of the same model began with is read from the cache, in steps of 128 tokens past the first
1,024; `usage.prompt_tokens` counts every token and `prompt_tokens_details.cached_tokens` the cached ones. The
fake compares whole messages.
"""

from __future__ import annotations

import json
import threading
from typing import Any


def words(value: Any) -> int:
    return len(str(value).split())


class PromptCache:
    def __init__(self, min_tokens: int = 1024) -> None:
        self.min_tokens = min_tokens
        self._lock = threading.Lock()
        self._anthropic: set[tuple[str, str]] = set()
        self._openai: dict[str, list[list[tuple[str, str]]]] = {}

    def reset(self, min_tokens: int = 1024) -> None:
        with self._lock:
            self.min_tokens = min_tokens
            self._anthropic.clear()
            self._openai.clear()

    def anthropic(self, model: str, body: dict[str, Any], tokens_in: int) -> dict[str, int]:
        """The usage's input fields for a request of `tokens_in` tokens in all."""
        system = body.get("system")
        blocks = system if isinstance(system, list) else []
        marked = [i for i, b in enumerate(blocks) if isinstance(b, dict) and b.get("cache_control")]
        usage = {"input_tokens": tokens_in, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        if not marked:
            return usage
        prefix = [body.get("tools") or [], [b.get("text", "") for b in blocks[: marked[-1] + 1]]]
        size = words(" ".join(prefix[1])) + sum(words(json.dumps(t)) for t in prefix[0])
        if size < self.min_tokens:
            return usage
        key = (model, json.dumps(prefix, sort_keys=True))
        with self._lock:
            seen = key in self._anthropic
            self._anthropic.add(key)
        usage["cache_read_input_tokens" if seen else "cache_creation_input_tokens"] = size
        usage["input_tokens"] = tokens_in - size
        return usage

    def openai(self, model: str, messages: list[dict[str, Any]]) -> int:
        """The cached tokens of this request's prompt."""
        prompt = [(str(m.get("role")), str(m.get("content", ""))) for m in messages]
        with self._lock:
            earlier = self._openai.setdefault(model, [])
            best = 0
            for other in earlier:
                common = 0
                for mine, theirs in zip(prompt, other, strict=False):
                    if mine != theirs:
                        break
                    common += words(mine[1])
                best = max(best, common)
            earlier.append(prompt)
        if best < max(self.min_tokens, 1024):
            return 0
        return 1024 + (best - 1024) // 128 * 128
