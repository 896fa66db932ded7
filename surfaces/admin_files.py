"""The admin page's two files (surfaces/admin/, package data, read once): index.html and admin.js, plain HTML and
JavaScript with no build step, like the widget's. Every text the page shows comes from kernel/catalog.py (the
`admin_*` keys) in the language of `?lang=` or Accept-Language, written into the page as a JSON data block that
admin.js reads: the script holds no text of its own. A strict Content-Security-Policy: scripts and requests only
to the daemon's own origin, no frames."""

from __future__ import annotations

import html
import json
from importlib import resources

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from kernel import catalog

CSP = ("default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = {"content-security-policy": CSP, "x-content-type-options": "nosniff", "referrer-policy": "no-referrer",
           "cache-control": "no-cache", "x-frame-options": "DENY"}
PREFIX = "admin_"


def _read(name: str) -> str:
    return (resources.files("surfaces") / "admin" / name).read_text(encoding="utf-8")


def texts(lang: str) -> dict[str, str]:
    """The page's texts in `lang`: every `admin_*` catalogue key, without its prefix."""
    return {key[len(PREFIX):]: catalog.t(key, lang) for key in catalog.MESSAGES["en"] if key.startswith(PREFIX)}


class AdminFiles:
    """index.html and admin.js, read once."""

    def __init__(self) -> None:
        self.html = _read("index.html")
        self.js = _read("admin.js").encode()

    async def page(self, request: Request) -> HTMLResponse:
        lang = catalog.language(request.query_params.get("lang") or request.headers.get("accept-language"))
        # "<" escaped: no text can close the data block it sits in
        data = json.dumps({"lang": lang, "texts": texts(lang)}, ensure_ascii=False).replace("<", "\\u003c")
        page = (self.html.replace("{{lang}}", lang).replace("{{title}}", html.escape(catalog.t("admin_title", lang)))
                .replace("{{data}}", data))
        return HTMLResponse(page, headers=HEADERS)

    async def script(self, request: Request) -> Response:
        return Response(self.js, media_type="text/javascript; charset=utf-8", headers=HEADERS)
