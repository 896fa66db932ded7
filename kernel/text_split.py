"""Splitting a reply into the parts a messaging API accepts: one pure function shared by every surface.

Telegram (4,096) and Twilio's WhatsApp (1,600) both cap a message and both count the cap in UTF-16 code
units, so `utf16_len` is the usual `length`; a surface with another rule passes its own.

The algorithm, for the text left to send (leading and trailing whitespace dropped):
1. if it all fits (`length(rest) <= limit`), it is the last part;
2. else take the window: the longest prefix that fits;
3. end the part at the last boundary in the window, trying in turn: a paragraph break (a blank line), a line
   break, a sentence end (., !, ?, … and CJK ones, closing quotes and brackets kept), each only where it leaves
   the part at least half full of the window (so parts are never tiny); else the last space anywhere (a word
   is never cut when it would fit in a part); else a hard cut at the window's end, moved back so that a
   combining mark stays with its base character;
4. drop the whitespace at the cut, and go on with the rest.

No I/O and no import above kernel here, so the outbox (bot/outbox.py) and every surface share it; tested on its own
(tests/test_text_split.py).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

_PARAGRAPH = re.compile(r"\n[ \t]*\n")
_LINE = re.compile(r"\n")
_SENTENCE = re.compile(r"[.!?…。！？][\"'”’)\]]*(?=\s)")
_SPACE = re.compile(r"\s")

# (boundary, cut after the match rather than before it, must the part be at least half the window)
_BOUNDARIES: tuple[tuple[re.Pattern[str], bool, bool], ...] = (
    (_PARAGRAPH, False, True),
    (_LINE, False, True),
    (_SENTENCE, True, True),
    (_SPACE, False, False),
)


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units, as Telegram and Twilio count it: characters outside the Basic
    Multilingual Plane (most emoji) count twice, everything else (a lone surrogate too) once."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def split_text(text: str, limit: int, *, length: Callable[[str], int] = len) -> list[str]:
    """`text` as parts of at most `limit` by `length`, in order, cut on paragraph, then line, then sentence,
    then word boundaries (see the module's docstring for the exact rule).

    Whitespace at a cut (and around the whole text) is dropped; nothing else is lost or reordered, and no
    part is empty or starts or ends with whitespace. A blank text gives no part.

    `length` must be monotone over prefixes (a longer prefix is never shorter) and give 0 for "", like `len`
    (code points) or `utf16_len`. ValueError when a single character is longer than `limit`.
    """
    parts: list[str] = []
    rest = text.strip()
    while rest:
        n = _fit(rest, limit, length)
        if n == len(rest):
            parts.append(rest)
            break
        if n == 0:
            raise ValueError(f"limit {limit} is less than the length of the character {rest[0]!r}")
        cut = _cut(rest, n)
        parts.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
    return parts


def _fit(text: str, limit: int, length: Callable[[str], int]) -> int:
    """The longest prefix (in code points) of `text` whose `length` is at most `limit`: a doubling, then a
    binary, search, so a long text costs about log(part) calls on part-sized prefixes, never the whole text."""
    lo, hi = 0, 1  # length(text[:lo]) <= limit; hi is the next size to try
    while hi <= len(text) and length(text[:hi]) <= limit:
        lo, hi = hi, hi * 2
    hi = min(hi, len(text) + 1)  # text[:hi] is too long, or hi is past the end
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if length(text[:mid]) <= limit:
            lo = mid
        else:
            hi = mid
    return lo


def _cut(rest: str, n: int) -> int:
    """Where to end a part of `rest`, whose first `n` characters fit (and the whole does not); 1 <= result <= n."""
    probe = rest[: n + 1]  # a break right after the window still ends a part that fits
    half = n // 2
    for pattern, after, half_full in _BOUNDARIES:
        floor = max(half if half_full else 0, 1)
        best = -1
        for m in pattern.finditer(probe):
            at = m.end() if after else m.start()
            if floor <= at <= n:
                best = at
        if best > 0:
            return best
    cut = n
    while cut > 1 and unicodedata.combining(rest[cut]):  # never separate a base character from its marks
        cut -= 1
    return cut
