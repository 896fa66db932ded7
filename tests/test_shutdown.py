"""Shutdown within ONE budget measured from SIGTERM (HILO_STOP_TIMEOUT), which fits the stop timeouts of the shipped
PM2 and systemd files: uvicorn's graceful wait, the jobs' drain, the surfaces' stop and the turns' drain share it,
and what still runs when it is spent is cancelled and logged. A turn cancelled so loses nothing: the person's
message is stored, and the same message sent again after the restart is answered (the pipeline's resume path).

The serve test runs a real `hilo serve` whose model (the fake provider) never answers: a streamed web turn is in
flight (its `meta` event said the message is stored, and the fake received the model call) when SIGTERM comes."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import httpx

from bot import daemon
from bot.config import Settings
from bot.jobs import DRAIN_SECONDS
from bot.shutdown import AFTER_REQUESTS, ANSWER_MARGIN, StopBudget
from tests.fakes.model_server import FakeModelServer, slow
from tests.fakes.serve_process import REPO, ServeProcess, serving, stop_within

#: Seconds the deploy files leave after the default budget, to close the model chain and the store.
MARGIN = 4.0
#: The test's own budget (seconds): short, so that the test is fast. Like a supervisor, the test gives hilo
#: MARGIN s more before it calls the stop failed.
STOP = 2.0


def kill_timeouts() -> tuple[float, float]:
    """After how many seconds from SIGTERM PM2 (kill_timeout) and systemd (TimeoutStopSec) kill hilo."""
    pm2 = int(re.search(r"kill_timeout:\s*(\d+)", (REPO / "deploy" / "ecosystem.config.js").read_text())[1]) / 1000
    systemd = int(re.search(r"^TimeoutStopSec=(\d+)$", (REPO / "deploy" / "hilo.service").read_text(), re.M)[1])
    return pm2, systemd


def test_the_stop_budget_fits_the_stop_timeouts_pm2_and_systemd_give() -> None:
    pm2, systemd = kill_timeouts()
    budget = Settings().stop_timeout
    assert Settings.from_mapping({}).stop_timeout == budget
    assert budget + MARGIN <= min(pm2, systemd), (budget, pm2, systemd)
    # the caps of the phases inside it: uvicorn's graceful wait, then the jobs' drain, with time left after both
    assert budget > daemon.GRACEFUL_SECONDS + DRAIN_SECONDS


def test_the_docker_image_stops_within_the_10_s_docker_stop_gives() -> None:
    """`docker stop` sends SIGTERM, then SIGKILL after 10 s unless told otherwise (--stop-timeout / -t): the image
    sets a budget that fits those 10 s with the same margin."""
    dockerfile = (REPO / "deploy" / "Dockerfile").read_text()
    found = re.search(r"^ENV\b.*\bHILO_STOP_TIMEOUT=(\d+(?:\.\d+)?)\b", dockerfile, re.M)
    assert found, "deploy/Dockerfile leaves HILO_STOP_TIMEOUT at its default (36 s): docker stop kills at 10 s"
    budget = Settings.from_mapping({"HILO_STOP_TIMEOUT": found[1]}).stop_timeout
    assert budget + MARGIN <= 10, budget


def test_the_budget_is_measured_from_the_signal_and_shared_by_the_phases() -> None:
    now = [100.0]
    budget = StopBudget(10.0, clock=lambda: now[0])
    budget.begin()
    now[0] += 3.0
    budget.begin()  # a second signal does not extend it
    assert budget.left() == 7.0
    assert budget.left(5.0) == 5.0  # a phase's own cap
    assert budget.for_requests(30.0) == 7.0 - AFTER_REQUESTS  # uvicorn leaves the later phases their share
    now[0] += 6.5
    assert (budget.left(5.0), budget.for_requests(30.0)) == (0.5, 0.0)
    now[0] += 1.0
    assert budget.left() == 0.0
    unsignalled = StopBudget(10.0, clock=lambda: now[0])  # a stop without a signal: it begins at the first look
    assert unsignalled.left() == 10.0


async def test_the_requests_bound_comes_only_after_a_stop_began() -> None:
    budget = StopBudget(ANSWER_MARGIN + AFTER_REQUESTS + 0.2)
    bound = budget.requests_bound()
    assert not bound.done()  # no stop yet: a request waits for its turn as long as it takes
    asyncio.get_running_loop().call_soon(budget.begin)  # as the signal handler does
    await asyncio.wait_for(asyncio.shield(bound), 5.0)  # due ANSWER_MARGIN s before uvicorn's wait would end
    assert budget.requests_bound() is bound  # one future for every request


def events(proc: ServeProcess) -> list[dict[str, object]]:
    return [json.loads(line) for line in list(proc.out) if line.startswith("{")]


async def visitor(client: httpx.AsyncClient, url: str) -> dict[str, str]:
    """The headers of a new anonymous web visitor (each visitor has a conversation of their own)."""
    return {"Authorization": "Bearer " + (await client.post(url + "/api/session")).json()["session"]}


async def test_sigterm_with_turns_in_flight_stops_within_the_budget_and_the_turns_are_resumed_after_restart(
    tmp_path: Path, model_server: FakeModelServer,
) -> None:
    env = {"HILO_DATABASE_URL": f"sqlite:///{tmp_path}/hilo.db", "HILO_SECRET_KEY": "k" * 43,
           "HILO_LOG_FORMAT": "json", "HILO_MODEL": "openai:m1", "OPENAI_API_KEY": "x",
           "OPENAI_BASE_URL": model_server.base_url + "/v1", "HILO_MODEL_ATTEMPTS": "1",
           "HILO_STOP_TIMEOUT": str(STOP)}
    # one turn inside its request (POST /api/messages: uvicorn's graceful wait), one in a tracked task that
    # streams (POST /api/messages/stream: the turns' drain)
    plain = {"text": "is anybody there", "client_message_id": "c-1"}
    streamed = {"text": "hello from the stream", "client_message_id": "c-2"}
    model_server.enqueue(slow(600.0), slow(600.0))  # never answer while the daemon lives
    with serving(tmp_path, env) as one:
        async with httpx.AsyncClient(timeout=60) as client:
            first, second = await visitor(client, one.url), await visitor(client, one.url)
            waiting = asyncio.create_task(client.post(one.url + "/api/messages", json=plain, headers=first))
            async with client.stream("POST", one.url + "/api/messages/stream", json=streamed,
                                     headers=second) as sse:
                assert sse.status_code == 200
                async for line in sse.aiter_lines():
                    if line == "event: meta":  # the person's message is stored
                        break
                await model_server.wait_requests(2)  # both turns wait for the model
                status = await stop_within(one, STOP + MARGIN)
            answered = await waiting  # at the stop's bound, before uvicorn would cut it off (a 500 before)
    assert answered.status_code == 503 and answered.headers["retry-after"].isdigit(), answered.text
    assert answered.json()["error"] == "restarting_kept"
    assert status == 0, one.lines
    logged = events(one)
    names = [e["event"] for e in logged]
    assert "daemon.stopped" in names, names
    cancelled = [e for e in logged if e["event"] == "turn.cancelled"]
    assert len(cancelled) == 2, names
    assert all(isinstance(e["message_id"], int) and isinstance(e["duration_ms"], int) for e in cancelled)
    assert sorted(e["task"] for e in logged if e["event"] == "task.cancelled") == ["web.stream_turn", "web.turn"]
    assert not [line for line in one.lines if plain["text"] in line or streamed["text"] in line], \
        "a log line quotes a message"

    with serving(tmp_path, env) as two:  # the model answers now
        async with httpx.AsyncClient(timeout=60) as client:
            for body, headers in ((plain, first), (streamed, second)):
                again = await client.post(two.url + "/api/messages", json=body, headers=headers)
                assert again.status_code == 200, again.text
                answer = again.json()
                reply = f"fake reply to: {body['text']}"
                assert (answer["status"], answer["reply"]) == ("ok", reply), answer
                history = await client.get(f"{two.url}/api/conversations/{answer['conversation_id']}/messages",
                                           headers=headers)
                assert [m["content"] for m in history.json()["messages"]] == [body["text"], reply]
    resumed = [e["message_id"] for e in events(two) if e["event"] == "turn.resumed"]
    assert sorted(resumed) == sorted(e["message_id"] for e in cancelled)
