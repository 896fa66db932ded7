"""What a message without words says, as short structured text the model can use: "[location: 39.47, -0.38]",
"[document: invoice.pdf, application/pdf, 120 KB]", "[contact: Ana, +34600000000]", "[sticker: 👍]".

Written once for every surface: each surface reads its platform's fields and calls these. The line is the
message text (a caption follows it on the next line), so memory, context and search treat it like typed text.
"""

from __future__ import annotations

from kernel.text import size_text


def _join(kind: str, *parts: str | None) -> str:
    shown = [p.strip() for p in parts if p and p.strip()]
    return f"[{kind}: {', '.join(shown)}]" if shown else f"[{kind}]"


def location(latitude: float | str, longitude: float | str, title: str | None = None,
             address: str | None = None) -> str:
    """A shared place: a venue (title, address) or a bare point."""
    point = f"{_coordinate(latitude)}, {_coordinate(longitude)}"
    if title or address:
        return _join("venue", title, address, point)
    return f"[location: {point}]"


def document(name: str | None, mime: str | None, size: int | None) -> str:
    return _join("document", name, mime, size_text(size) if size else None)


def contact(name: str | None, phone: str | None) -> str:
    return _join("contact", name, phone)


def sticker(emoji: str | None) -> str:
    return _join("sticker", emoji)


def voice(seconds: int | None) -> str:
    """A voice note or audio before its transcript replaces it (what is stored, and kept if it never comes)."""
    return _join("voice note", f"{seconds} s" if seconds else None)


def with_caption(line: str, caption: str | None) -> str:
    return f"{line}\n{caption}" if caption and caption.strip() else line


def _coordinate(value: float | str) -> str:
    try:
        return f"{float(value):.5f}".rstrip("0").rstrip(".")
    except ValueError:
        return str(value)[:20]
