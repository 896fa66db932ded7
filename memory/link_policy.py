"""The limits of identity linking: part of the store contract (memory.store re-exports it), kept by every backend.

bot/linking.py chooses them; the store's redeem_link_code applies them inside its transaction.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LinkPolicy:
    max_failures: int = 10            # wrong codes per identity within `failure_window_s` before a lockout
    failure_window_s: int = 15 * 60
    lockout_s: int = 15 * 60
    max_code_attempts: int = 5        # attempts on one code (prompts, own identity, locked callers) before it dies
    # Wrong codes from everyone within the window: past this many, linking is "under pressure". It never refuses
    # anyone for it; it only makes guessing dearer for the keys that guess: a key with a wrong code in the window
    # is locked after `pressure_max_failures` (not `max_failures`), for `pressure_lockout_s`. A key with no wrong
    # code (a person typing the code they were given) is treated exactly as always.
    global_max_failures: int = 500
    pressure_max_failures: int = 3
    pressure_lockout_s: int = 60 * 60

