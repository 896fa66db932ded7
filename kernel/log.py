"""Structured logging: hilo's events (structlog) and every standard-library logger (uvicorn, asyncpg,
python-telegram-bot, httpx, warnings, uncaught exceptions) go through ONE chain of processors and ONE handler,
so a format holds for every line: `console` for people, `json` for log shippers (one JSON object per line,
an exception as the structured field `exception`, never loose traceback lines).

The daemon logs to stdout (PM2 writes it to the out log, journald keeps it); one-shot commands log to stderr,
so what they print on stdout stays their answer. Events carry ids, sizes and outcomes, never message text or
secrets: tracebacks never show local variables.

structlog is imported on first use, not with this module: it pulls in rich through structlog.dev, 130 ms of a
one-shot command's start (`hilo context`, issue 14) that logs nothing when all goes well. `configure` installs
the standard-library handler at once (a library's record is formatted through structlog when it is written)
and applies structlog's own configuration as soon as structlog is loaded.
"""

from __future__ import annotations

import logging
import sys
import threading
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import structlog

Stream = Literal["stdout", "stderr"]


class _StdHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to sys.stdout or sys.stderr as they are when a line is written (tests and embedders swap
    them), flushing each line (a pipe to PM2 must not hold lines back)."""

    def __init__(self, stream: Stream, fmt: str) -> None:
        super().__init__()
        self.stream_name = stream
        self.fmt = fmt

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = getattr(sys, self.stream_name)
        super().emit(record)

    def format(self, record: logging.LogRecord) -> str:
        if self.formatter is None:  # the first record written: structlog's formatter, built now
            _load()
            self.setFormatter(_formatter(self.fmt))
        return super().format(record)


_handler: _StdHandler | None = None
#: The level configure() set, applied to structlog when it is loaded (None: structlog's defaults).
_level: int | None = None
_loaded = False


def _shared() -> list[structlog.typing.Processor]:
    import structlog

    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]


def _formatter(fmt: str) -> logging.Formatter:
    import structlog
    from structlog.tracebacks import ExceptionDictTransformer

    final: list[structlog.typing.Processor]
    if fmt == "json":
        final = [
            structlog.processors.ExceptionRenderer(ExceptionDictTransformer(show_locals=False)),
            structlog.processors.JSONRenderer(),
        ]
    else:
        final = [structlog.dev.ConsoleRenderer(colors=False, exception_formatter=structlog.dev.plain_traceback)]
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_shared(),
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *final],
    )


def _apply() -> None:
    """structlog's configuration for the level configure() set (structlog is loaded)."""
    import structlog

    if _level is None:
        return
    structlog.configure(
        processors=[*_shared(), structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        wrapper_class=structlog.make_filtering_bound_logger(_level),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=True,
    )


def _load() -> None:
    """Import structlog and apply the pending configuration, once."""
    global _loaded
    if not _loaded:
        _loaded = True
        _apply()


def configure(level: str = "info", fmt: str = "console", stream: Stream = "stderr") -> None:
    """Set up logging for this process (again: the last call wins). `level` filters hilo's events and the
    libraries' records alike; the HTTP clients (httpx for python-telegram-bot, httpx2 for the model SDKs)
    stay at warning at least: their request lines carry URLs, and a Bot API URL carries the bot token."""
    global _handler, _level
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        numeric = logging.INFO
    handler = _StdHandler(stream, fmt)
    root = logging.getLogger()
    if _handler is not None:
        root.removeHandler(_handler)
    root.addHandler(handler)
    root.setLevel(numeric)
    _handler = handler
    for chatty in ("httpx", "httpcore", "httpx2", "httpcore2"):
        logging.getLogger(chatty).setLevel(max(numeric, logging.WARNING))
    logging.captureWarnings(True)
    _level = numeric
    if _loaded:
        _apply()


def level() -> int | None:
    """The level the last configure() set (None: never configured)."""
    return _level


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


class _Lazy:
    """A logger that loads structlog (and its configuration) when it is first used."""

    __slots__ = ("_logger", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._logger: Any = None

    def __getattr__(self, attr: str) -> Any:
        if self._logger is None:
            import structlog

            _load()
            self._logger = structlog.get_logger(self._name)
        return getattr(self._logger, attr)


def get(name: str) -> structlog.typing.FilteringBoundLogger:
    return _Lazy(name)
