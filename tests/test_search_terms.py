"""memory.search_terms: which words of a message are searched, and that a message of any length gives a query
of bounded size (its size is the cost of every search that follows)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from memory.search_terms import MAX_TERMS, MAX_WORD, STOPWORDS, WORD, fold, search_terms


def longest_first_seen(text: str, k: int) -> list[str]:
    """The definition, written plainly: distinct non-stopword words of 2+ characters, folded; of those, the k
    longest (ties: the first seen), kept in order of appearance."""
    words = list(dict.fromkeys(w for w in WORD.findall(fold(text)) if 1 < len(w) <= MAX_WORD and w not in STOPWORDS))
    ranked = sorted(range(len(words)), key=lambda i: (-len(words[i]), i))[:k]
    return [words[i] for i in sorted(ranked)]


def test_stopwords_short_words_and_repeats_are_not_searched() -> None:
    assert search_terms("The dog and the DOG, a cat; el perro y la casa_grande") == [
        "dog", "cat", "perro", "casa", "grande"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["paella", "rufo", "valencia", "ab", "mañana", "x", "the", "que", "2024",
                                 "invoice", "refund", "zz", "bici", "garden", "東京", "🙂"]), max_size=60),
       st.integers(1, 20))
def test_the_longest_words_are_kept_in_order_of_appearance(words: list[str], k: int) -> None:
    text = " ".join(words)
    assert search_terms(text, k) == longest_first_seen(text, k)


def test_a_message_of_any_length_gives_a_query_of_at_most_max_terms() -> None:
    rng = random.Random(3)
    text = " ".join("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 12)))
                    for _ in range(3000))[:16_000]
    terms = search_terms(text)
    assert len(terms) == MAX_TERMS
    assert terms == longest_first_seen(text, MAX_TERMS)
    assert search_terms("😀" * 16_000) == []


def test_stopwords_are_checked_after_folding_diacritics() -> None:
    # "qué", "más", "está" are stopwords spelled with their accents: searched before, they matched every "que"
    assert search_terms("¿Qué comida me conviene evitar? Está más rica") == ["comida", "conviene", "evitar", "rica"]
    assert search_terms("¿Cuándo corrí mi primera media maratón?") == ["corri", "primera", "media", "maraton"]


def test_a_run_of_letters_too_long_for_a_word_is_not_searched() -> None:
    assert search_terms("x" * 5000 + " parrot " + "y" * (MAX_WORD + 1)) == ["parrot"]
    assert search_terms("y" * MAX_WORD) == ["y" * MAX_WORD]
