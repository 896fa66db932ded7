"""What counts as text a person wrote."""

from __future__ import annotations

import unicodedata

#: Control (NUL, ...) and format characters (zero-width space and joiners, word joiner, BOM, ...): nothing shows.
_INVISIBLE = frozenset(("Cc", "Cf"))


def blank(text: str) -> bool:
    """True when nothing in `text` would show: whitespace, control and zero-width characters only."""
    # any() stops at the first visible character: linear at worst, and almost always immediate
    return not any(not ch.isspace() and unicodedata.category(ch) not in _INVISIBLE for ch in text)


def without_nul(text: str) -> str:
    """`text` without NUL characters: Postgres text columns cannot hold them, and nothing shows them."""
    return text.replace("\x00", "")
