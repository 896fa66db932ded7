"""Round trips on the wire to Postgres, counted by a loopback proxy (bench/context_bench.py's counting pass).

The proxy listens on 127.0.0.1 and forwards to the embedded server's unix socket. A round trip is the client
speaking after the server did (or first): asyncpg sends Parse/Bind/Execute/Sync of one query in one write, so a
query is one round trip, and so is a BEGIN, a COMMIT, a pool's reset on release, or a statement prepared anew.
The proxy adds latency, so timings are never taken through it: only counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
from collections.abc import AsyncIterator
from urllib.parse import parse_qs, urlsplit


class WireCounter:
    def __init__(self) -> None:
        self.round_trips = 0


def _socket_path(dsn: str) -> str:
    host = parse_qs(urlsplit(dsn).query)["host"][0]
    [path] = [p for p in glob.glob(f"{host}/.s.PGSQL.*") if not p.endswith(".lock")]
    return path


@contextlib.asynccontextmanager
async def counting_proxy(dsn: str | tuple[str, int]) -> AsyncIterator[tuple[str, WireCounter]]:
    """(a DSN through the proxy, its counter) for the embedded server at `dsn` (a unix-socket DSN), or for a
    server listening on (host, port) (a pooler: pgbouncer)."""
    socket_path = _socket_path(dsn) if isinstance(dsn, str) else None
    counter = WireCounter()
    tasks: set[asyncio.Task[None]] = set()

    async def handle(c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        if socket_path is not None:
            s_reader, s_writer = await asyncio.open_unix_connection(socket_path)
        else:
            assert not isinstance(dsn, str)
            s_reader, s_writer = await asyncio.open_connection(*dsn)
        server_spoke = [True]

        async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, from_client: bool) -> None:
            try:
                while data := await reader.read(65536):
                    if from_client and server_spoke[0]:
                        counter.round_trips += 1
                    server_spoke[0] = not from_client
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                writer.close()

        both = [asyncio.ensure_future(pump(c_reader, s_writer, True)),
                asyncio.ensure_future(pump(s_reader, c_writer, False))]
        tasks.update(both)
        await asyncio.gather(*both, return_exceptions=True)
        tasks.difference_update(both)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres", counter
    finally:
        server.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
