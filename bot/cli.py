"""`hilo`: the command line (its contract: README.md, "Command line"). Commands that call no model import no SDK."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from bot import cli_backup, cli_export, cli_stats, cli_summaries
from bot.config import Settings
from kernel import blas
from kernel.errors import ConfigError, HiloError
from kernel.types import SURFACES

if TYPE_CHECKING:  # the pipeline (and the store under it) loads only for the commands that use it
    from bot.pipeline import Pipeline


def _settings(args: argparse.Namespace) -> Settings:
    settings = Settings.from_env()
    if getattr(args, "db", None):
        settings = settings.with_(database_url=args.db)
    return settings


def _parse_at(raw: str | None) -> datetime | None:
    if not raw:
        return None
    try:
        at = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"--at {raw!r} is not an ISO date-time, e.g. 2026-11-29T10:00:00Z") from None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


async def _with_store(settings: Settings, fn: Callable[[Any], Awaitable[int]]) -> int:
    from memory.open import open_store

    store = open_store(settings.database_url)
    await store.open()
    try:
        return await fn(store)
    finally:
        await store.close()


def cmd_serve(args: argparse.Namespace) -> int:
    from bot import daemon

    return daemon.serve(lambda: _settings(args), args.host, args.port)


def cmd_migrate(args: argparse.Namespace) -> int:
    from memory.open import open_store

    async def run() -> int:
        settings = _settings(args)
        store = open_store(settings.database_url)
        try:
            applied = await store.migrate()
            again = await _erasures_again(settings, store)
        finally:
            await store.close()
        print("\n".join(f"applied {name}" for name in applied) or "the database is up to date")
        if again:
            print(f"applied again {again} erasures of the record of erasures (people or memories a restore brought "
                  "back)")
        return 0

    return asyncio.run(run())


async def _erasures_again(settings: Settings, store: Any) -> int:
    """What `hilo serve` does at its start (bot/erasures.py): the record of erasures applied again, after a
    restore; how many people and memories it forgot."""
    from bot.erasures import Erasures
    from bot.media import forget_again
    from bot.media_store import media_files

    record = Erasures.of(settings)
    return await forget_again(record, store, media_files(settings)) if record is not None else 0


def _pipeline(settings: Settings, store: Any) -> Pipeline:
    from bot.models.factory import build_chain
    from bot.pipeline import Pipeline

    return Pipeline(settings, store, build_chain(settings))


def cmd_chat(args: argparse.Namespace) -> int:
    from bot import plugins

    chat = plugins.chat()  # the terminal surface, found through its entry point (bot imports no surface)
    settings = _settings(args)

    async def run(store: Any) -> int:
        pipeline = _pipeline(settings, store)
        try:
            return await chat(pipeline, args.user, args.surface, " ".join(args.message) if args.message else None)
        finally:
            await pipeline.chain.aclose()

    return asyncio.run(_with_store(settings, run))


def cmd_context(args: argparse.Namespace) -> int:
    from memory.context import render_text

    settings = _settings(args)
    at = _parse_at(args.at)

    async def run(store: Any) -> int:
        # the turn's own assembly, without a pipeline: none of the turn's machinery loads (bot/assembly.py)
        from bot.assembly import assemble_context
        from bot.embedders.factory import build_embedder
        from bot.embedding import active

        user_id = await store.user_id(args.user)
        conversation_id = await store.find_conversation(user_id, args.surface) if user_id is not None else None
        embedder = build_embedder(settings)
        query_embedder = None
        # the question is embedded only when the person has vectors of this embedder to compare it with
        if user_id is not None and active(embedder, store) and (
                (await store.embedding_progress(embedder.name, user_id))[0]
                or (await store.memory_embedding_progress(embedder.name, user_id))[0]):
            await embedder.start()  # the local model loads now, not inside the question's timeout
            query_embedder = embedder

        async def one(text: str) -> Any:
            return await assemble_context(
                settings, store, query_embedder, user_id=user_id, surface=args.surface,
                conversation_id=conversation_id, current_message_id=None, text=text, at=at,
            )

        try:
            if args.message == ["-"]:
                while line := await asyncio.to_thread(sys.stdin.readline):
                    if line.strip():
                        print(json.dumps((await one(line.rstrip("\n"))).to_json(), ensure_ascii=False), flush=True)
                return 0
            ctx = await one(" ".join(args.message))
            print(json.dumps(ctx.to_json(), ensure_ascii=False, indent=2) if args.json else render_text(ctx))
            return 0
        finally:
            await embedder.aclose()

    return asyncio.run(_with_store(settings, run))


def cmd_import(args: argparse.Namespace) -> int:
    settings = _settings(args)

    async def run(store: Any) -> int:
        from bot.cli_batch import import_with_progress

        result = await import_with_progress(store, args.file)
        print(f"imported {result.inserted} messages, skipped {result.skipped} already stored")
        return 0

    return asyncio.run(_with_store(settings, run))


def cmd_embed(args: argparse.Namespace) -> int:
    from bot import cli_batch

    return cli_batch.cmd_embed(args, _settings(args), _with_store)


def cmd_inspect(args: argparse.Namespace) -> int:
    from bot import inspect_text

    settings = _settings(args)

    async def run(store: Any) -> int:
        data = await store.inspect(args.user)
        if args.json:
            print(json.dumps(data, ensure_ascii=False, indent=2, default=str))
        else:
            print(inspect_text.render(args.user, data))
        return 0

    return asyncio.run(_with_store(settings, run))


def cmd_remember(args: argparse.Namespace) -> int:
    from kernel import catalog, tokens

    settings = _settings(args)
    text = " ".join(args.text).strip()
    if not text:
        raise ConfigError("hilo remember needs a TEXT to store")

    async def run(store: Any) -> int:
        user_id = await store.user_id(args.user, create=True)
        fact = await store.remember(user_id, text, tokens.count(text))
        print(f"{catalog.t('remembered', settings.language)} (fact {fact.id}, {fact.short_id})")
        return 0

    return asyncio.run(_with_store(settings, run))


def cmd_memory(args: argparse.Namespace) -> int:
    from bot.cli_memory import show_memories

    settings = _settings(args)
    return asyncio.run(_with_store(settings, lambda store: show_memories(store, args.user, args.all, args.json)))


def cmd_forget(args: argparse.Namespace) -> int:
    from kernel import catalog

    settings = _settings(args)

    async def run(store: Any) -> int:
        from bot.erasures import ErasureNotKept, Erasures

        record = Erasures.of(settings)  # each erasure is noted there first (bot/erasures.py)
        if args.memory is not None:
            from bot.cli_memory import forget_memory

            return await forget_memory(store, args.user, args.memory, record)
        from bot.media import forget
        from bot.media_store import MediaStoreError, media_files

        # noted, then the person's media files, then every table, counted (memory/sql_forget.py)
        try:
            counts = await forget(store, media_files(settings), args.user, record)
        except MediaStoreError as exc:
            print(f"hilo: {args.user}'s media files could not be deleted ({exc}); nothing was forgotten: "
                  "try again when the media store answers", file=sys.stderr)
            return 1
        except ErasureNotKept as exc:
            print(f"hilo: {exc}; nothing was forgotten", file=sys.stderr)
            return 1
        print(catalog.t("forgotten" if counts else "nothing_to_forget", settings.language, handle=args.user))
        if counts:
            from bot.cli_export import deleted_counts

            print(deleted_counts(counts))
        return 0

    return asyncio.run(_with_store(settings, run))


def cmd_link(args: argparse.Namespace) -> int:
    settings = _settings(args)

    async def run(store: Any) -> int:
        user_id = await store.link_identity(args.user, args.surface, args.sender, "operator")
        if user_id is None:
            print(f"hilo: no user {args.user!r}: check `hilo inspect --user {args.user}`", file=sys.stderr)
            return 1
        print(f"linked {args.surface}:{args.sender} to {args.user}")
        return 0

    return asyncio.run(_with_store(settings, run))


def cmd_unlink(args: argparse.Namespace) -> int:
    settings = _settings(args)

    async def run(store: Any) -> int:
        status, new_user = await store.unlink_identity(args.surface, args.sender, "operator")
        if status == "unlinked":
            print(f"unlinked {args.surface}:{args.sender}: its future messages go to user {new_user}")
            return 0
        why = {"unknown": "no such identity", "only_identity": "it is the person's only identity"}[status]
        print(f"hilo: cannot unlink {args.surface}:{args.sender}: {why}", file=sys.stderr)
        return 1

    return asyncio.run(_with_store(settings, run))


def _add_serve(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("serve", parents=[common], help="run the daemon (web API, webhooks, background jobs)")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.set_defaults(fn=cmd_serve)


def _add_migrate(sub: Any, common: argparse.ArgumentParser) -> None:
    sub.add_parser("migrate", parents=[common], help="apply pending migrations").set_defaults(fn=cmd_migrate)


def _add_chat(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("chat", parents=[common], help="one full turn, or a REPL without MESSAGE")
    s.add_argument("--user", required=True, metavar="U")
    s.add_argument("--surface", default="cli", choices=SURFACES)
    s.add_argument("message", nargs="*", metavar="MESSAGE")
    s.set_defaults(fn=cmd_chat)


def _add_context(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("context", parents=[common], help="dry run of context assembly (no model, no writes)")
    s.add_argument("--user", required=True, metavar="U")
    s.add_argument("--surface", required=True, choices=SURFACES)
    s.add_argument("--at", metavar="ISO", help="assemble as of this moment")
    s.add_argument("--json", action="store_true")
    s.add_argument("message", nargs="+", metavar="MESSAGE|-")
    s.set_defaults(fn=cmd_context)


def _add_import(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("import", parents=[common], help="import messages from a JSONL file (idempotent)")
    s.add_argument("file", metavar="FILE.jsonl")
    s.set_defaults(fn=cmd_import)


def _add_embed(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("embed", parents=[common], help="give every message a vector of the configured embedder "
                       "(resumes where it stopped)")
    s.add_argument("--user", metavar="U", help="only this person's messages")
    s.add_argument("--batch", type=int, metavar="N", help="messages per embedding call (default HILO_EMBED_BATCH)")
    s.set_defaults(fn=cmd_embed)


def _add_inspect(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("inspect", parents=[common], help="everything stored about a person")
    s.add_argument("--user", required=True, metavar="U")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_inspect)


def _add_remember(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("remember", parents=[common], help="store an explicit fact about a person")
    s.add_argument("--user", required=True, metavar="U")
    s.add_argument("text", nargs="+", metavar="TEXT")
    s.set_defaults(fn=cmd_remember)


def _add_memory(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("memory", parents=[common], help="what hilo remembers about a person, newest first")
    s.add_argument("--user", required=True, metavar="U")
    s.add_argument("--all", action="store_true", help="also the ended ones (superseded or expired)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_memory)


def _add_link(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("link", parents=[common], help="join an identity (surface + sender id) to a person")
    s.add_argument("--user", required=True, metavar="U")
    s.add_argument("--surface", required=True, choices=SURFACES)
    s.add_argument("--sender", required=True, metavar="ID", help="the person's id on that surface")
    s.set_defaults(fn=cmd_link)


def _add_unlink(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("unlink", parents=[common], help="separate an identity from its person")
    s.add_argument("--surface", required=True, choices=SURFACES)
    s.add_argument("--sender", required=True, metavar="ID")
    s.set_defaults(fn=cmd_unlink)


def _add_forget(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("forget", parents=[common], help="delete everything about a person (or one memory)")
    s.add_argument("--user", required=True, metavar="U")
    s.add_argument("--memory", metavar="ID", help="forget only this memory (m12, as `hilo memory` lists it)")
    s.set_defaults(fn=cmd_forget)


def _add_summaries(sub: Any, common: argparse.ArgumentParser) -> None:
    cli_summaries.add(sub, common, _run)


def _add_export(sub: Any, common: argparse.ArgumentParser) -> None:
    cli_export.add(sub, common, _run)


def _add_stats(sub: Any, common: argparse.ArgumentParser) -> None:
    cli_stats.add(sub, common, _run)


def _add_backup(sub: Any, common: argparse.ArgumentParser) -> None:
    cli_backup.add(sub, common, _settings)


#: Each command's subparser, added by its function, in the order `hilo --help` lists them.
COMMANDS: dict[str, Callable[[Any, argparse.ArgumentParser], None]] = {
    "serve": _add_serve,
    "migrate": _add_migrate,
    "chat": _add_chat,
    "context": _add_context,
    "import": _add_import,
    "embed": _add_embed,
    "inspect": _add_inspect,
    "remember": _add_remember,
    "memory": _add_memory,
    "link": _add_link,
    "unlink": _add_unlink,
    "forget": _add_forget,
    "summaries": _add_summaries,
    "export": _add_export,
    "stats": _add_stats,
    "backup": _add_backup,
}


def parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The `hilo` parser. When `argv` starts with a command, only that command's subparser is built: building all of
    them was ~5 ms of every command's start (`hilo context`'s budget). Anything else (no command, `--help`, an
    unknown one) gets them all, so what argparse prints there lists every command."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", metavar="URL", help="database URL (overrides HILO_DATABASE_URL)")
    p = argparse.ArgumentParser(prog="hilo", description="One assistant on every surface, one memory per person.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    named = argv[0] if argv else None
    for name, add in COMMANDS.items():
        if named not in COMMANDS or name == named:
            add(sub, common)
    return p


def _run(args: argparse.Namespace, fn: Callable[[Settings, Any], Awaitable[int]]) -> int:
    """`fn(settings, store)` on the store the settings (and --db) name."""
    settings = _settings(args)
    return asyncio.run(_with_store(settings, lambda store: fn(settings, store)))


def main(argv: list[str] | None = None) -> int:
    blas.calm()  # before anything loads numpy (kernel/blas.py)
    argv = sys.argv[1:] if argv is None else argv
    args = parser(argv).parse_args(argv)
    from kernel import log

    # Logs go to stderr; one-shot commands only say what went wrong (serve logs to stdout, as its settings say).
    log.configure("warning", "console")
    try:
        code = int(args.fn(args))
        sys.stdout.flush()  # a reader gone (`hilo context ... | head`) is seen here, not in Python's flush at exit
        return code
    except BrokenPipeError:
        return _reader_gone()
    except ConfigError as exc:
        print(f"hilo: configuration error: {exc}", file=sys.stderr)
        return 2
    except HiloError as exc:
        print(f"hilo: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _reader_gone() -> int:
    """stdout's reader closed it: no traceback, the shell's code for a closed pipe (128 + SIGPIPE), as git's."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # what is left in stdout's buffer goes nowhere at exit, without an error
    return 141


if __name__ == "__main__":
    sys.exit(main())
