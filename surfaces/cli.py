"""The terminal surface (`hilo chat`): a line typed by an operator becomes one InboundMessage.

The person is named by handle (`--user`), and the message is filed under `--surface` (default "cli"), so an
operator can play a Telegram or WhatsApp user from the terminal. Each line gets a fresh external id.
"""

from __future__ import annotations

import asyncio
import sys
import uuid

from bot.pipeline import Pipeline
from kernel import catalog
from kernel.errors import InputError, StoreError
from kernel.types import InboundMessage


def inbound(handle: str, surface: str, text: str, conversation_ref: str | None = None) -> InboundMessage:
    return InboundMessage(
        surface=surface, sender=handle, external_id=f"cli-{uuid.uuid4().hex}", text=text,
        conversation_ref=conversation_ref, handle=handle,
    )


async def one_turn(pipeline: Pipeline, handle: str, surface: str, text: str) -> int:
    """One full turn; prints the reply. Exit code 0 on an answer, 1 when every model failed, input was refused or the
    database could not take it (the REPL reads on)."""
    try:
        conversation_ref = None
        if surface == "web":  # the web has many conversations: the terminal continues the latest one
            latest = await pipeline.history.latest_conversation(handle, "web")
            conversation_ref = str(latest) if latest is not None else None
        out = await pipeline.handle(inbound(handle, surface, text, conversation_ref))
    except InputError as exc:
        print(catalog.t(exc.key, None, **exc.params), file=sys.stderr)
        return 1
    except StoreError as exc:  # down, locked, full or broken: the operator sees why
        print(f"{catalog.t('store_unavailable', None)}\nhilo: {exc}", file=sys.stderr)
        return 1
    print(out.text)
    return 0 if out.status in ("ok", "command") else 1


async def chat(pipeline: Pipeline, handle: str, surface: str, message: str | None) -> int:
    """`hilo chat` (the `chat` entry point of `hilo.terminal`): one turn for `message`, else a REPL."""
    if message is not None:
        return await one_turn(pipeline, handle, surface, message)
    return await repl(pipeline, handle, surface)


async def repl(pipeline: Pipeline, handle: str, surface: str) -> int:
    """Read lines until EOF; stdin is read in a thread so the loop never blocks."""
    interactive = sys.stdin.isatty()
    while True:
        if interactive:
            print("you> ", end="", flush=True)
        line = await asyncio.to_thread(sys.stdin.readline)
        if not line:
            return 0
        if line.strip():
            await one_turn(pipeline, handle, surface, line.rstrip("\n"))
