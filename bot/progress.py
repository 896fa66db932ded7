"""Progress of a long command (`hilo embed`, `hilo import`) on stderr, so stdout keeps its one-line result.

On a terminal: a tqdm bar. Elsewhere (a pipe, a log file, CI): nothing, or with `plain=True` one line every
PLAIN_SECONDS and one at the end ("embedded 3200/10000 messages").
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

PLAIN_SECONDS = 5.0


class Progress:
    """`advance(n)` after each batch of n items out of `total`; `close()` at the end (also when stopped)."""

    def __init__(self, what: str, total: int, *, plain: bool = False, out: TextIO | None = None,
                 unit: str = "messages") -> None:
        self.what, self.total, self.done, self.unit, self._closed = what, total, 0, unit, False
        self._out = out or sys.stderr
        self._bar: Any = None
        self._plain = plain and not self._out.isatty()
        self._said = time.monotonic()
        if self._out.isatty() and total:
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=what, unit=f" {unit[:3]}", file=self._out, dynamic_ncols=True)

    def advance(self, n: int) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
        elif self._plain and time.monotonic() - self._said >= PLAIN_SECONDS:
            self._say()

    def _say(self) -> None:
        self._said = time.monotonic()
        print(f"{self.what}: {self.done}/{self.total} {self.unit}", file=self._out, flush=True)

    def close(self) -> None:
        """Once: a second close does nothing."""
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self._plain and self.total:
            self._say()
