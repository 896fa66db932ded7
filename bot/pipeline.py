"""One turn (docs/architecture.md, "One turn, as data"): dedup, identity, conversation, persist, context, model, store.

A turn costs five database calls: `ingest` (one write transaction: dedup, identity, conversation and
the person's message, stored BEFORE the model is called), taking the conversation's turn lease (with the
check that the message is still unanswered), `load_context` (one read transaction), `finish_turn` (one write
transaction: the turn's tool calls and results, reply and usage rows) and releasing the lease. With tools
(HILO_TOOLS), the model is asked through the bounded tool loop (bot/tools/loop.py): tools run with this turn's
person, never one the model names. With an embedder, the question is embedded (bounded by
HILO_EMBED_QUERY_TIMEOUT) just before `load_context`: the one embedding on a turn's path (bot/embedding.py).
Turns of one conversation run one at a time, in arrival order within a process (an in-process lock per
conversation), and one at a time across processes (the lease on the conversation row, memory/turn_lease.py, which
works through a transaction pooler too).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from bot import answers, assembly, commands, metrics, vision
from bot.admin import Admin
from bot.alerts import Alerts
from bot.config import Settings
from bot.embedders.base import Embedder
from bot.embedding import active
from bot.erasures import Erasures
from bot.export import ExportLinks, Exports
from bot.keyed import KeyedLocks
from bot.media_store import MediaFiles, media_files
from bot.models.base import CapReached, Chain
from bot.notices import Notices
from bot.opt_out import OptOut
from bot.outbox import Outbox, route_language, route_of
from bot.ports import Deliveries, History, RateLimits
from bot.spend import Meter, paying
from bot.tools import builtin
from bot.tools.http_tool import http_tool
from bot.tools.loop import Ran, ToolLoop
from bot.tools.registry import ToolContext
from kernel import catalog, log
from kernel.errors import InputError, RateLimited
from kernel.text import blank
from kernel.types import (
    ChatMessage,
    InboundMessage,
    ModelCallRecord,
    OutboundMessage,
    Outgoing,
    StoredMessage,
    utcnow,
)
from kernel.zones import zone_name
from memory.context import AssembledContext
from memory.store import ContextQuery, Ingested, IngestedContext, Store, StoreError

logger = log.get("hilo.pipeline")

#: Called with each text delta while the model streams; `reset=True` means "discard what you showed so far"
#: (the model failed mid-answer and another attempt starts over).
DeltaSink = Callable[[str, bool], Awaitable[None]]
#: Called once the person's message is stored (before the model), e.g. to tell a client its conversation id.
IngestSink = Callable[[Ingested], Awaitable[None]]
#: Runs inside the turn's lease (renewed while it runs), before the context is read: the message and turn to
#: answer (bot/media.py: a voice note's, on its transcript), a text to answer with instead of a model's (stored as
#: the reply), or None: nothing to answer (the person was forgotten meanwhile).
Prepare = Callable[[InboundMessage, Ingested], Awaitable["tuple[InboundMessage, Ingested] | str | None"]]


@dataclass(frozen=True, slots=True)
class Taken:
    """What `Pipeline.take` kept of a message. status: "turn" (its message stored; `turn` set), "command"
    (recorded; `command` set), "duplicate" (a redelivery: nothing to do); bot/intake.py adds "journaled" (kept
    in the local journal; `tell`: the person is not told yet that it is kept) and "refused" (empty or too long,
    recorded; `refusal` set)."""

    status: str
    turn: Ingested | None = None
    command: commands.Command | None = None
    started: float = 0.0
    refusal: InputError | None = None
    tell: bool = False
    #: taken from the journal (bot/intake.py `replay`), not from the platform: checks the surface skipped while
    #: the database was away (WhatsApp's opt-out) are made now
    replayed: bool = False


class Pipeline:
    """Turns InboundMessages into OutboundMessages. Owns no connections: the app's lifespan owns store and chain."""

    def __init__(self, settings: Settings, store: Store, chain: Chain, embedder: Embedder | None = None) -> None:
        self.settings = settings
        self.store = store
        self.chain = chain
        #: embeds each turn's question (bot/embedding.py) for vector recall; None or `none`: lexical only
        self.embedder = embedder
        #: the operator's alerts (bot/alerts.py): fallbacks, failed turns, caps, deliveries that keep failing
        self.alerts = Alerts(settings, store)
        #: prices each model call and keeps the spend caps (bot/spend.py), for every call of the chain
        self.meter = Meter(settings=settings, store=store, alerts=self.alerts)
        chain_module = sys.modules.get("bot.models.chain")  # a ModelChain exists only once its module loaded
        if chain_module is not None and isinstance(chain, chain_module.ModelChain):  # (tenacity: not for `context`)
            chain.meter = self.meter
        #: what hilo says on Telegram, WhatsApp (any surface with a transport): stored parts, sent in order
        self.outbox = Outbox(store, lease=settings.outbox_lease, alerts=self.alerts,
                             failures_alert=settings.alert_delivery_failures)
        #: what hilo tells a person outside their turn (stored, then sent through the outbox)
        self.notices = Notices(store, self.outbox)
        #: what surfaces reach of the store (they import no memory module): reads, deliveries, opt-out
        #: where every erasure is noted before it is made (bot/erasures.py): a restored backup does not undo it
        self.erasures = Erasures.of(settings)
        self.history = History(store, self.erasures)
        self.deliveries: Deliveries = store
        #: the web's rate limits, counted in the database so that every process shares them (issue 12, faults)
        self.rate_limits: RateLimits = store
        self.opt_out = OptOut(store)
        #: /export's download links (bot/export.py), served by the web surface
        self.exports = Exports(store, ExportLinks(settings.secret_key, settings.public_url,
                                                  settings.export_link_minutes))
        #: the admin page's reads and writes (bot/admin.py), served by surfaces/admin.py when HILO_ADMIN_TOKEN is set
        self.admin = Admin(store, self.erasures)
        #: the tools offered to the model (HILO_TOOLS; none by default) and the loop's bounds (bot/tools/loop.py)
        self.tools = builtin.registry(settings.tools, timeout=settings.tool_timeout,
                                      extra=[http_tool(spec) for spec in settings.http_tools])
        #: downloaded media (voice notes, bot/media.py) under HILO_DATA_DIR/media: `/forget yes` deletes them too
        self.media_files: MediaFiles = media_files(settings)
        #: what a recovered message's turn runs first, inside its lease (bot/media.py: a voice note never heard);
        #: set by its owner, None: nothing
        self.recovering: Callable[[InboundMessage], Prepare | None] | None = None
        self._locks: KeyedLocks[int] = KeyedLocks()
        #: Stored messages whose turn runs now, with its task: a redelivery of one of them is a duplicate, not a
        #: resume; `cancel_turns` ends them at the stop's bound.
        self._in_flight: dict[int, asyncio.Task[Any] | None] = {}

    def validate(self, msg: InboundMessage) -> None:
        """Refuse empty or oversized text before anything is stored (the surface answers with the catalogue)."""
        if blank(msg.text):  # also NUL-only or zero-width-only text
            raise InputError("empty_message")
        if len(msg.text) > self.settings.max_message_chars:
            raise InputError("message_too_long", length=len(msg.text), limit=self.settings.max_message_chars)

    async def handle(
        self, msg: InboundMessage, *, on_delta: DeltaSink | None = None, on_ingested: IngestSink | None = None,
        limits: Sequence[tuple[str, int, int]] = (),
    ) -> OutboundMessage:
        """Run one turn. A redelivery returns status "duplicate"; when every model fails the person gets the
        catalogue's "try again shortly" text (status "failed") and their message stays stored. `limits`: take's."""
        return await self.run(msg, await self.take(msg, limits=limits), on_delta=on_delta, on_ingested=on_ingested)

    async def take(self, msg: InboundMessage, *, limits: Sequence[tuple[str, int, int]] = ()) -> Taken:
        """Store what `msg` is, before its platform is acknowledged (bot/intake.py): a turn's message (one
        `ingest` transaction), or the inbound record of a command (so that a redelivery never runs it twice).
        InputError for empty or oversized text; StoreError when the database cannot take it (nothing kept).
        `limits` (the web's rate limits: RateLimits.hit_rates' hits) are counted first, with the message on
        SQLite (Store.ingest): RateLimited when one must wait, nothing stored."""
        self.validate(msg)
        command = commands.parse(msg.text)
        if command is not None and command.name in commands.HANDLERS:
            if limits:
                RateLimited.unless_zero(await self.rate_limits.hit_rates(limits))
            # A command (/link, /memory ...) is not a turn: not stored as a message, never shown to the model.
            if not await self.store.record_inbound(msg.surface, msg.external_id, "command", msg.sender):
                logger.info("turn.duplicate", surface=msg.surface, kind="command")
                return Taken("duplicate")
            return Taken("command", command=command)
        started = time.perf_counter()
        n_tokens = await assembly.count_tokens(msg.text)
        # A question with nothing to embed has its context read with it (SQLite: one hop to the store less)
        plan = None if _private(msg.metadata) and active(self.embedder, self.store) else self._context_query
        turn = await self.store.ingest(msg, n_tokens, context=plan, limits=limits)
        if turn is None or (turn.resumed and turn.message.id in self._in_flight):
            logger.info("turn.duplicate", surface=msg.surface)  # external ids may hold a person's id: not logged
            # its reply may be stored and not delivered yet (a crash while sending): the outbox sends it, once
            self.outbox.wake()
            return Taken("duplicate")
        if turn.resumed:
            logger.info("turn.resumed", surface=msg.surface, message_id=turn.message.id)
        self._in_flight[turn.message.id] = None  # its task is known once `run` starts it
        return Taken("turn", turn=turn, started=started)

    def release(self, taken: Taken) -> None:
        """A taken turn that will not run (the daemon is draining): its message stays stored, unanswered."""
        if taken.turn is not None:
            self._in_flight.pop(taken.turn.message.id, None)
            self.store.ingested_context(taken.turn.message.id)  # what ingest read for it, if anything: dropped

    async def run(
        self, msg: InboundMessage, taken: Taken, *, on_delta: DeltaSink | None = None,
        on_ingested: IngestSink | None = None, prepare: Prepare | None = None,
    ) -> OutboundMessage:
        """What `take` kept: the command's reply (status "command"), nothing for a redelivery ("duplicate"),
        or the turn's answer."""
        if taken.command is not None:
            text = await self.command(taken.command, msg)
            logger.info("turn.command", surface=msg.surface, command=taken.command.name)
            return OutboundMessage(msg.surface, msg.sender, text, "command")
        turn = taken.turn
        if turn is None:
            return OutboundMessage(msg.surface, msg.sender, "", "duplicate")
        lang = catalog.language(msg.language, self.settings.language)
        return await self._answer(msg, turn, lang, taken.started, on_delta, on_ingested, prepare)

    async def answer_stored(self, turn: Ingested) -> OutboundMessage:
        """Run the turn of a message stored earlier and never answered (recovery, bot/job_list.py): the reply is
        stored and, where the message names its route, queued in the outbox. "duplicate" when its turn runs in
        this process already, or another process answered it meanwhile."""
        m = turn.message
        route = route_of(m.metadata)
        msg = InboundMessage(surface=m.surface, sender=route[0] if route else "", external_id=m.external_id or "",
                             text=m.content, received_at=m.created_at, metadata=m.metadata)
        if m.id in self._in_flight:
            return OutboundMessage(msg.surface, msg.sender, "", "duplicate")
        logger.info("turn.recovered", surface=m.surface, message_id=m.id)
        lang = catalog.language(route_language(m.metadata), self.settings.language)
        prepare = self.recovering(msg) if self.recovering is not None else None
        return await self._answer(msg, turn, lang, time.perf_counter(), None, None, prepare)

    async def _answer(
        self, msg: InboundMessage, turn: Ingested, lang: str, started: float,
        on_delta: DeltaSink | None, on_ingested: IngestSink | None, prepare: Prepare | None = None,
    ) -> OutboundMessage:
        self._in_flight[turn.message.id] = asyncio.current_task()
        try:
            return await self._turn(msg, turn, lang, started, on_delta, on_ingested, prepare)
        except asyncio.CancelledError:  # shutdown: the message stays stored, unanswered, and is resumed later
            logger.warning("turn.cancelled", surface=msg.surface, message_id=turn.message.id,
                           duration_ms=round((time.perf_counter() - started) * 1000))
            raise
        finally:
            self._in_flight.pop(turn.message.id, None)

    async def cancel_turns(self) -> None:
        """Cancel every turn still running (the stop's budget is spent) and wait for them to end: each logs
        `turn.cancelled`; its message stays stored and unanswered, for the recovery at the next start."""
        running = [t for t in self._in_flight.values() if t is not None and t is not asyncio.current_task()]
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(running, timeout=1.0)

    async def command(self, command: commands.Command, msg: InboundMessage) -> str:
        """The reply to a command (/link, /memory ...) sent by the person of `msg`; nothing is stored as a message."""
        return await commands.run(command, msg, self.store, default_language=self.settings.language,
                                  notices=self.notices, exports=self.exports.links, media=self.media_files,
                                  erasures=self.erasures)

    async def _turn(
        self, msg: InboundMessage, turn: Ingested, lang: str, started: float,
        on_delta: DeltaSink | None, on_ingested: IngestSink | None, prepare: Prepare | None = None,
    ) -> OutboundMessage:
        if on_ingested is not None:
            await on_ingested(turn)
        # the lease across processes first, then in-process: a turn waiting for its conversation's earlier
        # message (memory/turn_lease.py) must not hold up that message's turn in this process
        async with self.store.turn_lock(turn.conversation_id, turn.message.id, adopt=self._adopt,
                                        grace=self.settings.recovery_grace) as answered, \
                self._locks.hold(turn.conversation_id):
            if answered:  # another process answered this message while this one waited for the lease
                return await self._answered_elsewhere(msg, turn)
            if prepare is not None:  # under the lease: no other process's recovery answers it meanwhile
                self.store.ingested_context(turn.message.id)  # read for the text before it is heard: not used
                prepared = await prepare(msg, turn)
                if prepared is None:
                    return OutboundMessage(msg.surface, msg.sender, "", "duplicate")
                if isinstance(prepared, str):
                    return await self._said(msg, turn, prepared)
                msg, turn = prepared
            ctx = await self.turn_context(turn)
            if msg.images:  # a photo the model sees, on this turn only (bot/vision.py)
                ctx = vision.seeing(ctx, msg.images)
            pre_model_ms = (time.perf_counter() - started) * 1000
            with paying(turn.user_id):  # the spend caps count this person's calls (bot/spend.py)
                ran = await self._call_model(ctx, turn, lang, on_delta)
            completion, calls, failure = ran.completion, ran.calls, ran.failure
            if msg.images and completion is not None:  # its first line described the photo: the message's text
                description, completion = vision.split(completion)
                if description is not None:
                    await vision.described(self.store, msg, turn, description)
            self.alerts.after_turn(calls, failure, surface=msg.surface, user_id=turn.user_id,
                                   message_id=turn.message.id)
            reply = answers.reply_text(completion, lang) if completion is not None else None
            reply_tokens = await assembly.count_tokens(reply) if reply is not None else 0
            said = reply if reply is not None else catalog.t(
                f"cap_reached_{failure.period}" if isinstance(failure, CapReached) else "model_unavailable", lang)
            stored, outgoing = await self._finish(msg, turn, said, reply, reply_tokens, calls,
                                                  memory_ids=ctx.memory_ids(),
                                                  tool_messages=await _counted(ran.messages))
        outcome = completion.outcome if completion is not None else "failed"
        metrics.observe_turn(msg.surface, outcome, time.perf_counter() - started, pre_model_ms / 1000, calls)
        metrics.observe_context(ctx)
        queued = {"queued": True} if outgoing is not None else {}  # the surface sends nothing itself
        if outgoing is not None:
            self.outbox.wake()
        logger.info(
            "turn.done", surface=msg.surface, user_id=turn.user_id, conversation_id=turn.conversation_id,
            message_id=turn.message.id, chars_in=len(msg.text), chars_out=len(reply or ""),
            context_tokens=ctx.tokens["total"], calls=len(calls), outcome=outcome, pre_model_ms=round(pre_model_ms, 2),
            tool_steps=ran.steps, tool_messages=len(ran.messages),
        )
        if reply is None:
            return OutboundMessage(
                msg.surface, msg.sender, said, "failed", conversation_id=turn.conversation_id,
                user_id=turn.user_id, message_id=turn.message.id, metadata=queued,
            )
        assert completion is not None
        return OutboundMessage(
            msg.surface, msg.sender, reply, "ok", conversation_id=turn.conversation_id, user_id=turn.user_id,
            message_id=turn.message.id, reply_id=stored.id if stored else None,
            metadata={"outcome": completion.outcome, **queued},
        )

    async def _finish(
        self, msg: InboundMessage, turn: Ingested, said: str, reply: str | None, reply_tokens: int,
        calls: Sequence[ModelCallRecord], *, memory_ids: Sequence[int] = (),
        tool_messages: Sequence[ChatMessage] = (),
    ) -> tuple[StoredMessage | None, Outgoing | None]:
        """The turn's last write (Store.finish_turn, with the memories it used and its tool messages): the reply and, on
        Telegram and WhatsApp, `said`'s parts queued in the outbox in the same transaction. (None, None) when the
        store fails: the person's message is already stored, and an answer they can read (the surface says it
        directly) beats no answer at all."""
        outgoing = self.outbox.outgoing_for(msg, said)
        try:
            stored = await self.store.finish_turn(turn, reply, reply_tokens, calls, memory_ids=memory_ids,
                                                  outgoing=outgoing, tool_messages=tool_messages)
        except StoreError as exc:
            logger.error("turn.reply_not_stored", message_id=turn.message.id, error=type(exc).__name__)
            return None, None
        return stored, outgoing

    async def _said(self, msg: InboundMessage, turn: Ingested, text: str) -> OutboundMessage:
        """Answer the turn's message with `text` and no model call (`prepare` said so: a voice note that could not
        be transcribed): stored as the reply, so the message counts as answered, and queued in the outbox with it."""
        stored, outgoing = await self._finish(msg, turn, text, text, await assembly.count_tokens(text), [])
        if outgoing is not None:
            self.outbox.wake()
        return OutboundMessage(
            msg.surface, msg.sender, text, "ok", conversation_id=turn.conversation_id, user_id=turn.user_id,
            message_id=turn.message.id, reply_id=stored.id if stored else None,
            metadata={"outcome": "notice", **({"queued": True} if outgoing is not None else {})},
        )

    async def _adopt(self, message_id: int) -> None:
        """Answer an earlier message of the conversation that nobody answers (its process died after storing it)
        before the waiting turn's own: recovery on demand, in the person's order (memory/turn_lease.py)."""
        try:
            turn = await self.store.stored_turn(message_id)
            if turn is not None:
                await self.answer_stored(turn)
        except Exception as exc:  # never into the waiting turn: it goes on waiting (bounded by the order cap)
            logger.error("turn.adopt_failed", message_id=message_id, error=type(exc).__name__)

    async def _answered_elsewhere(self, msg: InboundMessage, turn: Ingested) -> OutboundMessage:
        """The turn of `msg` found its message answered by another process (or recovery) while it waited for the
        conversation's lease: the reply stored there, already queued where the surface sends through the outbox
        (so "queued": the surface sends nothing), and the web answers with it in its response; "duplicate" when
        no reply is stored (the message was forgotten, or every model failed there)."""
        reply = await self.store.reply_of(turn.user_id, turn.message.id)
        logger.info("turn.duplicate", surface=msg.surface, message_id=turn.message.id, reply=reply is not None)
        if reply is None:
            return OutboundMessage(msg.surface, msg.sender, "", "duplicate")
        return OutboundMessage(
            msg.surface, msg.sender, reply.content, "ok", conversation_id=turn.conversation_id,
            user_id=turn.user_id, message_id=turn.message.id, reply_id=reply.id,
            metadata={"outcome": "ok", "queued": True, "answered_elsewhere": True},
        )

    async def turn_context(self, turn: Ingested) -> AssembledContext:
        """The model's input for a taken turn (inside its turn lock): what ingest read with its message (`take`),
        else `context_for`."""
        read = self.store.ingested_context(turn.message.id)
        return self._assembled(turn, read) if read is not None else await self.context_for(turn)

    async def context_for(self, turn: Ingested) -> AssembledContext:
        """The model's input for a stored message (one read transaction)."""
        m = turn.message
        return await self.assemble_context(
            user_id=turn.user_id, surface=m.surface, conversation_id=turn.conversation_id,
            # `at` is now, not the message's time: a turn that waited for the one before it must see its reply.
            current_message_id=m.id, text=m.content, n_tokens=m.token_count, at=utcnow(),
            private=_private(m.metadata),
        )

    def _context_query(self, turn: Ingested) -> ContextQuery:
        """What `context_for` reads for `turn`, without a query vector: the query `take` hands to ingest."""
        m = turn.message
        return assembly.context_query(
            self.settings, user_id=turn.user_id, surface=m.surface, conversation_id=turn.conversation_id,
            current_message_id=m.id, text=m.content, at=utcnow(), private=_private(m.metadata))

    def _assembled(self, turn: Ingested, read: IngestedContext) -> AssembledContext:
        """The model's input from the rows ingest read with the message (`_context_query`)."""
        metrics.observe_retrieval("load", read.seconds)
        m = turn.message
        return assembly.assemble_rows(self.settings, read.rows, text=m.content, n_tokens=m.token_count,
                                      surface=m.surface, at=read.query.at)

    async def assemble_context(
        self, *, user_id: int | None, surface: str, conversation_id: int | None, current_message_id: int | None,
        text: str, n_tokens: int | None = None, at: datetime | None = None, private: bool = True,
    ) -> AssembledContext:
        """Context assembly without side effects (bot/assembly.py; `hilo context` calls it without a pipeline)."""
        return await assembly.assemble_context(
            self.settings, self.store, self.embedder, user_id=user_id, surface=surface,
            conversation_id=conversation_id, current_message_id=current_message_id, text=text, n_tokens=n_tokens,
            at=at, private=private,
        )

    async def _call_model(
        self, ctx: AssembledContext, turn: Ingested, lang: str, on_delta: DeltaSink | None,
    ) -> Ran:
        """The chain's answer through the tool loop (one plain call when no tool is offered): the completion (None
        when every model failed, or a spend cap refused: the failure says which), every call made for it and the
        turn's tool calls and results. While streaming, what the sink was shown ends up being exactly the reply
        the person gets (bot.answers): a note is streamed after the text, a reply that replaces the text is shown
        after a reset."""
        m = turn.message
        # In a group others read the answer: no tool that reads or writes the person's memory is offered there.
        offer = self.tools.offer(private=m.metadata.get("audience") != "group") if self.tools else None
        # The person's time zone (the widget's browser zone is remembered): one statement, on turns with tools.
        zone = await self.store.person_zone(turn.user_id, zone_name(m.metadata.get("timezone"))) if offer else None
        tool_ctx = ToolContext(turn.user_id, self.store, utcnow(), timezone=zone or "UTC", zone_known=zone is not None,
                               language=lang, message_id=m.id, erasures=self.erasures)
        loop = ToolLoop(self.chain, self.tools, steps=self.settings.tool_steps, seconds=self.settings.tool_seconds,
                        cost_usd=self.settings.tool_cost_usd)
        ran = await loop.run(ctx.messages, offer, tool_ctx, on_delta)
        if on_delta is not None and ran.completion is not None:
            await _show_reply(on_delta, ran.shown, answers.reply_text(ran.completion, lang))
        return ran


def _private(metadata: dict[str, Any]) -> bool:
    """In a group others read the answer: the person's private memory stays out of it."""
    return metadata.get("audience") != "group"


async def _counted(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """The turn's tool messages with their token counts (a call's arguments count: they are sent again)."""
    counted = []
    for m in messages:
        arguments = json.dumps([c.arguments for c in m.tool_calls], ensure_ascii=False) if m.tool_calls else ""
        counted.append(replace(m, tokens=await assembly.count_tokens(m.content + arguments)))
    return counted


async def _show_reply(on_delta: DeltaSink, shown: str, reply: str) -> None:
    if reply.startswith(shown):
        if len(reply) > len(shown):
            await on_delta(reply[len(shown):], False)
        return
    await on_delta("", True)
    await on_delta(reply, False)
