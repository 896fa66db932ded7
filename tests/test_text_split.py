"""kernel.text_split: the one reply-splitting algorithm behind Telegram's split_reply (4,096) and WhatsApp's
split_message (1,600). Pure; the surfaces' own tests check their limits and wiring."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from kernel.text_split import split_text, utf16_len
from surfaces.telegram_outbound import MAX_MESSAGE_CHARS, split_reply
from surfaces.whatsapp_text import MAX_BODY_CHARS, split_message


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


LENGTHS: dict[str, Callable[[str], int]] = {"len": len, "utf16_len": utf16_len, "utf8_len": utf8_len}


def rejoins(parts: list[str], text: str) -> bool:
    """`parts` are `text` in order, with only whitespace (possibly none) between them and around them."""
    pos = len(text) - len(text.lstrip())
    for part in parts:
        if not text.startswith(part, pos):
            return False
        pos += len(part)
        pos += len(text[pos:]) - len(text[pos:].lstrip())
    return pos == len(text)


def test_utf16_len_counts_astral_characters_twice() -> None:
    assert utf16_len("") == 0 and utf16_len("abc") == 3 and utf16_len("é") == 1
    assert utf16_len("😀") == 2 and utf16_len("a😀b") == 4
    assert utf16_len("\ud800") == 1  # a lone surrogate (from JSON, say) does not raise


def test_blank_text_gives_no_part_and_a_fitting_one_is_whole() -> None:
    assert split_text("", 10) == [] and split_text(" \n\t ", 10) == []
    assert split_text("  short \n", 10) == ["short"]
    assert split_text("x" * 10, 10) == ["x" * 10]


def test_prefers_paragraphs_then_lines_then_sentences_then_words() -> None:
    para = "word " * 30
    text = f"{para.strip()}.\n\n{para.strip()}."
    assert split_text(text, 200) == [para.strip() + ".", para.strip() + "."]
    # a line break wins over a later sentence end
    assert split_text("First line here\nthen one. And more words", 30) == [
        "First line here", "then one. And more words"]
    sentences = "One sentence here. Another one follows! A third? " * 3
    parts = split_text(sentences.strip(), 60)
    assert all(p.endswith((".", "!", "?")) for p in parts) and all(len(p) <= 60 for p in parts)
    assert split_text("He said “stop.” Then he left the room quietly", 30) == [
        "He said “stop.”", "Then he left the room quietly"]
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa"
    assert split_text(words, 20) == ["alpha beta gamma", "delta epsilon zeta", "eta theta iota kappa"]


def test_a_boundary_must_leave_the_part_half_full() -> None:
    # the paragraph break is too early (a tiny part): the sentence end later in the window wins
    text = "Hi.\n\n" + "Some words in a sentence. More words follow here"
    assert split_text(text, 40) == ["Hi.\n\nSome words in a sentence.", "More words follow here"]


def test_a_word_is_cut_only_when_longer_than_a_part() -> None:
    assert split_text("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]
    assert split_text("a " + "b" * 9, 10) == ["a", "b" * 9]  # a short part rather than a cut word
    assert split_text("a " + "b" * 12, 10) == ["a", "b" * 10, "bb"]


def test_a_hard_cut_keeps_combining_marks_with_their_base() -> None:
    text = "e\u0301" * 6  # é as e + COMBINING ACUTE ACCENT
    parts = split_text(text, 5)
    assert parts == ["e\u0301e\u0301", "e\u0301e\u0301", "e\u0301e\u0301"]


def test_the_length_function_sets_the_window() -> None:
    emoji = "😀" * 1000
    assert [len(p) for p in split_text(emoji, 1600, length=utf16_len)] == [800, 200]
    assert [len(p) for p in split_text(emoji, 1600, length=utf8_len)] == [400, 400, 200]
    assert split_text(emoji, 1600) == [emoji]


def test_a_character_longer_than_the_limit_is_an_error() -> None:
    with pytest.raises(ValueError):
        split_text("😀", 1, length=utf16_len)
    with pytest.raises(ValueError):
        split_text("a", 0)


def test_the_surfaces_use_it_at_their_limits() -> None:
    text = "\n\n".join(f"Paragraph {i}. " + "word " * 300 for i in range(8))
    assert split_reply(text) == split_text(text, MAX_MESSAGE_CHARS, length=utf16_len)
    assert split_message(text) == split_text(text, MAX_BODY_CHARS, length=utf16_len)
    assert len(split_reply(text)) < len(split_message(text))
    for split in (split_reply, split_message):
        with pytest.raises(ValueError):
            split(text, 1)


@hypothesis_settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list("ab .!?\n\t😀é\u0301”。")), max_size=400),
    st.integers(min_value=4, max_value=60),
    st.sampled_from(sorted(LENGTHS)),
)
def test_parts_fit_are_not_empty_and_rejoin_to_the_text(text: str, limit: int, name: str) -> None:
    length = LENGTHS[name]
    parts = split_text(text, limit, length=length)
    assert all(p and p == p.strip() and length(p) <= limit for p in parts)
    assert rejoins(parts, text)
    assert bool(parts) == bool(text.strip())
