"""Downloading a person's media with a size cap, for every surface (Telegram's Bot API file URL, Twilio's MediaUrl):
streamed, refused on a Content-Length over the cap before the body is read, and stopped as soon as the bytes read
pass it (a server that states no length, or a wrong one). Redirects are followed (Twilio's MediaUrl answers with a
redirect to the file's storage; httpx drops the Authorization header when the redirect leaves the host). The URL is
never logged: a Bot API file URL holds the bot token.
"""

from __future__ import annotations

import httpx

from bot.media import MediaTooLarge

#: Seconds to connect and between two reads (a voice note of a few MB arrives in seconds).
TIMEOUT = httpx.Timeout(30.0, connect=10.0)


async def download(url: str, limit: int, *, auth: tuple[str, str] | None = None) -> bytes:
    """The body at `url`, at most `limit` bytes: MediaTooLarge past it; httpx.HTTPError when it cannot be had."""
    async with httpx.AsyncClient(timeout=TIMEOUT, follow_redirects=True) as client, \
            client.stream("GET", url, auth=auth) as response:
        response.raise_for_status()
        stated = response.headers.get("content-length", "")
        if stated.isdigit() and int(stated) > limit:
            raise MediaTooLarge(int(stated))
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > limit:
                raise MediaTooLarge(len(body))
    return bytes(body)
