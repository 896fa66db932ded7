#!/usr/bin/env bash
# Install everything the tests need into .venv (Python packages from PyPI) and run the whole suite.
# Works on a fresh machine with python3 >= 3.11; extra arguments go to pytest. Without arguments (or with
# HILO_LINT=1) ruff, mypy strict and the import contracts (lint-imports) run first.
# The widget tests drive Debian's Chromium (/usr/bin/chromium) through Playwright: as root it is installed with
# apt-get when missing; otherwise this stops with how to get it. Never `playwright install`. The same goes for
# Debian's pgbouncer (/usr/sbin/pgbouncer), which the turn lease tests run in front of the embedded Postgres.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
apt_updated=
# need BINARY PACKAGE WHY OVERRIDE: Debian's PACKAGE must provide BINARY; as root it is installed with apt-get
# (without recommends), otherwise this stops with how to get it.
need() {
  local binary=$1 package=$2 why=$3 override=$4
  [ -x "$binary" ] && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "scripts/test.sh: $binary is missing: installing Debian's $package with apt-get" >&2
    [ -n "$apt_updated" ] || { apt-get update -qq; apt_updated=1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$package" >/dev/null
  else
    echo "scripts/test.sh: $binary is missing. $why need Debian's $package:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends $package" >&2
    echo "  (or set $override=/path/to/$package)" >&2
    exit 1
  fi
}
# never `playwright install`: the widget tests drive Debian's Chromium
need "${HILO_TEST_CHROMIUM:-/usr/bin/chromium}" chromium "The web widget tests" HILO_TEST_CHROMIUM
# the turn lease tests run Postgres behind a real pooler in transaction mode
need "${HILO_TEST_PGBOUNCER:-/usr/sbin/pgbouncer}" pgbouncer "The pooler tests" HILO_TEST_PGBOUNCER
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
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
