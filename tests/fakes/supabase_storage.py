"""A fake Supabase Storage API on 127.0.0.1: the few routes of supabase/storage that storage3 (the supabase
package's storage client) calls for private objects, in their wire shapes.

- POST   /storage/v1/object/{bucket}/{key...}   upload: multipart/form-data, the part `file` (its bytes and
  Content-Type) and the field `cacheControl`; header `x-upsert: true` replaces an object that exists (else the
  storage's Duplicate error). Answer: {"Key": "<bucket>/<key>", "Id": "<uuid>"}.
- GET    /storage/v1/object/{bucket}/{key...}   authenticated download: the bytes, with the stored Content-Type.
- DELETE /storage/v1/object/{bucket}            JSON {"prefixes": [key, ...]}: the objects removed, as a list of
  their rows ({"name", "bucket_id", "id", ...}); a key that is not there is left out (no error).

Every request must carry the project's key twice, as the supabase client sends it: `apikey: <key>` and
`Authorization: Bearer <key>`; otherwise the storage's 403 ("invalid signature"). Errors are the storage API's
legacy body, {"statusCode": "<code>", "error": "<name>", "message": "<text>"}, sent with HTTP 400 as the
storage does for object routes (storage3 reads the body's statusCode). A bucket that does not exist is
"Bucket not found". `objects` holds {(bucket, key): (bytes, content type)}; `requests` records (method, path).
"""

from __future__ import annotations

import hmac
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.fakes import multipart
from tests.fakes.loopback import ThreadedServer

KEY = "sb_secret_fake-service-role-key-0123456789"


def error(status: int, name: str, message: str, http: int = 400) -> JSONResponse:
    return JSONResponse({"statusCode": str(status), "error": name, "message": message}, status_code=http)


class FakeStorage:
    def __init__(self, key: str = KEY, buckets: tuple[str, ...] = ("hilo-media",)) -> None:
        self.key = key
        self.buckets = set(buckets)
        self.objects: dict[tuple[str, str], tuple[bytes, str]] = {}
        self.requests: list[tuple[str, str]] = []
        self.server = ThreadedServer(self.app(), name="fake-supabase-storage")

    @property
    def base_url(self) -> str:
        return self.server.base_url

    def keys(self, bucket: str = "hilo-media") -> list[str]:
        return sorted(k for b, k in self.objects if b == bucket)

    def _refused(self, request: Request) -> Response | None:
        self.requests.append((request.method, request.url.path))
        apikey = request.headers.get("apikey", "")
        bearer = request.headers.get("authorization", "")
        if not (hmac.compare_digest(apikey, self.key) and hmac.compare_digest(bearer, f"Bearer {self.key}")):
            return error(403, "Unauthorized", "invalid signature")
        if request.path_params["bucket"] not in self.buckets:
            return error(404, "Bucket not found", "Bucket not found")
        return None

    def app(self) -> Starlette:
        async def upload(request: Request) -> Response:
            if (refused := self._refused(request)) is not None:
                return refused
            bucket, key = request.path_params["bucket"], request.path_params["key"]
            _fields, files = multipart.parse(request.headers.get("content-type", ""), await request.body())
            if "file" not in files:
                return error(400, "InvalidRequest", "No file was uploaded")
            if (bucket, key) in self.objects and request.headers.get("x-upsert", "false") != "true":
                return error(409, "Duplicate", "The resource already exists")
            kind = _part_type(request.headers.get("content-type", ""), await request.body())
            self.objects[(bucket, key)] = (files["file"][1], kind)
            return JSONResponse({"Key": f"{bucket}/{key}", "Id": str(uuid.uuid4())})

        async def download(request: Request) -> Response:
            if (refused := self._refused(request)) is not None:
                return refused
            found = self.objects.get((request.path_params["bucket"], request.path_params["key"]))
            if found is None:
                return error(404, "not_found", "Object not found")
            return Response(found[0], media_type=found[1])

        async def remove(request: Request) -> Response:
            if (refused := self._refused(request)) is not None:
                return refused
            bucket = request.path_params["bucket"]
            try:
                prefixes = json.loads(await request.body())["prefixes"]
            except (ValueError, KeyError, TypeError):
                return error(400, "InvalidRequest", "body/prefixes must be array")
            removed: list[dict[str, Any]] = []
            for key in prefixes:
                if self.objects.pop((bucket, key), None) is not None:
                    removed.append({"name": key, "bucket_id": bucket, "id": str(uuid.uuid4()), "metadata": {}})
            return JSONResponse(removed)

        return Starlette(routes=[
            Route("/storage/v1/object/{bucket}/{key:path}", upload, methods=["POST"]),
            Route("/storage/v1/object/{bucket}/{key:path}", download, methods=["GET"]),
            Route("/storage/v1/object/{bucket}", remove, methods=["DELETE"]),
        ])


def _part_type(content_type: str, body: bytes) -> str:
    """The Content-Type of the multipart body's `file` part (what the object is served with)."""
    import email.parser
    import email.policy

    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body)
    for part in message.iter_parts():
        if part.get_param("name", header="content-disposition") == "file":
            return part.get_content_type()
    return "application/octet-stream"


@pytest.fixture
def storage() -> Iterator[FakeStorage]:
    fake = FakeStorage()
    fake.server.start()
    try:
        yield fake
    finally:
        fake.server.stop()
