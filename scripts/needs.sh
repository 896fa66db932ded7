# Sourced by scripts/test.sh, scripts/check-deploy.sh and bench/run (from the project directory): `debian`, which
# installs a Debian package or says how, and `venv`, which makes .venv with $PYTHON and installs hilo and its tests.
apt_updated=
# debian PACKAGE WHY OTHERWISE: as root, Debian's PACKAGE is installed with apt-get (without recommends); otherwise
# this stops with how to get it. WHY ends in "need(s)", and Debian's PACKAGE follows; OTHERWISE: the other way.
debian() {
  local package=$1 why=$2 otherwise=$3
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "$0: $why Debian's $package: installing it with apt-get" >&2
    [ -n "$apt_updated" ] || { apt-get update -qq; apt_updated=1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$package" >/dev/null
  else
    echo "$0: $why Debian's $package:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends $package" >&2
    echo "  $otherwise" >&2
    exit 1
  fi
}
venv() {
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
}
