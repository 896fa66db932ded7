"""The reply splitter lives in kernel/text_split.py (the outbox in bot/ splits replies too); re-exported here."""

from kernel.text_split import split_text, utf16_len

__all__ = ["split_text", "utf16_len"]
