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
apt_updated=
# debian PACKAGE WHY OTHERWISE: as root, Debian's PACKAGE is installed with apt-get (without recommends); otherwise
# this stops with how to get it. WHY ends in "need(s)", and Debian's PACKAGE follows; OTHERWISE: the other way.
debian() {
  local package=$1 why=$2 otherwise=$3
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "scripts/test.sh: $why Debian's $package: installing it with apt-get" >&2
    [ -n "$apt_updated" ] || { apt-get update -qq; apt_updated=1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$package" >/dev/null
  else
    echo "scripts/test.sh: $why Debian's $package:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends $package" >&2
    echo "  $otherwise" >&2
    exit 1
  fi
}
# need BINARY PACKAGE WHY OVERRIDE: Debian's PACKAGE must provide BINARY (or OVERRIDE names another path)
need() {
  [ -x "$1" ] || debian "$2" "$1 is missing. $3" "(or set $4=/path/to/$2)"
}
# never `playwright install`: the widget tests drive Debian's Chromium
need "${HILO_TEST_CHROMIUM:-/usr/bin/chromium}" chromium "The web widget tests need" HILO_TEST_CHROMIUM
# the turn lease tests run Postgres behind a real pooler in transaction mode
need "${HILO_TEST_PGBOUNCER:-/usr/sbin/pgbouncer}" pgbouncer "The pooler tests need" HILO_TEST_PGBOUNCER
# a .venv without pip is what `python3 -m venv` leaves where ensurepip was missing: made again
if ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
  # `python3 -m venv` needs ensurepip, which Debian and Ubuntu ship apart from python3 (python3.X-venv)
  if ! "$PYTHON" -c 'import ensurepip' 2>/dev/null; then
    debian "$("$PYTHON" -c 'import sys; print(f"python3.{sys.version_info[1]}-venv")')" "Making .venv with $PYTHON needs" \
      "(or set PYTHON=/path/to/a/python3 that has ensurepip)"
  fi
  "$PYTHON" -m venv --clear .venv
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
