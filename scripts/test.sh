#!/usr/bin/env bash
# Install everything the tests need into .venv (Python packages from PyPI) and run the whole suite.
# Works on a fresh machine with python3 >= 3.11; extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test,telegram,whatsapp,postgres]'
exec .venv/bin/python -m pytest "$@"
