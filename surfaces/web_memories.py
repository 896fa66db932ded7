"""The widget's "what I remember" view: the caller's own memories, and forgetting one of them.

GET    /api/memories        -> {"memories": [...newest first, at most MEMORY_SHOWN], "total": N, "texts": {...}}
DELETE /api/memories/{id}   -> {"forgotten": "m12"}; 404 not_found when it is not the caller's (or does not exist)

Authenticated like every reader of history (web_auth.py: the widget's visitor token or a site login): a person
only ever sees and forgets their own. `texts` are the view's labels from kernel/catalog.py in the caller's language
(Accept-Language), so the widget shows no text of its own there. A memory is shown as `hilo memory --json` shows it
(bot/memory_commands.memory_json).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bot.memory_commands import MEMORY_SHOWN, memory_json
from kernel import catalog
from surfaces.web_auth import Caller
from surfaces.web_common import error, lang, path_id

Reader = Callable[[Request], Awaitable["tuple[Caller, int | None] | Response"]]
Answer = Callable[[Request, Caller, dict[str, Any]], JSONResponse]
TEXT_KEYS = {"title": "widget_memories_title", "empty": "widget_memories_empty", "forget": "widget_memories_forget"}


class MemoryView:
    """The two endpoints, over the web surface's reader (who calls, and their user) and answer (JSON + session)."""

    def __init__(self, reader: Reader, answer: Answer, history: Callable[[], Any]) -> None:
        self.reader, self.answer, self.history = reader, answer, history

    async def list(self, request: Request) -> Response:
        found = await self.reader(request)
        if isinstance(found, Response):
            return found
        caller, user_id = found
        memories = await self.history().memories(user_id) if user_id is not None else []
        language = lang(request)
        texts = {name: catalog.t(key, language) for name, key in TEXT_KEYS.items()}
        more = len(memories) - MEMORY_SHOWN
        texts["more"] = catalog.t("widget_memories_more", language, count=more) if more > 0 else ""
        return self.answer(request, caller, {"memories": [memory_json(m) for m in memories[:MEMORY_SHOWN]],
                                             "total": len(memories), "texts": texts})

    async def forget(self, request: Request) -> Response:
        found = await self.reader(request)
        if isinstance(found, Response):
            return found
        caller, user_id = found
        memory_id = path_id(request.path_params["memory_id"], prefix="m")
        if memory_id is None or user_id is None \
                or not await self.history().forget_memory(user_id, memory_id):
            return error(request, 404, "not_found")
        return self.answer(request, caller, {"forgotten": f"m{memory_id}"})
