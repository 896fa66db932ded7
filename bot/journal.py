"""The inbound journal: messages the database could not take, kept on local disk until it can.

When `ingest` fails with a StoreError (the database is down, locked past its timeout, full), bot/intake.py
appends the normalized InboundMessage here as one JSON line, fsync'd BEFORE the platform is acknowledged, and
replays the lines into the database, in order, when it returns (its process's replayer: at start, then every 2 s); a
replayed message is deduplicated by (surface, external_id) like any redelivery, so a replay cut short by a crash
is simply done again. Replayed lines are dropped by rewriting the file with what is left (a temporary file,
fsync'd, renamed over it).

The file holds what people said: it is created 0600 in HILO_DATA_DIR (made 0700 when missing), and nothing of
its content is ever logged (sizes and counts only). It is bounded by HILO_JOURNAL_MAX_BYTES: an append that
would pass the bound raises JournalFull, and the surface answers 503 so the platform retries later.
"""

from __future__ import annotations

import asyncio
import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from kernel import log
from kernel.errors import JournalFull
from kernel.types import InboundMessage

logger = log.get("hilo.journal")

FILE = "inbound.journal"


def dump(msg: InboundMessage) -> bytes:
    """One journal line (client_ip is never kept: it is not stored in the database either)."""
    record: dict[str, Any] = {
        "surface": msg.surface, "sender": msg.sender, "external_id": msg.external_id, "text": msg.text,
        "received_at": msg.received_at.isoformat(), "conversation_ref": msg.conversation_ref,
        "metadata": msg.metadata, "handle": msg.handle, "language": msg.language,
    }
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str).encode() + b"\n"


def load(line: bytes) -> InboundMessage:
    r = json.loads(line)
    return InboundMessage(
        surface=r["surface"], sender=r["sender"], external_id=r["external_id"], text=r["text"],
        received_at=datetime.fromisoformat(r["received_at"]), conversation_ref=r.get("conversation_ref"),
        metadata=r.get("metadata") or {}, handle=r.get("handle"), language=r.get("language"),
    )


class Journal:
    """An append-only file of InboundMessages. Appends and compactions are serialized (one lock); the file
    work runs on a thread, never on the event loop."""

    def __init__(self, directory: str | Path, max_bytes: int) -> None:
        self.directory = Path(directory)
        self.path = self.directory / FILE
        self.max_bytes = max_bytes
        self._lock = asyncio.Lock()

    def size(self) -> int:
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0

    async def append(self, msg: InboundMessage) -> None:
        """Keep `msg` durably (written and fsync'd when this returns). JournalFull past the bound."""
        line = dump(msg)
        async with self._lock:
            size = self.size()
            if size + len(line) > self.max_bytes:
                logger.error("journal.full", bytes=size, max_bytes=self.max_bytes, line_bytes=len(line),
                             fix="the database is refusing messages and the journal is full: the platform got "
                                 "503 and retries; bring the database back, or raise HILO_JOURNAL_MAX_BYTES")
                raise JournalFull("the inbound journal is full")
            await asyncio.to_thread(self._write, line)
        logger.warning("journal.kept", surface=msg.surface, bytes=len(line), journal_bytes=size + len(line))

    def _write(self, line: bytes) -> None:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    async def pending(self) -> list[InboundMessage | None]:
        """The kept messages, oldest first, one per line (None: a line that cannot be read, logged). A torn
        last line, from a crash mid-append, is not one: it was never acknowledged."""
        async with self._lock:
            raw = await asyncio.to_thread(self._read)
        out: list[InboundMessage | None] = []
        for line in raw:
            try:
                out.append(load(line))
            except (ValueError, KeyError, TypeError):
                logger.error("journal.unreadable_line", bytes=len(line))
                out.append(None)
        return out

    def _read(self) -> list[bytes]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        lines = data.split(b"\n")
        return [line for line in lines[:-1] if line]  # the last piece has no newline: torn or empty

    async def drop(self, count: int) -> None:
        """Drop the first `count` lines (replayed): the rest is rewritten, fsync'd and renamed over the file;
        an emptied journal is deleted."""
        async with self._lock:
            await asyncio.to_thread(self._compact, count)

    def _compact(self, count: int) -> None:
        lines = self._read()
        rest = lines[count:]
        if not rest:
            self.path.unlink(missing_ok=True)
        else:
            tmp = self.path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, b"".join(line + b"\n" for line in rest))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
