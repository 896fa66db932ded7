"""What counts as text a person wrote; and how a size or a URL is shown (to people, in errors and logs)."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

#: Control (NUL, ...) and format characters (zero-width space and joiners, word joiner, BOM, ...): nothing shows.
_INVISIBLE = frozenset(("Cc", "Cf"))


def blank(text: str) -> bool:
    """True when nothing in `text` would show: whitespace, control and zero-width characters only."""
    # any() stops at the first visible character: linear at worst, and almost always immediate
    return not any(not ch.isspace() and unicodedata.category(ch) not in _INVISIBLE for ch in text)


def without_nul(text: str) -> str:
    """`text` without NUL characters: Postgres text (and jsonb) columns cannot hold them, and nothing shows them."""
    return text.replace("\x00", "")


def has_nul(value: Any) -> bool:
    """Whether a string, or any string inside JSON-like dicts and lists, holds a NUL."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(has_nul(k) or has_nul(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(has_nul(v) for v in value)
    return False


def without_nul_in(value: Any) -> Any:
    """A copy of JSON-like `value` (dicts, lists, strings) with every NUL removed from its strings."""
    if isinstance(value, str):
        return without_nul(value)
    if isinstance(value, dict):
        return {without_nul_in(k): without_nul_in(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [without_nul_in(v) for v in value]
    return value


def size_text(size: int) -> str:
    """A byte count as people read it: "900 B", "120 KB", "5.0 MB"."""
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{round(size / 1024)} KB"
    return f"{size / (1024 * 1024):.1f} MB"


#: A URL's password: in its user info (scheme://user:PASSWORD@host, up to the last "@": a password may hold "/" or
#: "@" unencoded) or a libpq-style query parameter (?password=...).
_USERINFO_PASSWORD = re.compile(r"^([a-z][a-z0-9+.-]*://[^:@/?#]*:).+@(?=[^@]*$)", re.IGNORECASE | re.DOTALL)
_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)


def url_shown(url: str) -> str:
    """`url` as an error message or a log may show it: its password, if it has one, as ***."""
    return _QUERY_PASSWORD.sub(r"\1***", _USERINFO_PASSWORD.sub(r"\1***@", url))
