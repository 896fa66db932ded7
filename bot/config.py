"""Settings, read once from the environment (and a `.env` file) into a typed, frozen object.

Tests build `Settings.from_mapping({...})` and never touch os.environ. Names are a contract (README, "Configuration").
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from bot import retention
from bot.config_costs import costs_from
from bot.config_media import media_from
from bot.config_routes import Route, every_model, routes_from
from bot.config_tools import HttpToolSpec, tools_from
from bot.prices import PriceTable
from kernel.errors import ConfigError
from kernel.text import url_shown
from memory.memory_score import MemoryWeights

DEFAULT_DB = "sqlite:///hilo.db"
DEFAULT_SYSTEM_PROMPT = (
    "You are hilo, a helpful assistant. The same person may write to you on Telegram, WhatsApp and the web; "
    "you remember them across all of these. Answer in the person's language, briefly and kindly."
)
PROVIDERS = ("echo", "openai", "anthropic")
#: HILO_EMBEDDER values; "auto" (unset) is `local` where its package is installed, else `none` (bot.embedders.factory).
EMBEDDERS = ("auto", "none", "local", "openai")


def _int(env: Mapping[str, str], name: str, default: int, minimum: int = 1) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a whole number: set it to e.g. {default}") from None
    if value < minimum:
        raise ConfigError(f"{name}={value} is too small: set it to at least {minimum}")
    return value


def _port(env: Mapping[str, str], name: str) -> int:
    """A TCP port, or 0 when unset (off)."""
    value = _int(env, name, 0, minimum=0)
    if value > 65535:
        raise ConfigError(f"{name}={value} is not a port: set it to 1-65535 (e.g. 9464), or leave it unset")
    return value


def _memory_weights(raw: str) -> MemoryWeights:
    try:
        return MemoryWeights.parse(raw)
    except ValueError as exc:
        raise ConfigError(f"HILO_MEMORY_WEIGHTS: {exc}; e.g. relevance=0.55,importance=0.15,confidence=0.1,"
                          "recency=0.1,frequency=0.1") from None


def _share(env: Mapping[str, str], name: str, default: float) -> float:
    """A number in [0, 1]."""
    raw = env.get(name, "").strip()
    try:
        value = float(raw) if raw else default
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number: set it to e.g. {default}") from None
    if not 0 <= value <= 1:
        raise ConfigError(f"{name}={value} must be between 0 and 1")
    return value


def _default_data_dir(database_url: str) -> str:
    """The SQLite file's directory (it is on a disk hilo may write), or ./data (Postgres, or SQLite in memory)."""
    path = database_url.removeprefix("sqlite:///") if database_url.startswith("sqlite:///") else ""
    if not path or path.startswith(":memory:"):
        return "data"
    return str(Path(path.split("?")[0]).parent)


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number: set it to e.g. {default}") from None
    if value <= 0:
        raise ConfigError(f"{name}={value} must be positive")
    return value


def _url(env: Mapping[str, str], name: str, example: str) -> str:
    raw = env.get(name, "").strip()
    if raw and not raw.startswith(("https://", "http://")):
        raise ConfigError(f"{name}={raw!r} is not a URL: set it to e.g. {example}")
    return raw


_ORIGIN = re.compile(r"^https?://(\*\.)?[a-z0-9.-]+(:\d{1,5})?$")


def _proxies(raw: str) -> tuple[str, ...]:
    """HILO_TRUSTED_PROXIES: comma list of IP addresses and networks (CIDR) whose X-Forwarded-* count."""
    proxies = tuple(part.strip() for part in raw.split(",") if part.strip())
    for proxy in proxies:
        try:
            ipaddress.ip_network(proxy, strict=False)
        except ValueError:
            raise ConfigError(
                f"HILO_TRUSTED_PROXIES: {proxy!r} is not an IP address or network. Write the addresses your "
                "reverse proxy connects from, e.g. 127.0.0.1,::1 or 10.0.0.0/8"
            ) from None
    return proxies


def _origins(raw: str) -> tuple[str, ...]:
    """HILO_ALLOWED_ORIGINS: comma list of `scheme://host[:port]`, `https://*.example.com`, or `*`."""
    origins = []
    for part in raw.split(","):
        origin = part.strip().rstrip("/").lower()
        if not origin:
            continue
        if origin != "*" and not _ORIGIN.match(origin):
            raise ConfigError(
                f"HILO_ALLOWED_ORIGINS: {part.strip()!r} is not an origin. Write scheme://host[:port] without a "
                "path, e.g. https://www.example.com,https://*.example.com,http://localhost:3000"
            )
        origins.append(origin)
    return tuple(origins)


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One entry of the model chain: `provider:model` (`echo` alone is the offline dry-run model)."""

    provider: str
    model: str

    @property
    def label(self) -> str:
        return self.provider if self.provider == "echo" else f"{self.provider}:{self.model}"

    @classmethod
    def parse(cls, raw: str, *, setting: str = "HILO_MODEL") -> ModelSpec:
        raw = raw.strip()
        if raw == "echo":
            return cls("echo", "echo")
        provider, sep, model = raw.partition(":")
        if not sep or not model or provider not in PROVIDERS:
            raise ConfigError(
                f"{setting}: {raw!r} is not a model. Write provider:model, e.g. openai:gpt-4o-mini, "
                "anthropic:claude-3-5-haiku-latest, or echo (offline)."
            )
        return cls(provider, model)


@dataclass(frozen=True, slots=True)
class Settings:
    #: secrets (keys, tokens, the database URL's password) are left out of the repr: settings get printed
    database_url: str = field(default=DEFAULT_DB, repr=False)
    model: ModelSpec = field(default_factory=lambda: ModelSpec("echo", "echo"))
    fallback_models: tuple[ModelSpec, ...] = ()
    #: HILO_MODEL_ROUTES: a model per request by rules on the message (bot/config_routes.py); none: HILO_MODEL
    model_routes: tuple[Route, ...] = ()
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    context_budget: int = 8000
    cross_surface_hours: int = 24
    cross_surface_limit: int = 20
    secret_key: str = field(default="", repr=False)
    public_url: str = ""
    openai_api_key: str = field(default="", repr=False)
    openai_base_url: str = ""
    anthropic_api_key: str = field(default="", repr=False)
    anthropic_base_url: str = ""
    model_timeout: float = 60.0
    model_attempts: int = 3
    #: Telegram's own maximum is 4,096: a full-length Telegram message must fit.
    max_message_chars: int = 4096
    language: str = "en"
    log_level: str = "info"
    log_format: str = "console"
    telegram_bot_token: str = field(default="", repr=False)
    telegram_webhook_secret: str = field(default="", repr=False)
    telegram_mode: str = "polling"
    telegram_api_base_url: str = ""
    #: HILO_TELEGRAM_ALLOWED_USERS: Telegram user ids or @usernames; empty means everyone.
    telegram_allowed_users: tuple[str, ...] = ()
    twilio_account_sid: str = ""
    twilio_auth_token: str = field(default="", repr=False)
    twilio_whatsapp_number: str = ""
    twilio_api_base_url: str = ""
    #: Web widget: page origins allowed to call the API besides the daemon's own (and HILO_PUBLIC_URL's).
    allowed_origins: tuple[str, ...] = ()
    site_secret: str = field(default="", repr=False)
    jwt_secret: str = field(default="", repr=False)
    jwt_audience: tuple[str, ...] = ("authenticated",)
    #: HILO_JWT_JWKS_URL: where a site login's RS256/ES256 public keys are (Supabase: .../.well-known/jwks.json).
    jwt_jwks_url: str = ""
    rate_limit_visitor: int = 20
    rate_limit_ip: int = 60
    #: HILO_SESSION_MAX_AGE: seconds an anonymous web visitor's token stays valid unused (renewed while in use).
    session_max_age: int = 30 * 24 * 3600
    #: HILO_TRUSTED_PROXIES: X-Forwarded-For/-Proto are believed only from these addresses/networks (default none).
    trusted_proxies: tuple[str, ...] = ()
    #: HILO_CLEANUP_SECONDS: how often the cleanup job deletes dead rows (link codes used or expired).
    cleanup_seconds: int = 3600
    #: HILO_EXTRACT_EVERY: the model extracts memories from a person's messages once this many new ones arrived
    #: (bot/extract_job.py, in the background); 0: never. There is no extraction with the offline echo model.
    extract_every: int = 6
    #: HILO_SUMMARY_MIN_MESSAGES: the model writes a summary of each ended episode of at least this many
    #: messages (bot/summary_job.py, in the background); 0: never. None with the offline echo model.
    summary_min_messages: int = 4
    #: HILO_STOP_TIMEOUT: seconds from SIGTERM that the whole stop may take (bot/shutdown.py); what still runs
    #: then is cancelled. It must stay below the supervisor's kill timeout (40 s in deploy/), with a margin.
    stop_timeout: float = 36.0
    #: HILO_EMBEDDER: none | local | openai; unset ("auto") is local where its package is installed, else none.
    #: Settings() built in code (tests, embedding programs) is lexical only unless it names one: "auto" is what
    #: from_env / from_mapping read when HILO_EMBEDDER is unset.
    embedder: str = "none"
    #: HILO_EMBEDDING_MODEL: the embedder's model; empty is its default (bot.embedders.factory).
    embedding_model: str = ""
    #: HILO_EMBEDDING_URL (an OpenAI-compatible server for embeddings only), else OPENAI_BASE_URL; empty: OpenAI.
    embedding_url: str = ""
    #: HILO_EMBEDDING_API_KEY: its key. OPENAI_API_KEY is used only when HILO_EMBEDDING_URL is not set, so the
    #: OpenAI key is never sent to another server.
    embedding_api_key: str = field(default="", repr=False)
    #: HILO_MEMORY_WEIGHTS: how memories are ranked for the context (memory/memory_score.py), relevance first.
    memory_weights: MemoryWeights = field(default_factory=MemoryWeights)
    #: HILO_MEMORY_EXPIRY_DAYS: a memory less important than HILO_MEMORY_EXPIRY_IMPORTANCE that no context used
    #: for this many days ends (the memory_expiry job, daily; kept, never deleted: see memory/sql_memories.py).
    memory_expiry_days: int = 120
    memory_expiry_importance: float = 0.3
    #: HILO_EMBED_SECONDS: how often the embed job embeds new messages (bot/embedding.py; one process runs it).
    embed_seconds: int = 30
    #: HILO_EMBED_BATCH: messages per embedding call of the embed job and `hilo embed` (a turn's question waits for
    #: at most one batch on the local model's one thread).
    embed_batch: int = 32
    #: HILO_EMBED_QUERY_TIMEOUT: seconds a turn waits for its question's embedding; then lexical recall only.
    embed_query_timeout: float = 2.0
    # -- issue 12, outbox (bot/outbox.py, the recovery job of bot/job_list.py) -------------------------------
    #: HILO_RECOVERY_GRACE: seconds a stored message may wait for its turn before recovery answers it.
    recovery_grace: float = 30.0
    #: HILO_RECOVERY_WINDOW: messages stored longer ago than this are never answered by recovery (too late).
    recovery_window: float = 6 * 3600.0
    #: HILO_RECOVERY_SECONDS: how often the recovery job looks (it also runs at start).
    recovery_seconds: int = 60
    #: HILO_OUTBOX_LEASE: seconds a sender holds a part it is sending; a part of a process that died is sent
    #: again once it lapsed (longer than any send's timeout).
    outbox_lease: float = 60.0
    # -- inbound (issue 12: stored, then acknowledged; bot/intake.py, bot/journal.py) ----------------------
    #: HILO_DATA_DIR: where the inbound journal lives (messages the database could not take); default: the
    #: SQLite file's directory, or ./data with Postgres. Created 0700; the journal file is 0600.
    data_dir: str = "data"
    #: HILO_JOURNAL_MAX_BYTES: the journal's bound; when full, webhooks get 503 (the platform's retry status).
    journal_max_bytes: int = 64 * 1024 * 1024
    #: HILO_INBOUND_RETENTION_DAYS: how long the records of non-turn deliveries (commands, refusals, STOP /
    #: START) are kept against redeliveries (the cleanup job purges older ones; Telegram keeps updates 24 h).
    inbound_retention_days: int = 7
    # -- issue 13, ops: readiness (bot/readiness.py) and metrics (bot/metrics.py) ---------------------------
    #: HILO_READY_OUTBOX_AGE: /readyz answers 503 while the oldest undelivered outbox part is older than this (s).
    ready_outbox_age: float = 900.0
    #: HILO_METRICS_PORT: serve Prometheus /metrics on this port of its own (no token); 0: not.
    metrics_port: int = 0
    #: HILO_METRICS_HOST: the address that port listens on (loopback unless set).
    metrics_host: str = "127.0.0.1"
    #: HILO_METRICS_TOKEN: serve /metrics on the main port too, to `Authorization: Bearer <token>` only.
    metrics_token: str = field(default="", repr=False)
    # -- issue 13, costs: the price table, the caps, the alerts (bot/prices.py, bot/spend.py, bot/alerts.py) ----
    #: HILO_PRICES: USD per million tokens in / out per model, over the shipped defaults (bot/prices.py).
    prices: PriceTable = field(default_factory=PriceTable)
    #: HILO_CAP_PERSON_DAILY_USD, ..._MONTHLY_USD, HILO_CAP_DAILY_USD, ..._MONTHLY_USD: spend caps (0: none),
    #: per person and for everyone, per UTC day and calendar month, reserved in the database (bot/spend.py).
    cap_person_daily_usd: float = 0.0
    cap_person_monthly_usd: float = 0.0
    cap_daily_usd: float = 0.0
    cap_monthly_usd: float = 0.0
    #: HILO_ALERT_WEBHOOK_URL (POST JSON) and/or HILO_ALERT_SMTP_URL + HILO_ALERT_EMAIL_TO / _FROM (bot/alerts.py)
    alert_webhook_url: str = field(default="", repr=False)
    alert_smtp_url: str = field(default="", repr=False)
    alert_email_to: tuple[str, ...] = ()
    alert_email_from: str = ""
    #: HILO_ALERT_MIN_INTERVAL: seconds between two alerts of one kind (every process on the database counts).
    alert_min_interval: float = 300.0
    #: HILO_ALERT_DELIVERY_FAILURES: parts of one surface failing finally in a row before delivery_failing.
    alert_delivery_failures: int = 5
    # -- issue 15, media: voice notes and audio (bot/config_media.py, bot/transcribe.py, bot/media.py) ---------
    #: HILO_TRANSCRIBE_MODEL: the transcription model; empty (unset): voice notes are not transcribed (the
    #: person is told so; the media reference is stored).
    transcribe_model: str = ""
    #: HILO_TRANSCRIBE_URL (an OpenAI-compatible server for transcriptions only), else OPENAI_BASE_URL.
    transcribe_url: str = ""
    #: HILO_TRANSCRIBE_API_KEY, else OPENAI_API_KEY when HILO_TRANSCRIBE_URL is not set.
    transcribe_api_key: str = field(default="", repr=False)
    #: HILO_TRANSCRIBE_TIMEOUT: seconds one transcription may take.
    transcribe_timeout: float = 120.0
    #: HILO_MEDIA_MAX_BYTES: the largest voice note or audio file downloaded (refused before the download
    #: completes: the platform's stated size, the Content-Length, and the bytes read, stopped at the cap).
    media_max_bytes: int = 20 * 1024 * 1024
    #: HILO_MEDIA_MAX_SECONDS: the longest voice note or audio (where the platform says its duration).
    media_max_seconds: int = 600
    #: HILO_MEDIA_RETENTION_DAYS: downloaded media files (HILO_DATA_DIR/media or Supabase) older are deleted by
    #: the `retention` job; the transcript and the media reference stay. 0: deleted once transcribed.
    media_retention_days: int = 30
    #: HILO_MEDIA_STORE: where downloaded media is kept (bot/media_store.py): local (HILO_DATA_DIR/media) or
    #: supabase (the private bucket HILO_MEDIA_BUCKET of SUPABASE_URL, with SUPABASE_SERVICE_ROLE_KEY).
    media_store: str = "local"
    media_bucket: str = "hilo-media"
    supabase_url: str = ""
    supabase_key: str = field(default="", repr=False)
    #: HILO_VISION: whether photos go to the model as images (bot/vision.py): "auto" (when the model image turns
    #: go to is a known vision model), "on" or "off" (the model gets the caption and a note instead).
    vision: str = "auto"
    #: HILO_IMAGE_MAX_BYTES: the largest photo downloaded and sent to the model (refused like media over
    #: HILO_MEDIA_MAX_BYTES: stated size, Content-Length, bytes read). Vision APIs take about 5 MB per image.
    image_max_bytes: int = 5 * 1024 * 1024
    # -- issue 13, data: the retention policy and the export's download links ---------------------------------
    #: HILO_RETENTION_DAYS: (surface, days) pairs; messages older are deleted by the `retention` job
    #: (bot/retention.py). Empty (unset): everything is kept.
    retention_days: tuple[tuple[str, int], ...] = ()
    #: HILO_EXPORT_LINK_MINUTES: how long the download link `/export` gives on WhatsApp and the web works.
    export_link_minutes: int = 15
    # -- issue 13, admin: the admin page (surfaces/admin.py, docs/admin.md) -----------------------------------
    #: HILO_ADMIN_TOKEN: the admin page's sign-in token; empty (unset): no /admin routes at all (404).
    admin_token: str = field(default="", repr=False)
    #: HILO_ADMIN_SESSION_MINUTES: how long an admin sign-in lasts (the session cookie), in minutes.
    admin_session_minutes: int = 30
    #: HILO_ADMIN_SIGN_INS_PER_MINUTE: sign-in attempts per client IP per minute (counted in the database).
    admin_sign_ins_per_minute: int = 5
    # -- issue 15, tools (bot/config_tools.py, bot/tools/) -----------------------------------------------------
    #: HILO_TOOLS: the built-in tools offered to the model (bot/tools/builtin.py); empty: none.
    tools: tuple[str, ...] = ()
    #: HILO_TOOL_STEPS, HILO_TOOL_SECONDS, HILO_TOOL_COST_USD: the tool loop's bounds (bot/tools/loop.py);
    #: HILO_TOOL_TIMEOUT: one tool call's.
    tool_steps: int = 4
    tool_seconds: float = 30.0
    tool_timeout: float = 10.0
    tool_cost_usd: float = 0.0
    #: HILO_HTTP_TOOLS: the operator's own tools, called over HTTP (bot/tools/http_tool.py)
    http_tools: tuple[HttpToolSpec, ...] = ()
    #: HILO_REMINDER_SECONDS: how often the `reminders` job looks for due reminders (bot/reminders.py).
    reminder_seconds: float = 10.0
    #: HILO_WHATSAPP_REMINDER_TEMPLATE: the Content SID of an approved WhatsApp template with one variable, for
    #: reminders due outside WhatsApp's 24-hour window; empty: those go to another surface, or fail.
    whatsapp_reminder_template: str = ""

    @property
    def models(self) -> tuple[ModelSpec, ...]:
        """The chain: HILO_MODEL first, then HILO_FALLBACK_MODELS in order."""
        return (self.model, *self.fallback_models)

    @property
    def every_model(self) -> tuple[ModelSpec, ...]:
        """The default chain's models and the routes', each once, in order of appearance."""
        return every_model(self.models, self.model_routes)

    def with_(self, **changes: object) -> Settings:
        return replace(self, **changes)  # type: ignore[arg-type]

    @classmethod
    def from_mapping(cls, env: Mapping[str, str]) -> Settings:
        """Build settings from a mapping of environment names. Raises ConfigError with what to set."""
        openai_key = env.get("OPENAI_API_KEY", "").strip()
        openai_base = env.get("OPENAI_BASE_URL", "").strip()
        anthropic_key = env.get("ANTHROPIC_API_KEY", "").strip()
        anthropic_base = env.get("ANTHROPIC_BASE_URL", "").strip()
        raw_model = env.get("HILO_MODEL", "").strip()
        if raw_model:
            model = ModelSpec.parse(raw_model)
        elif openai_key:
            model = ModelSpec("openai", "gpt-4o-mini")
        elif anthropic_key:
            model = ModelSpec("anthropic", "claude-3-5-haiku-latest")
        else:
            model = ModelSpec("echo", "echo")
        fallbacks = tuple(
            ModelSpec.parse(part, setting="HILO_FALLBACK_MODELS")
            for part in env.get("HILO_FALLBACK_MODELS", "").split(",")
            if part.strip()
        )
        routes = routes_from(env, ModelSpec.parse, fallbacks)
        for spec in every_model((model, *fallbacks), routes):
            if spec.provider == "openai" and not (openai_key or openai_base):
                raise ConfigError(
                    f"{spec.label} needs OPENAI_API_KEY (or OPENAI_BASE_URL for a local OpenAI-compatible "
                    "server such as Ollama or vLLM); or set HILO_MODEL=echo to run offline."
                )
            if spec.provider == "anthropic" and not anthropic_key:
                raise ConfigError(f"{spec.label} needs ANTHROPIC_API_KEY; or set HILO_MODEL=echo to run offline.")
        database_url = (env.get("HILO_DATABASE_URL") or env.get("DATABASE_URL") or DEFAULT_DB).strip()
        if not database_url.startswith(("sqlite://", "postgres://", "postgresql://")):
            raise ConfigError(
                f"HILO_DATABASE_URL={url_shown(database_url)!r} is not supported: use sqlite:///path/to/hilo.db "
                "or postgresql://user:pass@host/db"
            )
        mode = env.get("HILO_TELEGRAM_MODE", "polling").strip() or "polling"
        if mode not in ("polling", "webhook"):
            raise ConfigError(f"HILO_TELEGRAM_MODE={mode!r}: set it to polling or webhook")
        log_format = env.get("HILO_LOG_FORMAT", "console").strip() or "console"
        if log_format not in ("console", "json"):
            raise ConfigError(f"HILO_LOG_FORMAT={log_format!r}: set it to console or json")
        language = env.get("HILO_LANGUAGE", "en").strip() or "en"
        embedder = env.get("HILO_EMBEDDER", "").strip().lower() or "auto"
        if embedder not in EMBEDDERS:
            raise ConfigError(f"HILO_EMBEDDER={embedder!r}: set it to none, local or openai (or leave it unset)")
        embedding_url = _url(env, "HILO_EMBEDDING_URL", "http://127.0.0.1:11434/v1")
        embedding_key = env.get("HILO_EMBEDDING_API_KEY", "").strip() or ("" if embedding_url else openai_key)
        if embedder == "openai" and not (embedding_key or embedding_url or openai_base):
            raise ConfigError("HILO_EMBEDDER=openai needs OPENAI_API_KEY (or HILO_EMBEDDING_URL / OPENAI_BASE_URL "
                              "for an OpenAI-compatible server); or set HILO_EMBEDDER=local or none")
        return cls(
            database_url=database_url,
            model=model,
            fallback_models=fallbacks,
            model_routes=routes,
            system_prompt=env.get("HILO_SYSTEM_PROMPT", "").strip() or DEFAULT_SYSTEM_PROMPT,
            context_budget=_int(env, "HILO_CONTEXT_BUDGET", 8000, minimum=256),
            cross_surface_hours=_int(env, "HILO_CROSS_SURFACE_HOURS", 24),
            cross_surface_limit=_int(env, "HILO_CROSS_SURFACE_LIMIT", 20),
            secret_key=env.get("HILO_SECRET_KEY", "").strip(),
            public_url=env.get("HILO_PUBLIC_URL", "").strip().rstrip("/"),
            openai_api_key=openai_key,
            openai_base_url=openai_base,
            anthropic_api_key=anthropic_key,
            anthropic_base_url=anthropic_base,
            model_timeout=_float(env, "HILO_MODEL_TIMEOUT", 60.0),
            model_attempts=_int(env, "HILO_MODEL_ATTEMPTS", 3),
            max_message_chars=_int(env, "HILO_MAX_MESSAGE_CHARS", 4096),
            language=language,
            log_level=env.get("HILO_LOG_LEVEL", "info").strip().lower() or "info",
            log_format=log_format,
            telegram_bot_token=env.get("TELEGRAM_BOT_TOKEN", "").strip(),
            telegram_webhook_secret=env.get("TELEGRAM_WEBHOOK_SECRET", "").strip(),
            telegram_mode=mode,
            telegram_api_base_url=env.get("TELEGRAM_API_BASE_URL", "").strip(),
            telegram_allowed_users=tuple(
                u.strip() for u in env.get("HILO_TELEGRAM_ALLOWED_USERS", "").split(",") if u.strip()
            ),
            twilio_account_sid=env.get("TWILIO_ACCOUNT_SID", "").strip(),
            twilio_auth_token=env.get("TWILIO_AUTH_TOKEN", "").strip(),
            twilio_whatsapp_number=env.get("TWILIO_WHATSAPP_NUMBER", "").strip(),
            twilio_api_base_url=env.get("TWILIO_API_BASE_URL", "").strip(),
            allowed_origins=_origins(env.get("HILO_ALLOWED_ORIGINS", "")),
            site_secret=env.get("HILO_SITE_SECRET", "").strip(),
            jwt_secret=env.get("HILO_JWT_SECRET", "").strip(),
            jwt_audience=tuple(a.strip() for a in env.get("HILO_JWT_AUDIENCE", "authenticated").split(",")
                               if a.strip()),
            jwt_jwks_url=_url(env, "HILO_JWT_JWKS_URL",
                              "https://<project>.supabase.co/auth/v1/.well-known/jwks.json"),
            rate_limit_visitor=_int(env, "HILO_RATE_LIMIT_VISITOR", 20),
            rate_limit_ip=_int(env, "HILO_RATE_LIMIT_IP", 60),
            session_max_age=_int(env, "HILO_SESSION_MAX_AGE", 30 * 24 * 3600, minimum=60),
            trusted_proxies=_proxies(env.get("HILO_TRUSTED_PROXIES", "")),
            cleanup_seconds=_int(env, "HILO_CLEANUP_SECONDS", 3600),
            extract_every=_int(env, "HILO_EXTRACT_EVERY", 6, minimum=0),
            summary_min_messages=_int(env, "HILO_SUMMARY_MIN_MESSAGES", 4, minimum=0),
            stop_timeout=_float(env, "HILO_STOP_TIMEOUT", 36.0),
            embedder=embedder,
            embedding_model=env.get("HILO_EMBEDDING_MODEL", "").strip(),
            embedding_url=embedding_url or openai_base,
            embedding_api_key=embedding_key,
            memory_weights=_memory_weights(env.get("HILO_MEMORY_WEIGHTS", "")),
            memory_expiry_days=_int(env, "HILO_MEMORY_EXPIRY_DAYS", 120),
            memory_expiry_importance=_share(env, "HILO_MEMORY_EXPIRY_IMPORTANCE", 0.3),
            embed_seconds=_int(env, "HILO_EMBED_SECONDS", 30),
            embed_batch=_int(env, "HILO_EMBED_BATCH", 32),
            embed_query_timeout=_float(env, "HILO_EMBED_QUERY_TIMEOUT", 2.0),
            # -- issue 12, outbox: recovery of unanswered messages and the outbox's lease ----------------------
            recovery_grace=_float(env, "HILO_RECOVERY_GRACE", 30.0),
            recovery_window=_float(env, "HILO_RECOVERY_WINDOW", 6 * 3600.0),
            recovery_seconds=_int(env, "HILO_RECOVERY_SECONDS", 60),
            outbox_lease=_float(env, "HILO_OUTBOX_LEASE", 60.0),
            # -- inbound (issue 12)
            data_dir=env.get("HILO_DATA_DIR", "").strip() or _default_data_dir(database_url),
            journal_max_bytes=_int(env, "HILO_JOURNAL_MAX_BYTES", 64 * 1024 * 1024, minimum=4096),
            inbound_retention_days=_int(env, "HILO_INBOUND_RETENTION_DAYS", 7),
            # -- issue 13, ops: readiness and metrics
            ready_outbox_age=_float(env, "HILO_READY_OUTBOX_AGE", 900.0),
            metrics_port=_port(env, "HILO_METRICS_PORT"),
            metrics_host=env.get("HILO_METRICS_HOST", "").strip() or "127.0.0.1",
            metrics_token=env.get("HILO_METRICS_TOKEN", "").strip(),
            # -- issue 13, costs: prices, caps, alerts (bot/config_costs.py)
            **costs_from(env),
            # -- issue 15, media (bot/config_media.py)
            **media_from(env, openai_key=openai_key, openai_base=openai_base),
            # -- issue 13, data
            retention_days=retention.parse(env.get("HILO_RETENTION_DAYS", "")),
            export_link_minutes=_int(env, "HILO_EXPORT_LINK_MINUTES", 15, minimum=1),
            # -- issue 13, admin
            admin_token=env.get("HILO_ADMIN_TOKEN", "").strip(),
            admin_session_minutes=_int(env, "HILO_ADMIN_SESSION_MINUTES", 30, minimum=1),
            admin_sign_ins_per_minute=_int(env, "HILO_ADMIN_SIGN_INS_PER_MINUTE", 5, minimum=1),
            # -- issue 15, tools (bot/config_tools.py)
            **tools_from(env),
        )

    @classmethod
    def from_env(cls, dotenv_path: str | Path = ".env") -> Settings:
        """Read os.environ, with a `.env` file in the working directory under it (the environment wins)."""
        merged: dict[str, str] = {}
        path = Path(dotenv_path)
        if path.is_file():
            from dotenv import dotenv_values

            merged.update({k: v for k, v in dotenv_values(path).items() if v is not None})
        merged.update(os.environ)
        return cls.from_mapping(merged)


def ensure_secret_key(settings: Settings, key_file: Path) -> Settings:
    """HILO_SECRET_KEY, or one generated on first run and kept in `key_file` (mode 0600): sessions survive restarts.
    The file's directory must exist (OSError otherwise): a mistyped database path is not created silently."""
    if settings.secret_key:
        return settings
    if key_file.is_file():
        key = key_file.read_text().strip()
    else:
        import secrets  # here: only the daemon's first run needs it, and every command reads the settings

        key = secrets.token_urlsafe(48)
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(key + "\n")
    return settings.with_(secret_key=key)
