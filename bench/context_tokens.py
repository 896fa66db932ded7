"""Benchmark: tokens sent per request at turns 10, 30 and 50 of a conversation (issue 14 item e), hilo beside
sending the full history and beside the seed pattern's 24-hour window, with the recall each gets.

The people and their months of history are bench/memory_corpus.py's (English and Spanish, three surfaces, facts
planted, questions whose evidence is known), imported into a real SQLite store. Each person then holds one new
web conversation of 50 turns, one minute apart, starting when the corpus' questions are asked (six hours after
its last message): everyday lines (bench/memory_filler.py) answered by everyday lines, except that turns 10, 30
and 50 are the person's own questions (cycled). At those turns:

  hilo          `Pipeline.assemble_context` at the configured budget (HILO_CONTEXT_BUDGET, default 8,000; no
                embedder): its `tokens.total`, and the share of the question's evidence among its items
  full history  every stored message of the person (the corpus and the conversation so far) plus the system
                prompt and the question: what a bot that sends everything sends; recall 1 by construction
  seed 24 h     the person's messages of the last 24 hours (the seed pattern's window) plus the system prompt
                and the question; recall = the share of evidence inside the window

A message costs its content's tokens (kernel/tokens.py, as stored) plus 4 for the chat format, for the two
baselines; hilo's figure is its own count of what it sends. Writes bench/results/context_tokens.json. Not a test.

    python bench/context_tokens.py [--people 8] [--messages-per-person 1500] [--days 180] [--seed 11]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.memory_corpus import Corpus, Question, generate
from bench.memory_filler import assistant_line, user_line
from bench.memory_stores import load
from bot.config import Settings
from bot.pipeline import Pipeline
from kernel import log, tokens
from kernel.types import InboundMessage
from memory.open import open_store

AT_TURNS = (10, 30, 50)
#: what the chat format adds per message (role and separators), for the baselines' counts
PER_MESSAGE = 4
WINDOW = timedelta(hours=24)


class Clock:
    """The store's clock, moved by the bench: the conversation happens after the corpus, not today."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at


async def converse(pipeline: Pipeline, store: Any, clock: Clock, corpus: Corpus, handle: str, lang: str,
                   questions: list[Question], rng: random.Random) -> list[dict[str, Any]]:
    """One person's 50-turn web conversation; the figures at AT_TURNS."""
    history = [(m.created_at, tokens.count(m.content) + PER_MESSAGE, m.external_id) for m in corpus.by_user(handle)]
    system = tokens.count(pipeline.settings.system_prompt) + PER_MESSAGE
    uid = await store.user_id(handle)
    cid: int | None = None
    out = []
    for turn in range(1, max(AT_TURNS) + 1):
        clock.at = corpus.now + timedelta(minutes=turn)
        question = questions[(AT_TURNS.index(turn)) % len(questions)] if turn in AT_TURNS else None
        text = question.text if question is not None else user_line(lang, rng)
        n = tokens.count(text)
        msg = InboundMessage(surface="web", sender=f"bench-{handle}", external_id=f"ct-{handle}-{turn}",
                             text=text, received_at=clock.at, handle=handle,
                             conversation_ref=str(cid) if cid is not None else None)
        taken = await store.ingest(msg, n)
        cid = taken.conversation_id
        ctx = await pipeline.assemble_context(
            user_id=uid, surface="web", conversation_id=cid, current_message_id=taken.message.id, text=text,
            n_tokens=n, at=clock.at)
        if question is not None:
            found = {i.external_id for i in ctx.items if i.external_id is not None}
            window = [h for h in history if h[0] >= clock.at - WINDOW]
            in_window = {h[2] for h in window}
            evidence = set(question.evidence)
            out.append({
                "turn": turn, "question": question.id, "kind": question.kind,
                "hilo_tokens": ctx.tokens["total"],
                "hilo_recall": len(evidence & found) / len(evidence),
                "full_tokens": system + sum(h[1] for h in history) + n + PER_MESSAGE,
                "window_tokens": system + sum(h[1] for h in window) + n + PER_MESSAGE,
                "window_recall": len(evidence & in_window) / len(evidence),
            })
        reply = assistant_line(lang, rng)
        await store.finish_turn(taken, reply, tokens.count(reply), [])
        history += [(clock.at, n + PER_MESSAGE, msg.external_id), (clock.at, tokens.count(reply) + PER_MESSAGE, None)]
    return out


def table(cells: list[dict[str, Any]], budget: int) -> tuple[str, dict[str, Any]]:
    lines = [f"| turn | hilo tokens (budget {budget:,}) | full history tokens | seed 24 h tokens | hilo / full | "
             "hilo recall | full recall | seed 24 h recall |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    summary: dict[str, Any] = {}
    for turn in AT_TURNS:
        at = [c for c in cells if c["turn"] == turn]
        row = {k: statistics.mean(c[k] for c in at) for k in
               ("hilo_tokens", "full_tokens", "window_tokens", "hilo_recall", "window_recall")}
        row["questions"] = len(at)
        summary[str(turn)] = row
        lines.append(f"| {turn} | {row['hilo_tokens']:,.0f} | {row['full_tokens']:,.0f} | "
                     f"{row['window_tokens']:,.0f} | {row['hilo_tokens'] / row['full_tokens']:.3f} | "
                     f"{row['hilo_recall']:.3f} | 1.000 | {row['window_recall']:.3f} |")
    return "\n".join(lines), summary


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--people", type=int, default=8)
    ap.add_argument("--messages-per-person", type=int, default=1500)
    ap.add_argument("--days", type=int, default=180)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "context_tokens.json")
    args = ap.parse_args()
    log.configure(level="warning")
    t0 = time.perf_counter()
    corpus = generate(args.seed, args.people, args.messages_per_person, args.days)
    settings = Settings.from_mapping({"HILO_EMBEDDER": "none"})
    clock = Clock(corpus.now)
    cells: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"sqlite:///{tmp}/tokens.db", clock=clock)
        await store.open()
        try:
            await load(store, corpus)
            pipeline = Pipeline(settings, store, chain=None)  # type: ignore[arg-type]
            for k, person in enumerate(corpus.people):
                questions = [q for q in corpus.questions if q.user == person.handle]
                if questions:
                    cells += await converse(pipeline, store, clock, corpus, person.handle, person.lang, questions,
                                            random.Random(f"{args.seed}:{k}"))
        finally:
            await store.close()
    text, summary = table(cells, settings.context_budget)
    print(f"{len(corpus.people)} people, {len(corpus.messages):,} messages of history, {len(cells)} questions "
          f"asked at turns {', '.join(map(str, AT_TURNS))}; {time.perf_counter() - t0:.0f} s\n")
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"budget": settings.context_budget, "people": len(corpus.people),
                                    "messages": len(corpus.messages), "at_turns": summary, "cells": cells},
                                   indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    asyncio.run(main())
