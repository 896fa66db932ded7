#!/usr/bin/env bash
# Install everything the tests need into .venv (Python packages from PyPI) and run the whole suite.
# Works on a fresh machine with python3 >= 3.11; extra arguments go to pytest. Without arguments (or with
# HILO_LINT=1) ruff and mypy strict run first.
# The widget tests drive Debian's Chromium (/usr/bin/chromium) through Playwright: as root it is installed with
# apt-get when missing; otherwise this stops with how to get it. Never `playwright install`. The same goes for
# Debian's pgbouncer (/usr/sbin/pgbouncer), which the turn lease tests run in front of the embedded Postgres.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
CHROMIUM="${HILO_TEST_CHROMIUM:-/usr/bin/chromium}"
if [ ! -x "$CHROMIUM" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "scripts/test.sh: $CHROMIUM is missing: installing Debian's chromium with apt-get" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
  else
    echo "scripts/test.sh: $CHROMIUM is missing. The web widget tests need Debian's Chromium:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends chromium" >&2
    echo "  (or set HILO_TEST_CHROMIUM=/path/to/chromium; do not run \`playwright install\`)" >&2
    exit 1
  fi
fi
PGBOUNCER="${HILO_TEST_PGBOUNCER:-/usr/sbin/pgbouncer}"
if [ ! -x "$PGBOUNCER" ]; then  # the turn lease tests run Postgres behind a real pooler in transaction mode
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "scripts/test.sh: $PGBOUNCER is missing: installing Debian's pgbouncer with apt-get" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends pgbouncer >/dev/null
  else
    echo "scripts/test.sh: $PGBOUNCER is missing. The pooler tests need Debian's pgbouncer:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends pgbouncer" >&2
    echo "  (or set HILO_TEST_PGBOUNCER=/path/to/pgbouncer)" >&2
    exit 1
  fi
fi
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
if [ "$#" -eq 0 ] || [ "${HILO_LINT:-}" = 1 ]; then  # the whole suite also checks style and types
  .venv/bin/python -m ruff check .
  .venv/bin/python -m mypy
fi
exec .venv/bin/python -m pytest "$@"
