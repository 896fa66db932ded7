"""The media area's settings (issue 15: voice notes and audio; photos: HILO_VISION, HILO_IMAGE_MAX_BYTES), read
from HILO_* names into Settings' media block.

Transcription is off unless HILO_TRANSCRIBE_MODEL names a model of an OpenAI-compatible `/audio/transcriptions`
endpoint (OpenAI `whisper-1` or `gpt-4o-mini-transcribe`, Groq `whisper-large-v3`, a local Whisper server's model):
HILO_TRANSCRIBE_URL (a server for transcriptions only), else OPENAI_BASE_URL, else OpenAI; HILO_TRANSCRIBE_API_KEY,
and OPENAI_API_KEY only when HILO_TRANSCRIBE_URL is not set (the OpenAI key is never sent to another server),
as HILO_EMBEDDING_URL / HILO_EMBEDDING_API_KEY do. Every malformed value is a ConfigError naming its setting.

Where downloaded files live (bot/media_store.py): HILO_MEDIA_STORE=local (HILO_DATA_DIR/media, the default) or
supabase (the private bucket HILO_MEDIA_BUCKET of the project SUPABASE_URL, with SUPABASE_SERVICE_ROLE_KEY).
SUPABASE_URL and the key are read whatever the store, so files kept there before a switch back to local are still
deleted by retention and forget.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from bot.config_costs import whole
from kernel.errors import ConfigError

STORES = ("local", "supabase")
#: Supabase Storage's bucket names: lowercase letters, digits, dots, hyphens and underscores.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9._-]{1,62}")


def media_from(env: Mapping[str, str], *, openai_key: str, openai_base: str) -> dict[str, Any]:
    """Settings' media fields from the environment."""
    url = env.get("HILO_TRANSCRIBE_URL", "").strip().rstrip("/")
    if url and not url.startswith(("https://", "http://")):
        raise ConfigError(f"HILO_TRANSCRIBE_URL={url!r} is not a URL: set it to e.g. http://127.0.0.1:8000/v1 "
                          "(an OpenAI-compatible server with /audio/transcriptions)")
    model = env.get("HILO_TRANSCRIBE_MODEL", "").strip()
    key = env.get("HILO_TRANSCRIBE_API_KEY", "").strip() or ("" if url else openai_key)
    if model and not (key or url or openai_base):
        raise ConfigError(f"HILO_TRANSCRIBE_MODEL={model!r} needs OPENAI_API_KEY (or HILO_TRANSCRIBE_URL with "
                          "HILO_TRANSCRIBE_API_KEY for Groq or a local Whisper server); or unset it")
    vision = env.get("HILO_VISION", "auto").strip().lower() or "auto"
    if vision not in ("auto", "on", "off"):
        raise ConfigError(f"HILO_VISION={vision!r}: set it to auto (known vision models see photos), on or off")
    return {
        "vision": vision,
        "image_max_bytes": whole(env, "HILO_IMAGE_MAX_BYTES", 5 * 1024 * 1024, 1024),
        "transcribe_model": model,
        "transcribe_url": url or openai_base,
        "transcribe_api_key": key,
        "transcribe_timeout": float(whole(env, "HILO_TRANSCRIBE_TIMEOUT", 120, 1)),
        "media_max_bytes": whole(env, "HILO_MEDIA_MAX_BYTES", 20 * 1024 * 1024, 1024),
        "media_max_seconds": whole(env, "HILO_MEDIA_MAX_SECONDS", 600, 1),
        "media_retention_days": whole(env, "HILO_MEDIA_RETENTION_DAYS", 30, 0),
        **store_from(env),
    }


def store_from(env: Mapping[str, str]) -> dict[str, Any]:
    """Where downloaded media is kept: the data directory, or a private Supabase Storage bucket."""
    store = env.get("HILO_MEDIA_STORE", "").strip().lower() or "local"
    if store not in STORES:
        raise ConfigError(f"HILO_MEDIA_STORE={store!r}: set it to local (HILO_DATA_DIR/media) or supabase")
    bucket = env.get("HILO_MEDIA_BUCKET", "").strip() or "hilo-media"
    if not _BUCKET.fullmatch(bucket):
        raise ConfigError(f"HILO_MEDIA_BUCKET={bucket!r} is not a bucket name: lowercase letters, digits, dots, "
                          "hyphens and underscores, e.g. hilo-media")
    url = env.get("SUPABASE_URL", "").strip().rstrip("/")
    if url and not url.startswith(("https://", "http://")):
        raise ConfigError(f"SUPABASE_URL={url!r} is not a URL: set it to https://<project>.supabase.co")
    key = env.get("SUPABASE_SERVICE_ROLE_KEY", "").strip()
    if store == "supabase" and not (url and key):
        raise ConfigError("HILO_MEDIA_STORE=supabase needs SUPABASE_URL (https://<project>.supabase.co) and "
                          "SUPABASE_SERVICE_ROLE_KEY (the project's service_role or secret key); or set "
                          "HILO_MEDIA_STORE=local")
    return {"media_store": store, "media_bucket": bucket, "supabase_url": url, "supabase_key": key}
