"""Isolation as a property: random sequences of messages, links, unlinks and forgets over many people and
surfaces never let one person's content reach another's context, inspect output, reply or vector search; nor
their memories (`/remember`): one person's /memory, `/forget <id>` and `/forget <words>`, and memory search never
reach another's.

A model of who is who runs beside the real store: `owner[word]` is the person a secret word belongs to,
`person[identity]` the person an identity is now. Links merge people, unlinks split an identity off (its
history stays behind), forgets delete a person. After every step each identity's context, echo reply and
inspect output may hold only its own person's words, and a vector search of its person only its person's
messages: every message gets the same vector (SameVector), so a search returns the newest of all it may see, and
any vector of someone else's would show. Memories get that vector too, so the embed job's vector merge makes one
memory of each person's (merged into their oldest) and would merge one person's with another's if it ever
compared them.

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
    st.tuples(st.just("remember"), identity),
    st.tuples(st.just("forget_id"), identity, st.integers(1, 12)),
    st.tuples(st.just("forget_words"), identity, st.integers(0, 12)),
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
        #: memory id -> its secret word (the owner of the word owns the memory)
        self.memory: dict[int, str] = {}

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
            elif kind == "remember":
                word = f"memo{next(words)}z"
                out = await say(pipeline, ident, f"/remember {word}")
                model.owner[word] = model.of(ident)
                [newest, *_] = await store.memories(await store.identity_user(*ident))
                assert newest.content == word
                model.memory[newest.id] = word
                check_text(model, ident, out)
            elif kind == "forget_id":
                await forget_one(store, pipeline, model, ident, op[2], f"/forget m{op[2]}")
            elif kind == "forget_words":
                word = next((w for i, w in sorted(model.memory.items()) if i % 13 == op[2]), f"memo{op[2]}nowhere")
                found = next((i for i, w in model.memory.items() if w == word), -1)
                await forget_one(store, pipeline, model, ident, found, f"/forget {word}")
            else:  # forget the person behind the identity
                handle = await store.identity_handle(*ident)
                if handle is None:
                    continue
                assert await store.forget(handle)
                gone = model.person[ident]
                model.owner = {w: p for w, p in model.owner.items() if p != gone}
                model.memory = {i: w for i, w in model.memory.items() if w in model.owner}
                model.person = {i: p for i, p in model.person.items() if p != gone}
            await check_everyone(store, pipeline, model)
    finally:
        await store.close()


_commands = itertools.count()


async def say(pipeline: Pipeline, ident: tuple[str, str], text: str) -> str:
    # each command its own delivery: a repeated external id is a redelivery (recorded, never run twice)
    out = await pipeline.handle(InboundMessage(surface=ident[0], sender=ident[1],
                                               external_id=f"{ident}-{text}-{next(_commands)}", text=text,
                                               conversation_ref=None))
    assert out.status == "command"
    return out.text


async def forget_one(store: Any, pipeline: Pipeline, model: Model, ident: tuple[str, str], memory_id: int,
                     command: str) -> None:
    """`/forget m<id>` or `/forget <word>`: forgets the memory only when it is the sender's own."""
    word = model.memory.get(memory_id)
    mine = word is not None and ident in model.person and model.owner[word] == model.person[ident]
    out = await say(pipeline, ident, command)
    check_text(model, ident, out)
    if mine:
        assert word is not None and word in out, f"{ident} could not forget its own {word}: {out}"
        del model.memory[memory_id]
        del model.owner[word]
    elif word is not None:  # someone else's: still there
        owner_ident = next(i for i, p in model.person.items() if p == model.owner[word])
        kept = await store.memory(await store.identity_user(*owner_ident), memory_id)
        assert kept is not None, f"{ident} forgot {word} of person {model.owner[word]}"


def check_text(model: Model, ident: tuple[str, str], text: str) -> None:
    me = model.person.get(ident)
    for word, owner in model.owner.items():
        if word in text:
            assert owner == me, f"{ident} sees {word} of person {owner}"


async def check_everyone(store: Any, pipeline: Pipeline, model: Model) -> None:
    assert pipeline.embedder is not None
    # what the embed job does: every message and memory gets its vector; SameVector makes all of one person's
    # memories near-duplicates, merged into their oldest, and everyone's memories alike: none may merge across
    merged = (await embed_pending(store, pipeline.embedder)).merged
    for person in set(model.person.values()):
        ident = next(i for i, p in model.person.items() if p == person)
        user_id = await store.identity_user(*ident)
        mine = {i: w for i, w in model.memory.items() if model.owner[w] == person}
        kept = {m.id: m.content for m in await store.memories(user_id)}
        assert set(kept.values()) <= set(mine.values()) and set(kept) <= set(mine), (ident, kept, mine)
        assert len(kept) == min(1, len(mine)), f"{ident}: {len(mine)} memories became {len(kept)}"
        assert await store.memory_embedding_progress(SameVector.name, user_id) == (len(kept), len(kept))
        merged -= len(mine) - len(kept)
        for i, w in mine.items():  # the model follows: the survivors, with the words they kept
            del model.memory[i]
            if w not in kept.values():
                del model.owner[w]
        model.memory.update(kept)
    assert merged == 0, "every merge was of one person's own memories"
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
        check_text(model, ident, "\n".join(m["content"] for m in data["memories"]))
        check_text(model, ident, await say(pipeline, ident, "/memory"))
        check_text(model, ident, "\n".join(m.content for m in await store.find_memories(user_id, query)))
        mine = {w for w, p in model.owner.items() if p == model.person[ident] and w.startswith("memo")}
        assert {m.content for m in await store.memories(user_id)} == mine
        own = {m["id"] for c in data["conversations"] for m in c["messages"]}
        found = await store.search_vectors(user_id, [0.5, 0.5, 0.5, 0.5], SameVector.name, limit=100)
        assert set(found) <= own, f"{ident} finds vectors of messages {set(found) - own} not theirs"
        assert len(found) == len(own), f"{ident}: {len(own)} messages, {len(found)} with vectors found"


def test_no_person_ever_sees_another_persons_words(backend: Backend) -> None:
    @settings(max_examples=EXAMPLES[backend.name], deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(operation, min_size=1, max_size=25))
    def example(ops: list[tuple[Any, ...]]) -> None:
        asyncio.run(run(backend, ops))

    example()
