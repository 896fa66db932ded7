"""The `extract` job: memories taken from people's messages by the configured model, in the background.

Every EVERY_SECONDS one process (bot/jobs.py) asks the store who has at least HILO_EXTRACT_EVERY new messages
since their watermark (memory/sql_extract.py), at most PEOPLE_PER_RUN of them, and for each:
1. reads their next batch (their own messages after the watermark, oldest first, at most BATCH_MESSAGES and
   BATCH_CHARS) and what is remembered about them already;
2. asks the chain for a structured answer (bot/extract.py: the messages quoted as data under instructions that
   they are not instructions; bot/models/structured.py) through the chain's retry policy, on a chain of its own
   circuit breakers (`ModelChain.sibling`): an extraction that fails never opens a turn's circuit;
3. keeps what validates as memories of source "inferred" (confidence 0.7) with their source message ids, and
   advances the watermark past the batch, in ONE transaction (a crash before it: the same batch again).
Every model call it made (answered or failed) is kept in model_calls with purpose "extract", as a turn's are.
When every model failed (the run stops there: the others wait for the next run), or the answer is no usable
JSON, nothing is written and the person's batch waits
(RETRY_SECONDS, doubling per failure, at most MAX_RETRY_SECONDS); after GIVE_UP unusable answers in a row for
one batch it is passed over (its messages stay stored, searchable as ever). A failing model is retried forever.
Logs carry user ids, message ids, counts and sizes, never text.

With the offline `echo` model (or HILO_EXTRACT_EVERY=0) there is no job: `build` says why, once, at start.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from bot import metrics
from bot.config import Settings
from bot.jobs import JobContext
from bot.models.base import AllModelsFailed, Chain, ChainResult
from bot.models.structured import OutputSchema, StructuredChain, background_chain
from bot.spend import paying
from kernel import log, tokens
from kernel.types import ChatMessage
from memory.sql_extract import ExtractionDue
from memory.store import MemoryDraft, Store, StoredMessage

if TYPE_CHECKING:
    from bot.extract import Parsed

logger = log.get("hilo.extract")

#: How often the job looks for people due (seconds).
EVERY_SECONDS = 30.0
#: People extracted per run, those waiting longest first; the rest wait for the next run.
PEOPLE_PER_RUN = 10
#: A batch: at most this many messages and (after the first) characters.
BATCH_MESSAGES, BATCH_CHARS = 40, 16_000
#: Already-remembered memories shown to the model, newest first.
REMEMBERED_LIMIT = 50
#: The wait after a failed extraction, doubled per failure in a row, capped.
RETRY_SECONDS, MAX_RETRY_SECONDS = 60.0, 3600.0
#: Unusable answers in a row after which a batch is passed over.
GIVE_UP = 4
#: Why there is no extraction when no model can give structured answers (also the summaries' reason).
NO_MODEL = ("no model that can write memories: the echo model is offline; set HILO_MODEL to an openai: or "
            "anthropic: model for automatic memories and episode summaries")
#: What extracted memories are: inferred by the model (confidence by source: 0.7).
SOURCE = "inferred"
#: Its model calls' purpose in model_calls (every call, failed or not, as a turn's are).
PURPOSE = "extract"


class Extractor:
    """Runs extraction for the people due; `run` is the job."""

    def __init__(self, settings: Settings, store: Store, chain: StructuredChain) -> None:
        self.every = settings.extract_every
        self.store = store
        self.chain = chain

    async def run(self, ctx: JobContext) -> None:
        for person in await self.store.extraction_due(self.every, PEOPLE_PER_RUN):
            if not await self.extract(person, ctx.run_id):
                return  # every model failed: the others wait for the next run instead of failing too

    async def extract(self, person: ExtractionDue, run_id: str) -> bool:
        """One person's next batch (see the module docstring); False when every model failed."""
        batch, remembered = await self.store.extraction_batch(person.user_id, person.done_id, BATCH_MESSAGES,
                                                              REMEMBERED_LIMIT)
        batch = within(batch, BATCH_CHARS)
        fields = {"run": run_id, "user_id": person.user_id, "messages": len(batch),
                  "first_id": batch[0].id if batch else None, "last_id": batch[-1].id if batch else None}
        if not batch:  # counted, then gone (forgotten): nothing to send
            await self.store.keep_extraction(person.user_id, person.done_id, None, [])
            return True
        # pydantic (the answer's schema) loads with the first extraction: the echo model never extracts
        from bot.extract import SCHEMA, Remembered, UnusableAnswer, parse, request

        shown = [Remembered(m.id, m.kind, m.content) for m in remembered]
        try:
            result = await complete_recorded(self.store, self.chain, person.user_id, PURPOSE, request(batch, shown),
                                             SCHEMA)
        except AllModelsFailed as exc:
            await self._failed(person, fields, "models_failed", calls=len(exc.calls))
            return False
        try:
            if result.completion.outcome != "ok":
                raise UnusableAnswer(result.completion.outcome)
            parsed = parse(result.text, {m.id for m in batch}, {m.id for m in shown})
        except UnusableAnswer:
            if person.failures + 1 >= GIVE_UP:
                await self.store.keep_extraction(person.user_id, batch[-1].id, len(batch), [])
                logger.warning("extract.gave_up", outcome=result.completion.outcome, chars=len(result.text),
                               failures=person.failures + 1, **fields)
                return True
            await self._failed(person, fields, "unusable_answer", outcome=result.completion.outcome,
                               chars=len(result.text))
            return True
        _log_dropped(parsed, fields)
        added = await self.store.keep_extraction(person.user_id, batch[-1].id, len(batch), drafts(parsed))
        logger.info("extract.done", model=result.spec.label, memories=len(parsed.kept), dropped=len(parsed.dropped),
                    outcomes=",".join(a.outcome for a in added), **fields)
        return True

    async def _failed(self, person: ExtractionDue, fields: dict[str, object], why: str, **extra: object) -> None:
        wait = min(MAX_RETRY_SECONDS, RETRY_SECONDS * 2 ** person.failures)
        await self.store.fail_extraction(person.user_id, self.store.clock() + timedelta(seconds=wait))
        logger.warning(f"extract.{why}", retry_s=wait, failures=person.failures + 1, **extra, **fields)


async def complete_recorded(store: Store, chain: StructuredChain, user_id: int, purpose: str,
                            messages: Sequence[ChatMessage], schema: OutputSchema) -> ChainResult:
    """A background job's structured call, every model call of it kept in model_calls with `purpose` (as a turn's
    are), the failed ones too: AllModelsFailed is raised on after its calls are kept. The calls count against the
    person's spend caps (bot/spend.py: CapReached, an AllModelsFailed, when a cap refuses; the job tries later)."""
    try:
        with paying(user_id):
            result = await chain.complete_json(messages, schema)
    except AllModelsFailed as exc:
        metrics.observe_calls(exc.calls, kind=purpose)
        await store.record_model_calls(user_id, purpose, exc.calls)
        raise
    metrics.observe_calls(result.calls, kind=purpose, answered=True)
    await store.record_model_calls(user_id, purpose, result.calls)
    return result


def drafts(parsed: Parsed) -> list[MemoryDraft]:
    """The kept items as memories to add: inferred, with their source messages."""
    return [MemoryDraft(content=m.content, kind=m.kind, key=m.key, importance=m.importance, source=SOURCE,
                        source_message_ids=tuple(m.source_ids), token_count=tokens.count(m.content),
                        supersedes=m.supersedes) for m in parsed.kept]


def within(batch: Sequence[StoredMessage], chars: int) -> list[StoredMessage]:
    """The oldest messages of `batch` within `chars` characters (the first one always)."""
    out: list[StoredMessage] = []
    total = 0
    for m in batch:
        total += len(m.content)
        if out and total > chars:
            break
        out.append(m)
    return out


def _log_dropped(parsed: Parsed, fields: dict[str, object]) -> None:
    for d in parsed.dropped:
        logger.warning("extract.dropped", index=d.index, reason=d.reason, chars=d.chars, **fields)


def build(settings: Settings, store: Store, chain: Chain | None) -> Extractor | None:
    """The extractor for `settings`, or None (said once, with why): HILO_EXTRACT_EVERY=0, or no model of the
    chain can answer with structured output (the offline echo model cannot)."""
    if settings.extract_every == 0:
        logger.info("extract.off", reason="HILO_EXTRACT_EVERY=0")
        return None
    background = background_chain(chain)
    if background is None:
        logger.info("extract.off", reason=NO_MODEL)
        return None
    return Extractor(settings, store, background)
