"""POST /v1/audio/transcriptions for the fake provider (tests/fakes/model_server.py), in OpenAI's wire shape.

Request (as the openai SDK sends it): multipart/form-data with a `file` part (the audio, its filename) and the
fields `model`, `response_format` ("json"), and optionally `language`, `prompt`, `temperature`. Answer: JSON
`{"text": "..."}` (OpenAI, Groq and the local Whisper servers answer this shape for response_format=json); errors
as the chat route sends them ({"error": {"message", "type", "param", "code"}}).

What the fake "hears": the audio's bytes after the `SPOKEN` marker, as UTF-8 (`audio("hello")` makes such bytes,
an Ogg header in front), or the scripted behaviour's text. Behaviours: the model server's usual ones (status,
rate_limited, slow, held).
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse, Response

from tests.fakes.model_behaviours import Behaviour

SPOKEN = b"\x00spoken:"
_ERROR_TYPE = {400: "invalid_request_error", 401: "invalid_request_error", 413: "invalid_request_error",
               429: "rate_limit_exceeded"}


def audio(words: str, padding: int = 0) -> bytes:
    """Bytes that stand for a voice note saying `words` (an Ogg page header, the words, `padding` zero bytes)."""
    return b"OggS\x00\x02" + SPOKEN + words.encode() + b"\x00" * padding


def heard(data: bytes) -> str:
    _, marker, rest = data.partition(SPOKEN)
    return rest.rstrip(b"\x00").decode("utf-8", "replace") if marker else ""


def answer(fields: dict[str, str], files: dict[str, tuple[str, bytes]], b: Behaviour) -> Response:
    """The fake's answer to one /v1/audio/transcriptions request under behaviour `b`."""
    if b.kind == "status":
        kind = _ERROR_TYPE.get(b.status, "server_error")
        return JSONResponse({"error": {"message": f"fake {b.status}", "type": kind, "param": None,
                                       "code": kind if b.status == 429 else None}},
                            status_code=b.status, headers=dict(b.headers))
    if "file" not in files or not fields.get("model"):
        return JSONResponse({"error": {"message": "file and model are required", "type": "invalid_request_error",
                                       "param": "file", "code": None}}, status_code=400)
    text = b.text if b.text is not None else heard(files["file"][1])
    body: dict[str, Any] = {"text": text}
    return JSONResponse(body)
