#!/usr/bin/env bash
# Install everything the tests need into .venv (Python packages from PyPI) and run the whole suite.
# Works on a fresh machine with python3 >= 3.11; extra arguments go to pytest. Without arguments (or with
# HILO_LINT=1) ruff, mypy strict and the import contracts (lint-imports) run first.
# The widget tests drive Debian's Chromium (/usr/bin/chromium) through Playwright: as root it is installed with
# apt-get when missing; otherwise this stops with how to get it. Never `playwright install`. The same goes for
# Debian's pgbouncer (/usr/sbin/pgbouncer), which the turn lease tests run in front of the embedded Postgres, and
# for Debian's and Ubuntu's python3, which makes no virtualenv without its python3.X-venv.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
# shellcheck source=scripts/needs.sh
. scripts/needs.sh
# need BINARY PACKAGE WHY OVERRIDE: Debian's PACKAGE must provide BINARY (or OVERRIDE names another path)
need() {
  [ -x "$1" ] || debian "$2" "$1 is missing. $3" "(or set $4=/path/to/$2)"
}
# never `playwright install`: the widget tests drive Debian's Chromium
need "${HILO_TEST_CHROMIUM:-/usr/bin/chromium}" chromium "The web widget tests need" HILO_TEST_CHROMIUM
# the turn lease tests run Postgres behind a real pooler in transaction mode
need "${HILO_TEST_PGBOUNCER:-/usr/sbin/pgbouncer}" pgbouncer "The pooler tests need" HILO_TEST_PGBOUNCER
venv
workers=()
if [ "$#" -eq 0 ] || [ "${HILO_LINT:-}" = 1 ]; then  # the whole suite also checks style, types and layers
  .venv/bin/python -m ruff check .
  .venv/bin/python -m mypy
  .venv/bin/lint-imports --no-cache --no-logo  # the import contracts: pyproject.toml, [tool.importlinter]
  # ... and runs on every core (pytest-xdist; each worker its own embedded Postgres): most of its time is waiting
  # on real servers, restarts and leases (23.5 -> 10.5 minutes on 2 vCPUs). A file or -k of your own runs in
  # this process, where -s and --pdb work.
  workers=(-n auto --dist worksteal)
fi
exec .venv/bin/python -m pytest "${workers[@]}" "$@"
