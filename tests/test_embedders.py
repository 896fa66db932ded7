"""Embedders (bot/embedders/): the OpenAI-compatible one through the real openai SDK against the loopback fake
provider's /v1/embeddings (tests/fakes/embeddings_api.py), the local model for real, the factory from Settings and
the one start-up line. No test sleeps for real: the retry waits are recorded."""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
import structlog.testing

from bot.config import Settings
from bot.embedders import local
from bot.embedders.base import Embedder, EmbeddingError, Kind, unit
from bot.embedders.factory import announce, build_embedder
from bot.embedders.local import LocalEmbedder, LocalModel
from bot.embedders.none import NoEmbedder
from bot.embedders.openai_compat import OpenAIEmbedder
from bot.retry import RetryPolicy
from kernel.errors import ConfigError
from tests.fakes.embeddings_api import floats_only, out_of_order, vector_of
from tests.fakes.model_server import FakeModelServer, rate_limited, status
from tests.fakes.serve_process import serving


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
async def make_embedder(model_server: FakeModelServer, sleeps: list[float]
                        ) -> AsyncIterator[Callable[..., OpenAIEmbedder]]:
    made: list[OpenAIEmbedder] = []

    async def record(seconds: float) -> None:
        sleeps.append(seconds)

    def make(model: str = "embed-fake", batch_size: int = 128) -> OpenAIEmbedder:
        embedder = OpenAIEmbedder(model=model, api_key="sk-test", base_url=f"{model_server.base_url}/v1",
                                  timeout=5, batch_size=batch_size, policy=RetryPolicy(attempts=3, sleep=record))
        made.append(embedder)
        return embedder

    yield make
    for embedder in made:
        await embedder.aclose()


def close(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-7) for x, y in zip(a, b, strict=True))


TEXTS = ["my dog is called Rufo", "vivo en Lisboa", "I bought a bike", "tengo alergia al marisco", "hello"]


async def test_batches_split_and_vectors_come_back_in_input_order(
    make_embedder: Callable[..., OpenAIEmbedder], model_server: FakeModelServer,
) -> None:
    embedder = make_embedder(batch_size=2)
    vectors = await embedder.embed(TEXTS, kind="passage")
    assert [r.body["input"] for r in model_server.requests] == [TEXTS[0:2], TEXTS[2:4], TEXTS[4:5]]
    assert all(r.path == "/v1/embeddings" and r.body["model"] == "embed-fake" for r in model_server.requests)
    assert {r.body["encoding_format"] for r in model_server.requests} == {"base64"}
    assert all(close(v, unit(vector_of(t))) for v, t in zip(vectors, TEXTS, strict=True))
    assert embedder.dim == 8  # an unknown model's size comes from its first answer


async def test_an_answer_out_of_order_is_put_back_by_index(
    make_embedder: Callable[..., OpenAIEmbedder], model_server: FakeModelServer,
) -> None:
    model_server.enqueue(out_of_order())
    vectors = await make_embedder().embed(TEXTS, kind="query")
    assert all(close(v, unit(vector_of(t))) for v, t in zip(vectors, TEXTS, strict=True))


async def test_a_server_that_sends_floats_instead_of_base64_is_read_too(
    make_embedder: Callable[..., OpenAIEmbedder], model_server: FakeModelServer,
) -> None:
    model_server.enqueue(floats_only())
    vectors = await make_embedder().embed(TEXTS[:2], kind="passage")
    assert all(close(v, unit(vector_of(t))) for v, t in zip(vectors, TEXTS, strict=False))


async def test_429_with_retry_after_is_retried_by_the_one_policy(
    make_embedder: Callable[..., OpenAIEmbedder], model_server: FakeModelServer, sleeps: list[float],
) -> None:
    model_server.enqueue(rate_limited(2))
    vectors = await make_embedder().embed(["hello"], kind="query")
    assert close(vectors[0], unit(vector_of("hello")))
    assert sleeps == [2.0]
    assert len(model_server.requests) == 2


async def test_a_400_is_a_clear_error_and_not_retried(
    make_embedder: Callable[..., OpenAIEmbedder], model_server: FakeModelServer, sleeps: list[float],
) -> None:
    model_server.enqueue(status(400))
    with pytest.raises(EmbeddingError) as caught:
        await make_embedder().embed(["hello"], kind="query")
    assert caught.value.status == 400
    assert str(caught.value) == ("openai:embed-fake: request refused (HTTP 400); check the key, model name and "
                                 "base URL (after 1 attempt(s))")
    assert len(model_server.requests) == 1 and sleeps == []


async def test_a_server_down_gives_up_after_the_policy_s_attempts(
    make_embedder: Callable[..., OpenAIEmbedder], model_server: FakeModelServer, sleeps: list[float],
) -> None:
    model_server.enqueue(status(503), status(503), status(503))
    with pytest.raises(EmbeddingError) as caught:
        await make_embedder().embed(["hello"], kind="passage")
    assert caught.value.status == 503
    assert len(model_server.requests) == 3 and len(sleeps) == 2


async def test_empty_texts_are_sent_as_a_space_and_nothing_is_sent_for_no_texts(
    make_embedder: Callable[..., OpenAIEmbedder], model_server: FakeModelServer,
) -> None:
    embedder = make_embedder()
    assert await embedder.embed([], kind="passage") == []
    assert model_server.requests == []
    vectors = await embedder.embed(["", "hi"], kind="passage")
    assert model_server.requests[0].body["input"] == [" ", "hi"]
    assert len(vectors) == 2


async def test_a_known_openai_model_declares_its_size_and_refuses_another(
    make_embedder: Callable[..., OpenAIEmbedder], model_server: FakeModelServer,
) -> None:
    embedder = make_embedder(model="text-embedding-3-small")
    assert embedder.dim == 1536
    with pytest.raises(EmbeddingError, match=r"vectors of \[8\] floats, expected 1536"):
        await embedder.embed(["hello"], kind="query")


# -- the local model, for real ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def local_embedder() -> Iterator[LocalEmbedder]:
    """One model for the module (it loads on its worker thread at the first embed, whichever loop asks)."""
    embedder = LocalEmbedder()
    yield embedder
    asyncio.run(embedder.aclose())


async def test_the_local_model_is_deterministic_normalized_and_of_its_declared_size(
    local_embedder: LocalEmbedder,
) -> None:
    await local_embedder.start()
    assert isinstance(local_embedder, Embedder)
    assert local_embedder.name == "local:use-multilingual-v3"
    first, again, other = await local_embedder.embed(["Vivo en Sevilla", "Vivo en Sevilla", "I live in Leeds"],
                                                     kind="passage")
    # the same text twice in one batch: the same vector to float32 precision (not bit for bit: BLAS may compute two
    # rows of one product through different kernels; on an AMD EPYC they differed by ~5e-8)
    assert max(abs(a - b) for a, b in zip(first, again, strict=True)) < 1e-6
    assert max(abs(a - b) for a, b in zip(first, other, strict=True)) > 1e-2
    assert len(first) == local_embedder.dim == 512
    assert math.isclose(math.fsum(x * x for x in first), 1.0, rel_tol=1e-5)


async def test_a_spanish_question_is_closer_to_its_answer_than_to_distractors(local_embedder: LocalEmbedder) -> None:
    [question] = await local_embedder.embed(["¿Qué mascota tengo?"], kind="query")
    answer, *distractors = await local_embedder.embed([
        "Nuestra gata Misha tiró la planta de la estantería.",  # shares no word with the question
        "Turnos de noche de diez a seis en el almacén.",
        "Me hice con unas zapatillas de correr nuevas en el centro comercial.",
    ], kind="passage")

    def cosine(v: list[float]) -> float:
        return math.fsum(a * b for a, b in zip(question, v, strict=True))

    assert all(cosine(answer) > cosine(d) for d in distractors), [cosine(v) for v in (answer, *distractors)]


async def test_a_local_model_loads_once_and_runs_only_on_its_one_worker_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, str]] = []

    def load(threads: int) -> Callable[[list[str], Kind], list[list[float]]]:
        seen.append(("load", threading.current_thread().name))

        def embed(texts: list[str], kind: Kind) -> list[list[float]]:
            seen.append((kind, threading.current_thread().name))
            return [[3.0, 4.0] for _ in texts]

        return embed

    monkeypatch.setitem(local.MODELS, "two-floats", LocalModel("two-floats", "json", "json", 2, load))
    embedder = LocalEmbedder("two-floats")
    try:
        one, two = await asyncio.gather(embedder.embed(["a"], kind="query"), embedder.embed(["b", "c"], kind="passage"))
    finally:
        await embedder.aclose()
    assert all(close(v, [0.6, 0.8]) for v in [*one, *two]) and len(two) == 2  # unit length
    assert sorted(kind for kind, _ in seen) == ["load", "passage", "query"]
    assert {name for _, name in seen} == {"hilo-embed_0"}


# -- the factory and the start-up line --------------------------------------------------------------------------
def test_settings_read_the_embedder_names() -> None:
    s = Settings.from_mapping({})
    assert (s.embedder, s.embedding_model, s.embedding_url, s.embedding_api_key) == ("auto", "", "", "")
    s = Settings.from_mapping({"HILO_EMBEDDER": "openai", "OPENAI_API_KEY": "sk-1",
                               "OPENAI_BASE_URL": "https://openrouter.example/api/v1"})
    assert (s.embedding_api_key, s.embedding_url) == ("sk-1", "https://openrouter.example/api/v1")
    # an embeddings server of its own never gets the OpenAI key
    s = Settings.from_mapping({"HILO_EMBEDDER": "openai", "OPENAI_API_KEY": "sk-1",
                               "HILO_EMBEDDING_URL": "http://127.0.0.1:11434/v1"})
    assert (s.embedding_api_key, s.embedding_url) == ("", "http://127.0.0.1:11434/v1")
    with pytest.raises(ConfigError, match="HILO_EMBEDDER='bert': set it to none, local or openai"):
        Settings.from_mapping({"HILO_EMBEDDER": "bert"})
    with pytest.raises(ConfigError, match="HILO_EMBEDDER=openai needs OPENAI_API_KEY"):
        Settings.from_mapping({"HILO_EMBEDDER": "openai"})
    with pytest.raises(ConfigError, match="HILO_EMBEDDING_URL='localhost:11434' is not a URL"):
        Settings.from_mapping({"HILO_EMBEDDING_URL": "localhost:11434"})


async def test_the_factory_builds_what_settings_ask_for(model_server: FakeModelServer) -> None:
    assert isinstance(build_embedder(Settings.from_mapping({})), LocalEmbedder)  # installed by default here
    assert isinstance(build_embedder(Settings.from_mapping({"HILO_EMBEDDER": "none"})), NoEmbedder)
    remote = build_embedder(Settings.from_mapping({"HILO_EMBEDDER": "openai",
                                                   "HILO_EMBEDDING_URL": f"{model_server.base_url}/v1"}))
    assert remote.name == "openai:text-embedding-3-small" and remote.dim == 1536
    await remote.aclose()
    with pytest.raises(ConfigError, match="HILO_EMBEDDING_MODEL='bge-m3' is no local model"):
        build_embedder(Settings.from_mapping({"HILO_EMBEDDER": "local", "HILO_EMBEDDING_MODEL": "bge-m3"}))
    assert await NoEmbedder().embed(["a", "b"], kind="query") == [[], []]


def test_without_the_local_package_it_is_lexical_only_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    # a model whose package cannot be imported here, as on a platform without its wheel
    missing = LocalModel("missing-model", "hilo_no_such_package", "hilo-no-such-package", 4, lambda threads: None)
    monkeypatch.setitem(local.MODELS, "missing-model", missing)
    monkeypatch.setattr(local, "DEFAULT_MODEL", "missing-model")
    settings = Settings.from_mapping({})
    embedder = build_embedder(settings)
    assert isinstance(embedder, NoEmbedder)
    with structlog.testing.capture_logs() as logs:
        announce(settings, embedder)
    assert logs == [{"event": "embedder.none", "log_level": "info", "retrieval": "lexical only",
                     "reason": "the hilo-no-such-package package is not installed here "
                               "(pip install hilo-no-such-package)"}]
    with pytest.raises(ConfigError, match="HILO_EMBEDDER=local needs the hilo-no-such-package package"):
        build_embedder(Settings.from_mapping({"HILO_EMBEDDER": "local"}))


def test_hilo_serve_says_once_which_embedder_runs(tmp_path: Path) -> None:
    for env, expected in (({}, "embedder=local:use-multilingual-v3"),
                          ({"HILO_EMBEDDER": "none"}, "reason='HILO_EMBEDDER=none'")):
        with serving(tmp_path, env) as daemon:
            daemon.terminate()
            assert daemon.wait() == 0
        lines = [line for line in daemon.lines if "embedder." in line]
        assert len(lines) == 1, daemon.lines
        assert expected in lines[0], lines[0]
