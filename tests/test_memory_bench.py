"""bench/memory_bench.py's measuring stick at a tiny size: the generated history keeps its promises (paraphrases
share no content word with their evidence, every evidence id exists, the same seed gives the same corpus) and
the recall arithmetic is right (a method that returns everything scores 1.0, one that returns nothing 0.0, a
baseline only counts what fits its budget). No timings."""

from __future__ import annotations

import asyncio
from collections import Counter
from contextlib import closing
from datetime import timedelta
from itertools import pairwise
from pathlib import Path

from bench.memory_bench import BUDGETS, NO_EMBEDDER, Hilo, load
from bench.memory_corpus import KINDS, content_words, generate, overlap, template_problems
from bench.memory_recall import Baselines, evaluate, everything, line, nothing
from bot.config import Settings
from memory.open import open_store

SMALL = {"seed": 3, "people": 2, "messages_per_person": 150, "days": 40}


def test_every_template_keeps_its_kind() -> None:
    assert template_problems() == []


def test_the_corpus_keeps_its_promises() -> None:
    corpus = generate(**SMALL)
    by_id = {m.external_id: m for m in corpus.messages}
    assert len(by_id) == len(corpus.messages)
    assert {(q.lang, q.kind) for q in corpus.questions} == {(lang, k) for lang in ("en", "es") for k in KINDS}
    for q in corpus.questions:
        assert q.evidence and all(e in by_id and by_id[e].user == q.user for e in q.evidence), q
        evidence = [by_id[e] for e in q.evidence]
        assert all(m.role == "user" for m in evidence)
        if q.kind == "paraphrase":
            assert content_words(q.text), q.text
            assert not overlap(q.text, evidence[0].content), (q.text, evidence[0].content)
        if q.kind == "lexical":
            assert overlap(q.text, evidence[0].content), (q.text, evidence[0].content)
        if q.kind == "list":  # spread over sessions: a gap over an hour between any two of them
            times = sorted(m.created_at for m in evidence)
            assert len(times) == 3 and all(b - a > timedelta(hours=1) for a, b in pairwise(times))
    updates = {q.id.rsplit(":", 1)[0]: q for q in corpus.questions if q.kind == "update"}
    for q in corpus.questions:
        if q.kind == "previous":  # the older value was said first
            assert by_id[q.evidence[0]].created_at < by_id[updates[q.id.rsplit(":", 1)[0]].evidence[0]].created_at
    per_user = Counter(m.user for m in corpus.messages)
    assert all(n >= 150 for n in per_user.values()) and len(per_user) == 2
    surfaces = {m.surface for m in corpus.messages}
    assert surfaces == {"telegram", "whatsapp", "web"}
    # episodes: runs with no gap over an hour, several per person, each on one surface
    for handle in per_user:
        msgs = corpus.by_user(handle)
        assert all(a.created_at < b.created_at for a, b in pairwise(msgs))
        gaps = sum(b.created_at - a.created_at > timedelta(hours=1) for a, b in pairwise(msgs))
        assert gaps >= 10
        assert msgs[-1].created_at - msgs[0].created_at > timedelta(days=20)
        assert all(a.surface == b.surface for a, b in pairwise(msgs)
                   if b.created_at - a.created_at <= timedelta(hours=1))


def test_the_generator_is_deterministic_per_seed() -> None:
    a, b, other = generate(**SMALL), generate(**SMALL), generate(**{**SMALL, "seed": 4})
    assert a.messages == b.messages and a.questions == b.questions and a.now == b.now
    assert [m.content for m in a.messages] != [m.content for m in other.messages]


def test_recall_of_everything_is_one_of_nothing_zero_and_baselines_fit_their_budget() -> None:
    corpus = generate(**SMALL)
    with closing(Baselines(corpus, Settings().system_prompt)) as base:
        methods = {"everything": everything, "nothing": nothing, "last-N": base.last_n, "bm25": base.bm25}
        results = asyncio.run(evaluate(corpus.questions, methods, BUDGETS))
        assert all(v == 1.0 for cell in results["everything"].values() for v in cell.values())
        assert all(v == 0.0 for cell in results["nothing"].values() for v in cell.values())
        by_id = {m.external_id: m for m in corpus.messages}
        for q in corpus.questions[:5]:
            for budget in BUDGETS:
                for method in (base.last_n, base.bm25):
                    found = asyncio.run(method(q, budget))
                    assert sum(base.cost[e] for e in found) <= base.avail(q, budget)
            msgs = corpus.by_user(q.user)
            newest = asyncio.run(base.last_n(q, 4000))
            assert newest and [m.external_id for m in msgs[-len(newest):]] == [m.external_id for m in msgs
                                                                                 if m.external_id in newest]
        # BM25 finds a lexical question's evidence when the budget holds everything it matched
        lexical = next(q for q in corpus.questions if q.kind == "lexical")
        assert lexical.evidence[0] in base.bm25_ranked(lexical)
        assert line(by_id[lexical.evidence[0]]).endswith(by_id[lexical.evidence[0]].content)


def test_hilo_is_measured_on_a_real_store(tmp_path: Path) -> None:
    corpus = generate(**SMALL)

    async def run() -> dict[str, dict[int, dict[str, float]]]:
        url = f"sqlite:///{tmp_path}/m.db"
        store = open_store(url)
        await store.open()
        try:
            await load(store, corpus)
            hilo = Hilo(store, url, BUDGETS, corpus.now, NO_EMBEDDER)
            for q in corpus.questions:  # only the asker's messages, whatever the budget
                own = {m.external_id for m in corpus.by_user(q.user)}
                for budget in (500, 4000):
                    found = await hilo(q, budget)
                    assert found <= own, (q.id, found - own)
            assert all(spent <= 500 for spent in hilo.spent[500]) and max(hilo.spent[4000]) > 500
            return await evaluate(corpus.questions, {"hilo": hilo}, (500, 4000))
        finally:
            await store.close()

    results = asyncio.run(run())["hilo"]
    lexical = [q for q in corpus.questions if q.kind == "lexical"]
    assert len(lexical) == 8
    # a question in its evidence's words is found, at the smallest budget too: the history is 300 messages
    assert [q.id for q in lexical if results[500][q.id] < 1.0] == []
    assert [q.id for q in lexical if results[4000][q.id] < 1.0] == []
