"""o200k_base's ranks as an on-disk hash table read through mmap, and a BPE over it for short pieces.

Why. tiktoken's constructor builds its maps of the 200k-token table in ~130-200 ms and ~46 MB, whatever the
text: a command that counts one message and a few headers (`hilo context`) paid that for microseconds of work,
and an idle daemon held the 46 MB. Here a count of a short text looks up only the pieces it has: the table is a
file of fixed-size slots (open addressing on crc32), mapped read-only, so opening it costs a few syscalls and
the pages a lookup touches are the only ones read (shared with every other process that maps the file).

Exactly tiktoken's count. The text is split by the same pre-tokenizer pattern (`safe_pattern`: its Unicode
classes spelled out for the characters this path takes, in the standard `re`), a piece that is a token
costs 1, and any other piece is merged as tiktoken's `byte_pair_merge` does (lowest rank first, leftmost on a
tie, the ranks of the pair and its new neighbours recomputed), so the number of parts left is the count.
A merge loop is quadratic in a piece's length, so pieces over MAX_PIECE bytes and texts over MAX_TEXT
characters go to tiktoken (the caller's fallback): this path's work per count is bounded by those two numbers.
"""

from __future__ import annotations

import mmap
import re
import struct
import zlib
from collections.abc import Callable, Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

#: Longest piece (UTF-8 bytes) merged here, longest text (characters) split here: longer goes to tiktoken.
#: At the bounds: 32k characters of 47-letter nonsense words take ~60 ms here, everyday text ~5 ms; loading
#: tiktoken takes ~200 ms (a context's memory block passes 4k characters: `hilo chat` loaded it for one count).
MAX_PIECE = 48
MAX_TEXT = 32_768

#: Characters this path splits: Latin (to U+036F) and general punctuation. Unicode tables differ between
#: Python, the `regex` module and tiktoken's Rust regex for characters assigned lately (U+18D80 is a letter to
#: one and unassigned to another), so other scripts go to tiktoken, whose split is the reference. In these
#: ranges all agree (tests/test_tokens.py checks every character of them).
SAFE = re.compile("[\x00-\u036f\u2000-\u206f]*")

_MAGIC = b"hilo-bpe-index-1\n"
_HEAD = struct.Struct("<II")  # slots (a power of two), table size in bytes
_SLOT = struct.Struct("<IIH")  # offset of the token in the blob (EMPTY: a free slot), its rank, its length
_EMPTY = 0xFFFFFFFF
_NONE = 1 << 40  # "no rank": above every real one


class Index:
    """{token bytes: rank} as a read-only hash table over `data` (an mmap or bytes in the format `build` writes)."""

    def __init__(self, data: Any) -> None:
        if bytes(data[: len(_MAGIC)]) != _MAGIC:
            raise ValueError("not a token index")
        self._data = data
        n_slots, self._table = _HEAD.unpack_from(data, len(_MAGIC))
        self._mask = n_slots - 1
        self._slots = len(_MAGIC) + _HEAD.size
        self._blob = self._slots + n_slots * _SLOT.size
        if n_slots & self._mask or self._blob > len(data) or self._blob + self._table != len(data):
            raise ValueError("token index sizes do not add up")

    def rank(self, token: bytes) -> int:
        """The rank of `token`, or _NONE when it is not one."""
        data, size, mask, unpack = self._data, len(token), self._mask, _SLOT.unpack_from
        slot = zlib.crc32(token) & mask
        while True:
            offset, rank, length = unpack(data, self._slots + slot * 10)
            if offset == _EMPTY:
                return _NONE
            if length == size:
                start = self._blob + offset
                if data[start : start + size] == token:
                    return int(rank)
            slot = (slot + 1) & mask


def build(tokens: Iterable[tuple[bytes, int]]) -> bytes:
    """The index file of `tokens` ((bytes, rank) pairs): slots for at most 40% load, then the tokens end to end."""
    pairs = sorted(tokens, key=lambda pair: pair[1])  # one file for one table, whatever order it came in
    n_slots = 1 << max(4, (len(pairs) * 5 // 2).bit_length())
    mask = n_slots - 1
    slots = bytearray(b"\xff" * (n_slots * _SLOT.size))
    blob = bytearray()
    for token, rank in pairs:
        slot = zlib.crc32(token) & mask
        while slots[slot * 10 : slot * 10 + 4] != b"\xff\xff\xff\xff":
            slot = (slot + 1) & mask
        _SLOT.pack_into(slots, slot * 10, len(blob), rank, len(token))
        blob += token
    return _MAGIC + _HEAD.pack(n_slots, len(blob)) + bytes(slots) + bytes(blob)


def open_index(path: Path) -> Index:
    """The index file at `path`, mapped read-only (ValueError or OSError when it is absent or not one)."""
    with path.open("rb") as f:
        return Index(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))


def safe_pattern(*, ascii_only: bool = False) -> re.Pattern[str]:
    """tiktoken's o200k_base pre-tokenizer (kernel/tokens.py PATTERN) for text within SAFE, in the standard `re`:
    each \\p{..} class is spelled out as the characters of SAFE it holds (unicodedata), \\s as White_Space (what
    Rust's regex means by it; Python's \\s adds U+001C..U+001F). The `regex` module would take the pattern as it
    is, but importing it and compiling the pattern cost ~20 ms of a `hilo context`; this 5-15 ms.

    `ascii_only`: the classes hold only their ASCII characters. On ASCII text it splits exactly as the whole
    pattern does (a class's other characters never occur there, in or out of a negated class) and compiles in
    well under a millisecond: what `hilo context` counts (its question, the headers) is mostly ASCII."""
    import unicodedata

    chars = [chr(c) for c in (range(0x80) if ascii_only else (*range(0x370), *range(0x2000, 0x2070)))]

    def cls(*categories: str) -> str:  # as ranges: a class of hundreds of single characters compiles in ~20 ms
        codes = [ord(c) for c in chars if unicodedata.category(c) in categories]
        runs: list[list[int]] = []
        for code in codes:
            if runs and runs[-1][1] == code - 1:
                runs[-1][1] = code
            else:
                runs.append([code, code])
        return "".join(f"\\u{a:04x}" if a == b else f"\\u{a:04x}-\\u{b:04x}" for a, b in runs)

    upper, lower = cls("Lu", "Lt", "Lm", "Lo"), cls("Ll", "Lm", "Lo")
    mark, letter, number = cls("Mn", "Mc", "Me"), cls("Lu", "Ll", "Lt", "Lm", "Lo"), cls("Nd", "Nl", "No")
    space = "\\t\\n\\x0b\\x0c\\r \\x85\\xa0\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f"
    tail = "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    return re.compile("|".join([
        f"[^\\r\\n{letter}{number}]?[{upper}{mark}]*[{lower}{mark}]+{tail}",
        f"[^\\r\\n{letter}{number}]?[{upper}{mark}]+[{lower}{mark}]*{tail}",
        f"[{number}]{{1,3}}",
        f" ?[^{space}{letter}{number}]+[\\r\\n/]*",
        f"[{space}]*[\\r\\n]+",
        f"[{space}]+(?![^{space}])",
        f"[{space}]+",
    ]))


class ShortCounter:
    """Exact o200k_base counts of short texts over an Index; None for what it leaves to tiktoken."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self._split_ascii: Callable[[str], list[str]] = safe_pattern(ascii_only=True).findall
        #: the whole pattern, compiled when the first text beyond ASCII is counted
        self._split_safe: Callable[[str], list[str]] | None = None
        self.piece = lru_cache(maxsize=8192)(self._piece)

    def count(self, text: str) -> int | None:
        if len(text) > MAX_TEXT:
            return None
        if text.isascii():
            split = self._split_ascii
        elif SAFE.fullmatch(text):
            split = self._split_safe or self._compile_safe()
        else:
            return None
        total = 0
        piece = self.piece
        for part in split(text):
            n = piece(part)
            if n < 0:
                return None
            total += n
        return total

    def _compile_safe(self) -> Callable[[str], list[str]]:
        self._split_safe = safe_pattern().findall
        return self._split_safe

    def _piece(self, part: str) -> int:
        data = part.encode("utf-8")
        if self.index.rank(data) != _NONE:
            return 1
        if len(data) > MAX_PIECE:
            return -1
        return _merge(self.index.rank, data)


def _merge(rank: Any, piece: bytes) -> int:
    """Tokens of `piece` after tiktoken's byte_pair_merge (its parts: start offsets and the rank of the pair that
    starts there; the last two are sentinels)."""
    starts = list(range(len(piece) + 1))
    ranks = [rank(piece[i : i + 2]) for i in range(len(piece) - 1)] + [_NONE, _NONE]
    while len(ranks) > 2:
        best = min(ranks[:-1])
        if best == _NONE:
            break
        i = ranks.index(best)
        # part i absorbs part i + 1: the ranks of (i, i + 2) and (i - 1, i) are those of the merged bytes
        ranks[i] = rank(piece[starts[i] : starts[i + 3]]) if i + 3 < len(starts) else _NONE
        if i > 0:
            ranks[i - 1] = rank(piece[starts[i - 1] : starts[i + 2]])
        del starts[i + 1], ranks[i + 1]
    return len(starts) - 1
