"""The offline `echo` model: a visible dry run, so the whole daemon runs on a machine with no model key.

It answers with what it received (the last user message, the context size per block) and, verbatim, every line
it was given as recalled memory or cross-surface history, so a person (or a test) can see what hilo remembered:

    [echo: dry run, no model configured] You said: hello
    Context: 6 messages, 412 tokens (system 1, memory 2, cross_surface 1, conversation 2).
    Recalled:
    - my dog is called Rufo

No SDK, no network, no sleep.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from functools import lru_cache

from bot.models.base import Completion
from kernel import tokens
from kernel.types import ChatMessage

PREFIX = "[echo: dry run, no model configured]"
RECALL_BLOCKS = ("memory", "cross_surface")
_CHUNK_WORDS = 3


@lru_cache(maxsize=2048)
def _count(text: str) -> int:
    # The system prompt and a conversation's earlier turns come back every turn: counted once each (py-spy of
    # `hilo serve` at c=8: counting the context was 20-25% of the event loop).
    return tokens.count(text)


def _total(messages: Sequence[ChatMessage]) -> int:
    # a stored message's count comes with it (the assembler's): only the rest is counted here, the blocks built
    # for this turn (py-spy of `hilo serve` at c=1: 7% of the loop counted conversations that had outgrown the cache)
    return sum(m.tokens if m.tokens is not None else _count(m.content) for m in messages)


def _block_of(message: ChatMessage) -> str:
    if message.block:
        return message.block
    return "system" if message.role == "system" else "conversation"


def render(messages: Sequence[ChatMessage], total: int | None = None) -> str:
    """The dry-run reply for `messages` (`total`: their tokens, when the caller has counted them)."""
    said = next((m.content for m in reversed(messages) if m.role == "user"), "")
    per_block: dict[str, int] = {}
    for message in messages:
        block = _block_of(message)
        per_block[block] = per_block.get(block, 0) + 1
    if total is None:
        total = _total(messages)
    blocks = ", ".join(f"{name} {n}" for name, n in per_block.items())
    lines = [
        f"{PREFIX} You said: {said}",
        f"Context: {len(messages)} messages, {total} tokens ({blocks}).",
    ]
    recalled: list[str] = []
    for message in messages:
        if message.block not in RECALL_BLOCKS:
            continue
        # The first line of a context block is its header ("What you know about this person ..."): skip it.
        for line in message.content.splitlines()[1:]:
            if line.strip():
                recalled.append(line if line.lstrip().startswith("-") else f"- {line}")
    if recalled:
        lines.append("Recalled:")
        lines.extend(recalled)
    else:
        lines.append("Recalled: nothing.")
    return "\n".join(lines)


def _chunks(text: str) -> list[str]:
    # Split after every few words, keeping the whitespace, so the chunks join back to exactly `text`.
    pieces = re.findall(r"\S+\s*|\s+", text)
    return ["".join(pieces[i:i + _CHUNK_WORDS]) for i in range(0, len(pieces), _CHUNK_WORDS)] or [""]


class EchoProvider:
    """The offline provider; every model name answers the same way."""

    name = "echo"

    async def complete(self, model: str, messages: Sequence[ChatMessage], *, timeout: float) -> Completion:
        # counted once, for the reply and for tokens_in (it was twice: half the loop's time under load)
        total = _total(messages)
        text = render(messages, total)
        return Completion(text, total, tokens.count(text))

    async def stream(
        self, model: str, messages: Sequence[ChatMessage], *, timeout: float,
    ) -> AsyncIterator[str | Completion]:
        completion = await self.complete(model, messages, timeout=timeout)
        for chunk in _chunks(completion.text):
            yield chunk
        yield completion

    async def aclose(self) -> None:
        return None
