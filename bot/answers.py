"""What the person reads for an answer that arrived: never nothing, never half a sentence passed off as whole.

    reply_text(completion, "es")   # the text to store and deliver

By `Completion.outcome` (bot.models.base): "ok" is the model's text; "refused" is the refusal the model wrote, or
the catalogue's `model_refused` when it wrote none; "tool_calls" and "empty" are the model's text when there is
some, else the catalogue's `model_no_answer`; "cut" is the text as far as it got, then the catalogue's
`model_cut_note` so the person can tell it stops short (the note alone when nothing came before the cut).
"""

from __future__ import annotations

from bot.models.base import Completion
from kernel import catalog


def reply_text(completion: Completion, lang: str) -> str:
    """The reply for `completion` in `lang`."""
    text = completion.text
    if completion.outcome == "cut":
        note = catalog.t("model_cut_note", lang)
        return f"{text.rstrip()}\n\n{note}" if text.strip() else note
    if text.strip():
        return text
    if completion.outcome == "refused":
        return catalog.t("model_refused", lang)
    return catalog.t("model_no_answer", lang)
