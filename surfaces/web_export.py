"""A person's export over the web (bot/export.py has the why):

GET /api/export           -> the signed-in caller's export (their session or site token), as a JSON download
GET /api/export/{token}   -> the export a download link opens (`/export` on WhatsApp or in the web chat), while
                             the link is genuine and young; 404 export_link_invalid otherwise

Both answer `application/json` with `Content-Disposition: attachment` (a browser saves hilo-export.json),
`Cache-Control: no-store` (no proxy or browser cache keeps it) and `Referrer-Policy: no-referrer` (the link's
token leaves with no click). Nothing is logged but the size.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from bot import export
from kernel import log
from surfaces.web_auth import Caller
from surfaces.web_common import error

logger = log.get("hilo.web")
Reader = Callable[[Request], Awaitable["tuple[Caller, int | None] | Response"]]
HEADERS = {"content-disposition": f'attachment; filename="{export.FILENAME}"', "cache-control": "no-store",
           "referrer-policy": "no-referrer", "x-content-type-options": "nosniff"}


def download(data: dict[str, Any], how: str) -> Response:
    body = export.document(data)
    logger.info("web.export", how=how, bytes=len(body))
    return Response(body, media_type="application/json", headers=HEADERS)


class ExportView:
    """The two endpoints, over the web surface's reader (who calls, and their user) and the pipeline's exports."""

    def __init__(self, reader: Reader, exports: Callable[[], export.Exports]) -> None:
        self.reader, self.exports = reader, exports

    async def mine(self, request: Request) -> Response:
        found = await self.reader(request)
        if isinstance(found, Response):
            return found
        caller, user_id = found
        data = await self.exports().of_identity("web", caller.sender) if user_id is not None else None
        if data is None:
            return error(request, 404, "cmd_export_nothing")
        return download(data, "session")

    async def by_link(self, request: Request) -> Response:
        data = await self.exports().of_link(str(request.path_params["token"]))
        if data is None:
            return error(request, 404, "export_link_invalid")
        return download(data, "link")
