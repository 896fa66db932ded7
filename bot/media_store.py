"""Where downloaded media lives (issue 15): the data directory by default, or Supabase Storage.

`MediaFiles` is what the voice Listener, the retention job, `hilo forget` / `/forget yes` and `hilo export` use:
`write` keeps a file and answers the path its media row records, `read` gives its bytes back (for the export),
`delete` removes files by their recorded paths. Two places hold them:

- `LocalFiles`: HILO_DATA_DIR/media/<user id>/<message id>-<kind>.<ext> (directories 0700, files 0600); the path
  recorded is the file's. Blocking file work runs on a thread (asyncio.to_thread).
- `SupabaseFiles`: the bucket HILO_MEDIA_BUCKET of the Supabase project SUPABASE_URL, through the supabase
  package's storage client (storage3's AsyncStorageClient, authenticated with SUPABASE_SERVICE_ROLE_KEY: the
  bucket stays private, no public URL is ever made); the path recorded is "supabase://<bucket>/<user id>/<message
  id>-<kind>.<ext>". The client (and storage3 with it) is created per operation: the daemon imports none of it
  until a file goes there, and keeps no connection open between voice notes.

`Media` (made by `media_files(settings)`) writes where HILO_MEDIA_STORE says and reads and deletes each path where
that path says, so the files written before the setting changed are still deleted by retention and forget.
Object keys and file names hold ids and the kind only, never a name nor any text of the person's.

    HiloError
    └── MediaStoreError   a place could not keep, give or delete a file (`status`: the storage's, when it said)
"""

from __future__ import annotations

import asyncio
import contextlib
import mimetypes
import os
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from kernel import log
from kernel.errors import ConfigError, HiloError

if TYPE_CHECKING:
    from bot.config import Settings

logger = log.get("hilo.media")
SCHEME = "supabase://"


class MediaStoreError(HiloError):
    """A file could not be kept, read or deleted where it lives (`status`: the storage's answer, if any)."""

    def __init__(self, message: str, status: int | str | None = None) -> None:
        super().__init__(message)
        self.status = status


class Named(Protocol):
    """What is written (a Voice, a photo): its file name, whose extension says its format."""

    @property
    def filename(self) -> str: ...


class MediaFiles(Protocol):
    """A place for downloaded media. Paths are the ones `write` answered (and media rows record)."""

    async def write(self, user_id: int, message_id: int, item: Named, data: bytes) -> str:
        """Keep `data` as the file of the person's message: its path. MediaStoreError when it cannot."""
        ...

    async def read(self, path: str) -> bytes:
        """The bytes kept at `path`. MediaStoreError when they cannot be read (also: not there)."""
        ...

    async def delete(self, paths: list[str]) -> int:
        """Delete these files (one already gone counts as deleted): how many. MediaStoreError when the place
        cannot be reached (nothing is known deleted then: the caller keeps the paths and tries again)."""
        ...


def _name(user_id: int, message_id: int, item: Named) -> str:
    return f"{int(user_id)}/{int(message_id)}-{item.filename}"


class LocalFiles:
    """HILO_DATA_DIR/media/<user id>/ (directories 0700, files 0600)."""

    def __init__(self, data_dir: str | Path) -> None:
        self.root = Path(data_dir) / "media"

    async def write(self, user_id: int, message_id: int, item: Named, data: bytes) -> str:
        return await asyncio.to_thread(self._write, _name(user_id, message_id, item), data)

    async def read(self, path: str) -> bytes:
        if not self._inside(Path(path)):
            raise MediaStoreError("not a file of the media folder")
        try:
            return await asyncio.to_thread(Path(path).read_bytes)
        except OSError as exc:
            raise MediaStoreError(f"cannot read a media file ({type(exc).__name__})") from exc

    async def delete(self, paths: list[str]) -> int:
        return await asyncio.to_thread(self._delete, paths)

    def _write(self, name: str, data: bytes) -> str:
        path = self.root / name
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        return str(path)

    def _inside(self, path: Path) -> bool:
        return self.root.resolve() in path.resolve().parents

    def _delete(self, paths: list[str]) -> int:
        done = 0
        for raw in paths:
            path = Path(raw)
            if not self._inside(path):
                logger.warning("media.delete_refused", reason="outside the media folder")
                continue
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            done += 1
        return done


class SupabaseFiles:
    """Private objects in Supabase Storage buckets: "supabase://<bucket>/<user id>/<message id>-<kind>.<ext>"."""

    def __init__(self, url: str, key: str, bucket: str, timeout: float = 30.0) -> None:
        self.url, self.key, self.bucket, self.timeout = url.rstrip("/"), key, bucket, timeout

    async def write(self, user_id: int, message_id: int, item: Named, data: bytes) -> str:
        name = _name(user_id, message_id, item)
        kind = getattr(item, "mime", None) or mimetypes.guess_type(item.filename)[0] or "application/octet-stream"
        # upsert: a voice note heard again (recovery after a crash) replaces its own object
        await self._call(self.bucket, "upload", name, data, {"content-type": kind, "upsert": "true"})
        return f"{SCHEME}{self.bucket}/{name}"

    async def read(self, path: str) -> bytes:
        bucket, name = split(path)
        data = await self._call(bucket, "download", name)
        assert isinstance(data, bytes)
        return data

    async def delete(self, paths: list[str]) -> int:
        by_bucket: dict[str, list[str]] = {}
        for path in paths:
            bucket, name = split(path)
            by_bucket.setdefault(bucket, []).append(name)
        for bucket, names in by_bucket.items():
            for start in range(0, len(names), 1000):  # the storage API removes up to 1,000 keys a request
                await self._call(bucket, "remove", names[start:start + 1000])
        return len(paths)  # an object already gone is not an error (the storage answers 200 without it)

    async def _call(self, bucket: str, method: str, *args: object) -> object:
        """One storage3 call on a client of its own (closed after it); its failures as MediaStoreError."""
        import httpx
        from storage3 import AsyncStorageClient
        from storage3.utils import StorageException

        # the headers the supabase client sends for a key: apikey, and the key as the bearer (service role)
        headers = {"apikey": self.key, "Authorization": f"Bearer {self.key}"}
        async with httpx.AsyncClient(headers=headers, timeout=self.timeout, follow_redirects=True) as http:
            client = AsyncStorageClient(f"{self.url}/storage/v1/", headers, http_client=http)
            try:
                result: object = await getattr(client.from_(bucket), method)(*args)
            except StorageException as exc:
                status = getattr(exc, "status", None)
                raise MediaStoreError(f"Supabase Storage refused the {method} ({status})", status) from exc
            except httpx.HTTPError as exc:
                raise MediaStoreError(f"Supabase Storage unreachable ({type(exc).__name__})") from exc
        return result


def split(path: str) -> tuple[str, str]:
    """("bucket", "user/message-kind.ext") of a "supabase://" path."""
    bucket, _, name = path.removeprefix(SCHEME).partition("/")
    if not path.startswith(SCHEME) or not bucket or not name:
        raise MediaStoreError("not a Supabase Storage path")
    return bucket, name


class Media:
    """Writes where HILO_MEDIA_STORE says; reads and deletes each path where it lives (the data directory, or
    Supabase Storage when the path says so), whatever the setting is now."""

    def __init__(self, local: LocalFiles, supabase: SupabaseFiles | None, store: str = "local") -> None:
        self.local, self.supabase = local, supabase
        self.target: MediaFiles = supabase if store == "supabase" and supabase is not None else local

    async def write(self, user_id: int, message_id: int, item: Named, data: bytes) -> str:
        return await self.target.write(user_id, message_id, item, data)

    async def read(self, path: str) -> bytes:
        return await self._place(path).read(path)

    async def delete(self, paths: list[str]) -> int:
        remote = [p for p in paths if p.startswith(SCHEME)]
        done = await self.local.delete([p for p in paths if not p.startswith(SCHEME)])
        if remote:
            done += await self._place(remote[0]).delete(remote)
        return done

    def _place(self, path: str) -> MediaFiles:
        if not path.startswith(SCHEME):
            return self.local
        if self.supabase is None:
            raise MediaStoreError("a file in Supabase Storage, and SUPABASE_URL or SUPABASE_SERVICE_ROLE_KEY is "
                                  "not set: set them to reach it")
        return self.supabase


async def keep_file(files: MediaFiles, user_id: int, message_id: int, item: Named, data: bytes) -> str | None:
    """The file kept (its path); None when its place failed: the message is still heard or seen (logged, ids
    only). A voice note's (bot/media.py) and a photo's (bot/vision.py)."""
    try:
        return await files.write(user_id, message_id, item, data)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # MediaStoreError, or the data directory's OSError
        logger.error("media.store_failed", user_id=user_id, message_id=message_id, bytes=len(data),
                     error=type(exc).__name__, status=getattr(exc, "status", None))
        return None


async def drop_file(files: MediaFiles, message_id: int, path: str) -> bool:
    """Delete one file now; False (logged) when its place failed: the retention job deletes it later."""
    try:
        await files.delete([path])
    except MediaStoreError as exc:
        logger.error("media.delete_failed", message_id=message_id, status=exc.status)
        return False
    return True


def media_files(settings: Settings) -> Media:
    """The media files of these settings: the data directory, and Supabase Storage when its project is set."""
    supabase = None
    if settings.supabase_url and settings.supabase_key:
        supabase = SupabaseFiles(settings.supabase_url, settings.supabase_key, settings.media_bucket)
    if settings.media_store == "supabase":
        import importlib.util

        if importlib.util.find_spec("storage3") is None:  # found without importing it
            raise ConfigError("HILO_MEDIA_STORE=supabase needs the supabase package: pip install 'hilo[supabase]' "
                              "(or set HILO_MEDIA_STORE=local)")
    return Media(LocalFiles(settings.data_dir), supabase, settings.media_store)
