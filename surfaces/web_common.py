"""Pieces the web API's modules share: localized JSON errors, reading a message body, message JSON."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse

from bot import metrics
from kernel import catalog
from kernel.types import StoredMessage
from kernel.zones import zone_name
from surfaces.http_body import BadJson, BodyTooLarge, parse_json, read_body

#: Ids are 64-bit signed integers in every backend.
MAX_ID = 2**63


def path_id(raw: str, prefix: str = "") -> int | None:
    """A row id from a URL path segment: digits (after `prefix`, any case, when given: "m12"), in (0, MAX_ID);
    None for anything else. Digits are checked before int(): thousands of them cost time (and past 4,300 raise)."""
    if prefix and raw[:len(prefix)].lower() == prefix:
        raw = raw[len(prefix):]
    if raw.isascii() and raw.isdigit() and len(raw) <= len(str(MAX_ID)) and 0 < int(raw) < MAX_ID:
        return int(raw)
    return None
MAX_BODY_BYTES = 64 * 1024


def lang(request: Request) -> str:
    return catalog.language(request.headers.get("accept-language"))


#: What a 503 tells the client to wait before trying again (Retry-After): a database that is down, full or
#: read-only, or a daemon that is stopping (another process, or this one restarted, takes the retry).
RETRY_AFTER_S = 5


def unavailable(request: Request, key: str = "store_unavailable") -> JSONResponse:
    """503 with Retry-After and the catalogue's `key` text: never a 500 for a database or a stop in the way."""
    response = error(request, 503, key, seconds=RETRY_AFTER_S)
    response.headers["retry-after"] = str(RETRY_AFTER_S)
    return response


def error(request: Request, status: int, key: str, **params: object) -> JSONResponse:
    """`{"error": key, "message": <catalogue text in the caller's language>}` with `status`."""
    body: dict[str, Any] = {"error": key, "message": catalog.t(key, lang(request), **params)}
    if "seconds" in params:
        body["retry_after"] = params["seconds"]
    return JSONResponse(body, status_code=status)


@dataclass(frozen=True, slots=True)
class MessageBody:
    """A valid `{"text", "conversation_id"?, "client_message_id"?, "timezone"?}` (`timezone`: the browser's
    IANA time zone, kept when this machine knows it, else dropped: it never refuses a message)."""

    text: str
    conversation_id: int | None
    client_message_id: str | None
    timezone: str | None = None


async def read_message(request: Request) -> MessageBody | JSONResponse:
    """The body of a message POST, or the error response to answer with."""
    try:
        data = parse_json(await read_body(request, MAX_BODY_BYTES))
    except BodyTooLarge as exc:
        metrics.refused("web", "too_large")
        return error(request, 413, "payload_too_large", limit=exc.limit)
    except BadJson as exc:
        return error(request, 400, exc.key, **exc.params)
    except ClientDisconnect:
        return error(request, 400, "bad_request", detail="the body was cut off")
    if not isinstance(data, dict) or not isinstance(data.get("text"), str):
        return error(request, 400, "bad_request", detail='send {"text": "..."}')
    conversation_id = data.get("conversation_id")
    if conversation_id is not None and (
            isinstance(conversation_id, bool) or not isinstance(conversation_id, int)):
        return error(request, 400, "bad_request", detail="conversation_id must be a number")
    if conversation_id is not None and not 0 < conversation_id < MAX_ID:
        return error(request, 404, "not_found")  # no such conversation can exist
    client_id = data.get("client_message_id")
    if client_id is not None and (
            not isinstance(client_id, str) or not 0 < len(client_id) <= 100 or "\x00" in client_id):
        # NUL: Postgres cannot store it, and an id is not altered (two ids must never become one)
        return error(request, 400, "bad_request", detail="client_message_id must be a short string without NUL")
    return MessageBody(data["text"], conversation_id, client_id, zone_name(data.get("timezone")))


def message_json(m: StoredMessage) -> dict[str, Any]:
    return {
        "id": m.id, "role": m.role, "content": m.content, "surface": m.surface,
        "created_at": m.created_at.isoformat(), "reply_to": m.reply_to,
    }
