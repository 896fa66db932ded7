"""kernel/text.py `url_shown`: a URL as an error or a log may show it, its password masked wherever it is."""

from __future__ import annotations

import pytest

from kernel.text import url_shown


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql://hilo:pw@db:5432/hilo", "postgresql://hilo:***@db:5432/hilo"),
    # unencoded "/" and "@" in a password: the user info ends at the last "@"
    ("postgresql+asyncpg://postgres:a/b@c@db.x.supabase.co:5432/postgres",
     "postgresql+asyncpg://postgres:***@db.x.supabase.co:5432/postgres"),
    ("postgresql://db/hilo?user=a&password=pw&sslmode=require", "postgresql://db/hilo?user=a&password=***&sslmode=require"),
    ("smtps://alerts:pw@smtp.example.com:465", "smtps://alerts:***@smtp.example.com:465"),
    # nothing to mask: shown as they are
    ("postgresql://hilo@db/hilo", "postgresql://hilo@db/hilo"),
    ("postgresql://db:5432/hilo", "postgresql://db:5432/hilo"),
    ("sqlite:///var/lib/hilo/hilo.db", "sqlite:///var/lib/hilo/hilo.db"),
])
def test_a_urls_password_is_masked_and_nothing_else(url: str, shown: str) -> None:
    assert url_shown(url) == shown
