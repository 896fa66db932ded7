"""Reading a request body for every route that takes one: the web API, the Telegram and Twilio webhooks.

`read_body` stops at the cap: a body that declares a bigger Content-Length is refused before a byte is read,
and a streamed (chunked) one as soon as it passes the cap, so what is held never exceeds it (uvicorn itself
pauses the socket past 64 KiB unread). After the 413 uvicorn discards whatever else the client sends without
holding it. The connection is kept, not closed: closing a socket with unread data sends a reset, which can
destroy the 413 before the client reads it (measured here: clients got no answer at all).

`parse_json` turns the body into Python values, or raises `BadJson` with the catalogue key to answer with:
not JSON at all, JSON nested deeper than any real request (which would also exhaust the parser's
recursion), or a string holding a lone UTF-16 surrogate (valid JSON escapes like "\\ud800" that no text
encoding can store or send).
"""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.requests import Request

from kernel.errors import HiloError

#: Deeper than any Telegram update or web message body (those are under 10 levels).
MAX_DEPTH = 32
_SURROGATE = re.compile("[\ud800-\udfff]")


class BodyTooLarge(HiloError):
    """The body is over `limit` bytes (declared so, or found so while reading)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"request body over {limit} bytes")
        self.limit = limit


class BadJson(HiloError, ValueError):
    """The body cannot be taken as JSON: `key` is the catalogue text for it, `params` its values."""

    def __init__(self, key: str, **params: object) -> None:
        super().__init__(key)
        self.key = key
        self.params = params


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, at most `limit` bytes. BodyTooLarge past it; starlette's ClientDisconnect if the
    client goes away."""
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or len(length) > 20 or int(length) > limit):
        raise BodyTooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def parse_json(body: bytes) -> Any:
    """The JSON value of `body`, checked: BadJson("bad_request" | "too_deeply_nested" | "invalid_characters")."""
    try:
        data = json.loads(body)
    except RecursionError:
        raise BadJson("too_deeply_nested", limit=MAX_DEPTH) from None
    except ValueError:  # also UnicodeDecodeError, and integers past Python's 4,300-digit limit
        raise BadJson("bad_request", detail="the body is not JSON") from None
    _check(data)
    return data


def _check(data: Any) -> None:
    """Walk the value without recursion: depth, and every string (keys too) for lone surrogates."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if not value.isascii() and _SURROGATE.search(value):
                raise BadJson("invalid_characters")
            continue
        if isinstance(value, dict):
            items: list[Any] = [*value.keys(), *value.values()]
        elif isinstance(value, list):
            items = value
        else:
            continue
        if depth > MAX_DEPTH:
            raise BadJson("too_deeply_nested", limit=MAX_DEPTH)
        stack.extend((item, depth + 1) for item in items)
