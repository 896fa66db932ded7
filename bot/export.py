"""A person's export on their own surface (`/export`; `hilo export` is bot/cli_export.py): everything stored
about them (memory/sql_export.py), as JSON.

- Telegram: the JSON itself, as a document in the chat (surfaces/telegram.py sends it with sendDocument).
- WhatsApp and the web: a download link, `HILO_PUBLIC_URL/api/export/<token>`, since Twilio sends no file
  without a public media host. The token is signed with HILO_SECRET_KEY (itsdangerous, a salt of its own, so no
  other token of hilo's passes for it), names the person's id and handle and a random nonce (never guessable),
  and lasts HILO_EXPORT_LINK_MINUTES. It opens that person's export only: a person forgotten since (their handle
  given to someone new) gets nothing. The web also serves `GET /api/export` to the signed-in visitor.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bot.cli_export import dumps

if TYPE_CHECKING:
    from itsdangerous import URLSafeTimedSerializer

    from memory.store import Store

FILENAME = "hilo-export.json"


@dataclass(frozen=True, slots=True)
class ExportLinks:
    """Signs and checks download links. `public_url` may be empty (the web's own page then gets a path)."""

    secret_key: str = field(repr=False)
    public_url: str
    minutes: int

    SALT = "hilo-export"

    def _serializer(self) -> URLSafeTimedSerializer:
        from itsdangerous import URLSafeTimedSerializer  # loads with the first export link, not at start

        return URLSafeTimedSerializer(self.secret_key, salt=self.SALT)

    def link(self, user_id: int, handle: str) -> str:
        token = self._serializer().dumps({"u": user_id, "h": handle, "n": secrets.token_urlsafe(12)})
        return f"{self.public_url}/api/export/{token}"

    def read(self, token: str) -> tuple[int, str] | None:
        """(user id, handle) of a genuine link that has not expired, else None."""
        from itsdangerous import BadSignature

        try:
            data = self._serializer().loads(token, max_age=self.minutes * 60)
        except BadSignature:  # also SignatureExpired
            return None
        if not isinstance(data, dict) or not isinstance(data.get("u"), int) or not isinstance(data.get("h"), str):
            return None
        return data["u"], data["h"]


class Exports:
    """What surfaces reach of the export (they import no memory module): a person's, by identity or by link."""

    def __init__(self, store: Store, links: ExportLinks) -> None:
        self.store, self.links = store, links

    async def of_identity(self, surface: str, sender: str, handle: str | None = None) -> dict[str, Any] | None:
        """Everything about the person of (surface, sender) (or `handle`), or None when nothing is stored."""
        handle = handle or await self.store.identity_handle(surface, sender)
        return await self.store.export(handle) if handle else None

    async def of_link(self, token: str) -> dict[str, Any] | None:
        """The export a download link opens: its person's, while it is genuine and young; else None (also for a
        person forgotten since, whose handle someone new may have now)."""
        found = self.links.read(token)
        if found is None:
            return None
        data = await self.store.export(found[1])
        return data if data is not None and data["user"]["id"] == found[0] else None


def document(data: dict[str, Any]) -> bytes:
    """The export as the file sent or downloaded."""
    return dumps(data).encode()
