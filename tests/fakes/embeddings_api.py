"""POST /v1/embeddings for the fake provider (tests/fakes/model_server.py), in OpenAI's wire shape.

Request (as the openai SDK sends it): {"model", "input": str | [str, ...], "encoding_format": "base64" | "float",
["dimensions"]}. Answer: {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [floats] or
base64 of little-endian float32}], "model", "usage": {"prompt_tokens", "total_tokens"}}; errors as the chat route
sends them ({"error": {"message", "type", "param", "code"}}).

Vectors are `DIM` (or `dimensions`) floats made from the text's SHA-256, so the same text always gets the same
vector and different texts different ones (`vector_of` is what a test compares with). Behaviours: the model
server's usual ones (status, rate_limited, slow, cut, replay), plus `out_of_order()` (data sent last index first,
which the API allows: clients must order by `index`) and `floats_only()` (a compatible server that ignores
`encoding_format` and always sends float lists).
"""

from __future__ import annotations

import base64
import hashlib
import struct
from typing import Any

from starlette.responses import JSONResponse, Response

from tests.fakes.model_behaviours import Behaviour, replayed

DIM = 8
_ERROR_TYPE = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error",
               429: "rate_limit_exceeded"}


def vector_of(text: str, dim: int = DIM) -> list[float]:
    """The fake's vector for `text`: float32 values in [-1, 1) from its SHA-256 (not unit length)."""
    digest = b""
    counter = 0
    while len(digest) < dim * 2:
        digest += hashlib.sha256(f"{counter}:{text}".encode()).digest()
        counter += 1
    return [struct.unpack("<f", struct.pack("<f", (int.from_bytes(digest[2 * i:2 * i + 2], "little") - 32768)
                                            / 32768))[0] for i in range(dim)]


def out_of_order() -> Behaviour:
    return Behaviour("ok", text="out_of_order")


def floats_only() -> Behaviour:
    return Behaviour("ok", text="floats_only")


def answer(body: dict[str, Any], b: Behaviour) -> Response:
    """The fake's answer to one /v1/embeddings request under behaviour `b`."""
    if b.kind == "status":
        kind = _ERROR_TYPE.get(b.status, "server_error")
        return JSONResponse({"error": {"message": f"fake {b.status}", "type": kind, "param": None,
                                       "code": kind if b.status == 429 else None}},
                            status_code=b.status, headers=dict(b.headers))
    if b.kind == "replay":
        return replayed(b, False, None)
    if b.kind == "cut":
        return Response(b'{"object": "list", "data": [{"obj', media_type="application/json")
    inputs = body.get("input")
    texts = [inputs] if isinstance(inputs, str) else list(inputs or [])
    if not texts or any(not isinstance(t, str) or not t for t in texts):  # OpenAI refuses empty inputs
        return JSONResponse({"error": {"message": "'$.input' is invalid.", "type": "invalid_request_error",
                                       "param": None, "code": None}}, status_code=400)
    dim = int(body.get("dimensions") or DIM)
    as_base64 = body.get("encoding_format") == "base64" and b.text != "floats_only"
    data = []
    for index, text in enumerate(texts):
        vector = vector_of(text, dim)
        embedding: Any = (base64.b64encode(struct.pack(f"<{dim}f", *vector)).decode() if as_base64 else vector)
        data.append({"object": "embedding", "index": index, "embedding": embedding})
    if b.text == "out_of_order":
        data.reverse()
    tokens = sum(len(t.split()) for t in texts)
    return JSONResponse({"object": "list", "data": data, "model": body.get("model", ""),
                         "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})
