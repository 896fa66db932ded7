"""The pipeline, the app and the surfaces' Runtime take a typed Chain, not `Any` (issue 10, item 7): the real
chain and the tests' fakes satisfy it (mypy strict checks the real one where the app hands it on)."""

from __future__ import annotations

import inspect
import typing

from bot.config import Settings
from bot.models.factory import build_chain


def test_the_seams_are_typed_with_the_chain_protocol() -> None:
    from bot.app import create_app
    from bot.models.base import Chain
    from bot.pipeline import Pipeline
    from bot.runtime import Runtime

    assert typing.get_type_hints(Pipeline.__init__)["chain"] is Chain
    from bot.tasks import TaskSet

    names = {"Settings": Settings, "Pipeline": Pipeline, "TaskSet": TaskSet, "Chain": Chain}
    assert typing.get_type_hints(Runtime, localns=names)["chain"] is Chain
    assert typing.get_type_hints(create_app)["chain"] == Chain | None
    assert {"complete", "stream", "aclose"} <= {name for name, _ in inspect.getmembers(Chain)}


def test_the_real_chain_and_the_fakes_satisfy_it() -> None:
    from bot.models.base import Chain
    from tests.test_turn_lease import HeldChain

    chain = build_chain(Settings())
    assert isinstance(chain, Chain)
    assert isinstance(HeldChain(chain), Chain)
