"""The one message catalogue: every text hilo says to a person, in English and Spanish.

`t(key, lang, **params)` picks the language by its primary subtag ("es-AR" -> "es"), falls back to
English, and formats `params` into the text. Operators' logs never come from here.
"""

from __future__ import annotations

LANGUAGES = ("en", "es")

MESSAGES: dict[str, dict[str, str]] = {
    "en": {
        "model_unavailable": (
            "Sorry, I can't answer right now: my language model is not responding. "
            "Your message is saved; please try again shortly."
        ),
        "message_too_long": "That message is too long ({length} characters). Please keep it under {limit}.",
        "empty_message": "That message is empty. Please write some text.",
        "bad_request": "That request could not be read: {detail}",
        "not_found": "That conversation does not exist.",
        "unauthorized": "Your session is missing or has expired. Please reload the page.",
        "store_unavailable": "I can't reach my memory right now. Please try again in a moment.",
        "payload_too_large": "That request is too large (limit {limit} bytes).",
        "internal_error": "Something went wrong on my side. Please try again.",
        "forgotten": "Everything about {handle} has been deleted.",
        "nothing_to_forget": "There is nothing stored about {handle}.",
        "remembered": "Noted: I will remember that.",
        # -- commands (bot/commands.py) --
        # -- telegram --
        # -- whatsapp --
        # -- web widget --
        # -- identity linking --
    },
    "es": {
        "model_unavailable": (
            "Lo siento, ahora mismo no puedo responder: mi modelo de lenguaje no contesta. "
            "Tu mensaje está guardado; vuelve a intentarlo en un momento."
        ),
        "message_too_long": "Ese mensaje es demasiado largo ({length} caracteres). El máximo es {limit}.",
        "empty_message": "Ese mensaje está vacío. Escribe algo de texto.",
        "bad_request": "No se ha podido leer la petición: {detail}",
        "not_found": "Esa conversación no existe.",
        "unauthorized": "Tu sesión falta o ha caducado. Recarga la página.",
        "store_unavailable": "Ahora mismo no puedo acceder a mi memoria. Inténtalo de nuevo en un momento.",
        "payload_too_large": "La petición es demasiado grande (límite: {limit} bytes).",
        "internal_error": "Algo ha fallado por mi parte. Inténtalo de nuevo.",
        "forgotten": "Se ha borrado todo lo relativo a {handle}.",
        "nothing_to_forget": "No hay nada guardado sobre {handle}.",
        "remembered": "Anotado: lo recordaré.",
        # -- commands (bot/commands.py) --
        # -- telegram --
        # -- whatsapp --
        # -- web widget --
        # -- identity linking --
    },
}


def language(tag: str | None, default: str = "en") -> str:
    """The catalogue language for a tag like "es-ES" or an Accept-Language header value."""
    for part in (tag or "").split(","):
        primary = part.split(";")[0].strip().split("-")[0].lower()
        if primary in LANGUAGES:
            return primary
    return default if default in LANGUAGES else "en"


def t(key: str, lang: str | None = None, **params: object) -> str:
    """The text for `key` in `lang` (English when missing), formatted with `params`."""
    table = MESSAGES.get(language(lang), MESSAGES["en"])
    text = table.get(key) or MESSAGES["en"][key]
    return text.format(**params) if params else text
