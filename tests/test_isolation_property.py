"""Isolation as a property: random sequences of messages, links, unlinks and forgets over many people and
surfaces never let one person's content reach another's context, inspect output, reply or vector search.

A model of who is who runs beside the real store: `owner[word]` is the person a secret word belongs to,
`person[identity]` the person an identity is now. Links merge people, unlinks split an identity off (its
history stays behind), forgets delete a person. After every step each identity's context, echo reply and
inspect output may hold only its own person's words, and a vector search of its person only its person's
messages: every message gets the same vector (SameVector), so a search returns the newest of all it may see, and
any vector of someone else's would show.

On every backend (the `backend` fixture of conftest.py), each example on a blank database: one database per
test, reset between examples. Postgres runs fewer examples (EXAMPLES): each of its steps is a few round trips
to a server, and the suite must stay fast.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.config import Settings
from bot.embedders.base import Kind, Vector
from bot.embedding import embed_pending
from bot.linking import Linker
from bot.models.factory import build_chain
from bot.pipeline import Pipeline
from kernel.types import InboundMessage
from tests.backends import Backend
from tests.test_linking import join

IDENTITIES = [(surface, f"{surface[0]}{n}") for surface in ("telegram", "whatsapp", "web") for n in range(3)]
identity = st.sampled_from(IDENTITIES)
operation = st.one_of(
    st.tuples(st.just("say"), identity),
    st.tuples(st.just("link"), identity, identity),
    st.tuples(st.just("unlink"), identity),
    st.tuples(st.just("forget"), identity),
)


class SameVector:
    """An embedder (bot.embedders.base.Embedder) giving every text one unit vector: every message is as near as
    any other to every question, so vector recall returns the newest of what it searches."""

    name = "test:same"
    dim = 4

    async def start(self) -> None:
        return None

    async def embed(self, texts: Sequence[str], *, kind: Kind) -> list[Vector]:
        return [[0.5, 0.5, 0.5, 0.5] for _ in texts]

    async def aclose(self) -> None:
        return None


class Model:
    def __init__(self) -> None:
        self.ids = itertools.count(1)
        self.person: dict[tuple[str, str], int] = {}
        self.owner: dict[str, int] = {}

    def of(self, ident: tuple[str, str]) -> int:
        if ident not in self.person:
            self.person[ident] = next(self.ids)
        return self.person[ident]

    def merge(self, src: int, dst: int) -> None:
        for k, v in self.person.items():
            if v == src:
                self.person[k] = dst
        for w, v in self.owner.items():
            if v == src:
                self.owner[w] = dst


#: Examples per backend: the SQLite figure is what this test always ran; Postgres's keeps the suite fast.
EXAMPLES = {"sqlite": 100, "postgres": 30}


async def run(backend: Backend, ops: list[tuple[Any, ...]]) -> None:
    backend.reset()
    store = backend.make()
    await store.open()
    s = Settings(context_budget=4000)
    embedder = SameVector()
    pipeline, linker, model = Pipeline(s, store, build_chain(s), embedder), Linker(store), Model()
    words = itertools.count()
    try:
        for op in ops:
            kind, ident = op[0], op[1]
            if kind == "say":
                word = f"secret{next(words)}x"
                out = await pipeline.handle(InboundMessage(
                    surface=ident[0], sender=ident[1], external_id=f"{ident}-{word}",
                    text=f"remember {word} please", conversation_ref=None))
                model.owner[word] = model.of(ident)
                check_text(model, ident, out.text)
            elif kind == "link":
                other = op[2]
                code = await linker.request(*ident)
                model.of(ident)
                result = await join(linker, *other, code)
                if other == ident:
                    assert result.status == "own_code"
                elif model.of(other) == model.of(ident):
                    assert result.status == "already_linked"
                else:
                    assert result.status == "linked"
                    model.merge(model.of(other), model.of(ident))
            elif kind == "unlink":
                status = await linker.unlink(*ident)
                if ident not in model.person:
                    assert status == "unknown"
                elif sum(v == model.person[ident] for v in model.person.values()) > 1:
                    assert status == "unlinked"
                    model.person[ident] = next(model.ids)
                else:
                    assert status == "only_identity"
            else:  # forget the person behind the identity
                handle = await store.identity_handle(*ident)
                if handle is None:
                    continue
                assert await store.forget(handle)
                gone = model.person[ident]
                model.owner = {w: p for w, p in model.owner.items() if p != gone}
                model.person = {i: p for i, p in model.person.items() if p != gone}
            await check_everyone(store, pipeline, model)
    finally:
        await store.close()


def check_text(model: Model, ident: tuple[str, str], text: str) -> None:
    me = model.person.get(ident)
    for word, owner in model.owner.items():
        if word in text:
            assert owner == me, f"{ident} sees {word} of person {owner}"


async def check_everyone(store: Any, pipeline: Pipeline, model: Model) -> None:
    assert pipeline.embedder is not None
    await embed_pending(store, pipeline.embedder)  # what the embed job does: every message gets its vector
    query = " ".join(["remember", *model.owner])  # a question that would recall every word there is
    for ident in IDENTITIES:
        user_id = await store.identity_user(*ident)
        if user_id is None:
            assert ident not in model.person
            continue
        conv = await store.find_conversation(user_id, ident[0])
        ctx = await pipeline.assemble_context(user_id=user_id, surface=ident[0], conversation_id=conv,
                                              current_message_id=None, text=query)
        check_text(model, ident, "\n".join(m.content for m in ctx.messages[:-1]))
        data = await store.inspect(await store.identity_handle(*ident))
        check_text(model, ident, "\n".join(m["content"] for c in data["conversations"] for m in c["messages"]))
        mine = {m["id"] for c in data["conversations"] for m in c["messages"]}
        found = await store.search_vectors(user_id, [0.5, 0.5, 0.5, 0.5], SameVector.name, limit=100)
        assert set(found) <= mine, f"{ident} finds vectors of messages {set(found) - mine} not theirs"
        assert len(found) == len(mine), f"{ident}: {len(mine)} messages, {len(found)} with vectors found"


def test_no_person_ever_sees_another_persons_words(backend: Backend) -> None:
    @settings(max_examples=EXAMPLES[backend.name], deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(operation, min_size=1, max_size=25))
    def example(ops: list[tuple[Any, ...]]) -> None:
        asyncio.run(run(backend, ops))

    example()
