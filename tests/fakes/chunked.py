"""A chunked upload over a real socket that reads the answer while it sends, as curl and browsers do.

httpx (httpcore) sends a whole request body before it reads any of the answer, so with it "when did the
answer come" is always "after everything was sent". This client writes `Transfer-Encoding: chunked` pieces
from a generator in one task and reads the status line in another; `Upload.sent_at_answer` is how many body
bytes the generator had yielded when the status line arrived.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from dataclasses import dataclass

BLOCK = 64 * 1024


@dataclass(frozen=True, slots=True)
class Upload:
    status: int          # 0: the connection ended without an answer
    sent_at_answer: int  # body bytes yielded by the generator when the status line arrived
    total: int           # body bytes the generator would have yielded in all


def blocks(total: int, counter: list[int]) -> Iterator[bytes]:
    """`total` bytes of JSON-looking filler in BLOCK pieces; counter[0] counts what was yielded."""
    block = b'{"text": "' + b"x" * (BLOCK - 10)
    for _ in range(total // BLOCK):
        counter[0] += len(block)
        yield block


async def chunked_upload(host: str, port: int, path: str, total: int, *,
                         headers: dict[str, str] | None = None) -> Upload:
    """POST `total` bytes to `path` in chunks; stop sending when the answer's status line arrives."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BLOCK)  # little in flight: the count stays honest
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, port))
    reader, writer = await asyncio.open_connection(sock=sock)
    head = {"host": f"{host}:{port}", "transfer-encoding": "chunked", "content-type": "application/json",
            **(headers or {})}
    writer.write(f"POST {path} HTTP/1.1\r\n".encode()
                 + b"".join(f"{k}: {v}\r\n".encode() for k, v in head.items()) + b"\r\n")
    counter = [0]

    async def send() -> None:
        with contextlib.suppress(ConnectionError):
            for block in blocks(total, counter):
                writer.write(f"{len(block):x}\r\n".encode() + block + b"\r\n")
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    sender = asyncio.create_task(send())
    try:
        line = await reader.readline()
    except ConnectionError:
        line = b""
    sent = counter[0]
    sender.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await sender
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()
    parts = line.split()
    return Upload(int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0, sent, total)
