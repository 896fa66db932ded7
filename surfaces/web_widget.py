"""The widget's files: GET /widget.js (the embeddable chat) and GET / (a demo page that embeds it).

widget.js is plain JavaScript shipped as package data (surfaces/widget/), read once at start. Caching:
an ETag (its content hash, so If-None-Match answers 304) and `max-age=300`, so a new release reaches
every site within minutes; `/widget.js?v=<version or hash>` that matches the file served is immutable for
a year (a stale `v` gets the short max-age, so it can never pin old code).
"""

from __future__ import annotations

import hashlib
import html
import re
from importlib import resources

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from kernel import catalog

SHORT_CACHE = "public, max-age=300"
LONG_CACHE = "public, max-age=31536000, immutable"
DEMO_CSP = (
    "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
DEMO_TEXT = {
    "en": {
        "heading": "web chat demo",
        "intro": "This page embeds the hilo chat widget with one tag. Open the chat button in the corner and "
                 "say hello: replies stream in, and your conversations are still here after a reload.",
        "options": "Options go on the same tag as data- attributes: data-title, data-lang, data-position, "
                   "data-site-token or data-token-provider (a site login). See docs/widget.md.",
    },
    "es": {
        "heading": "demo del chat web",
        "intro": "Esta página incluye el widget de chat de hilo con una sola etiqueta. Abre el botón del "
                 "chat en la esquina y saluda: las respuestas llegan en directo y tus conversaciones "
                 "siguen aquí al recargar.",
        "options": "Las opciones van en la misma etiqueta como atributos data-: data-title, data-lang, "
                   "data-position, data-site-token o data-token-provider (inicio de sesión del sitio). "
                   "Consulta docs/widget.md.",
    },
}


def _read(name: str) -> str:
    return (resources.files("surfaces") / "widget" / name).read_text(encoding="utf-8")


class WidgetFiles:
    """widget.js and the demo page, read once."""

    def __init__(self) -> None:
        self.script = _read("widget.js").encode()
        found = re.search(r'var VERSION = "([^"]+)"', self.script.decode())
        self.version = found.group(1) if found else "0"
        self.hash = hashlib.sha256(self.script).hexdigest()[:16]
        self.etag = f'"{self.hash}"'
        self.demo = _read("demo.html")

    async def widget_js(self, request: Request) -> Response:
        v = request.query_params.get("v")
        headers = {
            "etag": self.etag,
            "cache-control": LONG_CACHE if v in (self.version, self.hash) else SHORT_CACHE,
            "x-hilo-widget-version": self.version,
            # Public code: any page may load it, also with `crossorigin` / Subresource Integrity.
            "access-control-allow-origin": "*",
            "x-content-type-options": "nosniff",
        }
        if self.etag in [t.strip() for t in request.headers.get("if-none-match", "").split(",")]:
            return Response(status_code=304, headers=headers)
        return Response(self.script, media_type="text/javascript; charset=utf-8", headers=headers)

    async def demo_page(self, request: Request) -> HTMLResponse:
        lang = catalog.language(request.query_params.get("lang") or request.headers.get("accept-language"))
        values = {**DEMO_TEXT[lang], "lang": lang, "version": self.version,
                  "origin": f"{request.url.scheme}://{request.url.netloc}"}
        page = self.demo
        for key, value in values.items():
            page = page.replace("{{" + key + "}}", html.escape(value))
        return HTMLResponse(page, headers={
            "content-security-policy": DEMO_CSP, "x-content-type-options": "nosniff",
            "referrer-policy": "no-referrer", "cache-control": "no-cache",
        })
