"""Structured logging: hilo's events (structlog) and every standard-library logger (uvicorn, asyncpg,
python-telegram-bot, httpx, warnings, uncaught exceptions) go through ONE chain of processors and ONE handler,
so a format holds for every line: `console` for people, `json` for log shippers (one JSON object per line,
an exception as the structured field `exception`, never loose traceback lines).

The daemon logs to stdout (PM2 writes it to the out log, journald keeps it); one-shot commands log to stderr,
so what they print on stdout stays their answer. Events carry ids, sizes and outcomes, never message text or
secrets: tracebacks never show local variables.
"""

from __future__ import annotations

import logging
import sys
import threading
from types import TracebackType
from typing import Literal

import structlog
from structlog.tracebacks import ExceptionDictTransformer

Stream = Literal["stdout", "stderr"]


class _StdHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to sys.stdout or sys.stderr as they are when a line is written (tests and embedders swap
    them), flushing each line (a pipe to PM2 must not hold lines back)."""

    def __init__(self, stream: Stream) -> None:
        super().__init__()
        self.stream_name = stream

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = getattr(sys, self.stream_name)
        super().emit(record)


_handler: _StdHandler | None = None


def configure(level: str = "info", fmt: str = "console", stream: Stream = "stderr") -> None:
    """Set up logging for this process (again: the last call wins). `level` filters hilo's events and the
    libraries' records alike; the HTTP clients (httpx for python-telegram-bot, httpx2 for the model SDKs)
    stay at warning at least: their request lines carry URLs, and a Bot API URL carries the bot token."""
    global _handler
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        numeric = logging.INFO
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    final: list[structlog.typing.Processor]
    if fmt == "json":
        final = [
            structlog.processors.ExceptionRenderer(ExceptionDictTransformer(show_locals=False)),
            structlog.processors.JSONRenderer(),
        ]
    else:
        final = [structlog.dev.ConsoleRenderer(colors=False, exception_formatter=structlog.dev.plain_traceback)]
    handler = _StdHandler(stream)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *final],
    ))
    root = logging.getLogger()
    if _handler is not None:
        root.removeHandler(_handler)
    root.addHandler(handler)
    root.setLevel(numeric)
    _handler = handler
    for chatty in ("httpx", "httpcore", "httpx2", "httpcore2"):
        logging.getLogger(chatty).setLevel(max(numeric, logging.WARNING))
    logging.captureWarnings(True)
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=True,
    )


def capture_uncaught() -> None:
    """Uncaught exceptions (main thread and other threads) become `uncaught_exception` log lines."""
    uncaught = get("hilo.uncaught")

    def on_main(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        uncaught.critical("uncaught_exception", thread="main", exc_info=(kind, exc, tb))

    def on_thread(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is None:
            return
        uncaught.critical("uncaught_exception", thread=args.thread.name if args.thread else None,
                          exc_info=(args.exc_type, args.exc_value, args.exc_traceback))

    sys.excepthook = on_main
    threading.excepthook = on_thread


def get(name: str) -> structlog.typing.FilteringBoundLogger:
    return structlog.get_logger(name)  # type: ignore[no-any-return]
