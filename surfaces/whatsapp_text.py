"""Pure text helpers of the WhatsApp surface: splitting replies to Twilio's size limit (kernel.text_split).
The opt-out keywords are policy: bot/opt_out.py.

No I/O and no twilio import here, so these are tested (and reused) on their own.
"""

from __future__ import annotations

from kernel.text_split import split_text, utf16_len

#: Twilio refuses a WhatsApp body over 1,600 characters (counted in UTF-16 units, as its API does).
MAX_BODY_CHARS = 1600


def split_message(text: str, limit: int = MAX_BODY_CHARS) -> list[str]:
    """`text` as parts of at most `limit` UTF-16 units (as Twilio counts), in order, cut on paragraph, then
    line, then sentence, then word boundaries (kernel.text_split). An empty text gives no part."""
    if limit < 2:
        raise ValueError("limit must be at least 2")
    return split_text(text, limit, length=utf16_len)

