"""memory.stems: the index terms of a message and the search terms of a question meet across inflections, in
English and Spanish, whatever the accents."""

from __future__ import annotations

from memory.stems import index_terms, query_terms, stems


def meets(question: str, message: str) -> bool:
    return bool(set(query_terms(question)) & set(index_terms(message).split()))


def test_english_inflections_meet() -> None:
    assert meets("Where did I go hiking?", "We did a long hike in the hills")
    assert meets("my hikes", "I love hiking")
    assert not meets("Where did I go hiking?", "We did a long walk in the hills")


def test_spanish_inflections_meet() -> None:
    assert meets("¿Cuándo hice la caminata?", "Hicimos caminatas por la sierra")
    assert meets("perros", "mi perro se llama Rufo")
    assert not meets("¿Qué tal el gato?", "mi perro se llama Rufo")


def test_diacritics_are_folded_before_stemming() -> None:
    assert index_terms("Alérgico") == index_terms("alergico")
    assert meets("¿Dónde vivía?", "Vivia en Sevilla")  # the accent left out, as people type
    assert "que" not in query_terms("¿Qué comida?")  # a stopword once folded


def test_both_stems_are_indexed_once_each() -> None:
    assert stems(["hiking"]) == ["hike", "hiking"]  # English stem, then Spanish
    assert stems(["perro"]) == ["perro", "perr"]
    assert stems(["music"]) == ["music"]  # the two agree: once
    assert index_terms("the the the") == ""  # stopwords only: nothing to index
    assert index_terms("dog dog") == "dog dog"  # repeats stay (BM25 counts them)
