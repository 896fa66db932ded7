"""Time zones a person's client names (the web widget sends the browser's): an IANA name hilo can use, or None."""

from __future__ import annotations

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

#: Longer than any IANA zone name ("America/Argentina/ComodRivadavia" is 32).
MAX_CHARS = 64


def zone_name(raw: object) -> str | None:
    """`raw` when it is the name of a time zone this machine knows ("Europe/Madrid"), else None."""
    if not isinstance(raw, str) or not 0 < len(raw) <= MAX_CHARS or "\x00" in raw:
        return None
    try:
        ZoneInfo(raw)
    except (ZoneInfoNotFoundError, ValueError):
        return None
    return raw
