"""What a plain install gives, and what the install scripts pull in.

The surfaces hilo exists for (Telegram, WhatsApp) and the Postgres driver install with `pip install -e .`;
the old extras names stay valid, empty, so `pip install -e '.[telegram,whatsapp,postgres]'` keeps working.
tests/test_readme.py installs a fresh clone for real; this checks the declaration without the network.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~ \[;]", requirement, maxsplit=1)[0].lower()


def test_surface_libraries_and_asyncpg_are_main_dependencies() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    main = {_name(r) for r in project["dependencies"]}
    for package in ("python-telegram-bot", "twilio", "asyncpg"):
        assert package in main, f"{package} is not installed by a plain `pip install -e .`"
    extras = project["optional-dependencies"]
    for extra in ("telegram", "whatsapp", "postgres"):  # old install commands still name them
        assert extra in extras, f"the extra {extra!r} is gone: `pip install '.[{extra}]'` would warn"
        assert not {_name(r) for r in extras[extra]} - main, f"the extra {extra!r} installs more than main"


def _apt_installs(text: str) -> list[str]:
    return [m.group(0) for m in re.finditer(r"apt-get\s+install[^\n]*", text)]


def test_every_apt_get_install_skips_recommends() -> None:
    """Debian's chromium recommends ~120 packages (avahi, upower, ...) that headless tests never use."""
    files = [REPO / "scripts" / "needs.sh", REPO / "scripts" / "test.sh", REPO / "scripts" / "check-deploy.sh",
             REPO / ".ci" / "run", REPO / "deploy" / "Dockerfile", REPO / "README.md", REPO / "docs" / "deploy.md"]
    found = 0
    for path in files:
        for command in _apt_installs(path.read_text()):
            found += 1
            assert "--no-install-recommends" in command, f"{path.relative_to(REPO)}: {command}"
    assert found >= 1  # scripts/needs.sh installs chromium, pgbouncer and python3.X-venv with apt-get


def _packages() -> list[str]:
    """The top-level packages pyproject.toml has setuptools find (and so every wheel holds)."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    return sorted({p.split(".")[0] for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]})


def _dockerfile_copies() -> list[str]:
    """What deploy/Dockerfile COPYs into its build folder, as paths of the checkout."""
    copied: list[str] = []
    for line in (REPO / "deploy" / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            copied += line.split()[1:-1]
    return copied


def test_the_dockerfile_copies_every_package_pip_installs() -> None:
    """`pip install .` in the image builds from the folders COPY put there: one left out fails the build."""
    missing = set(_packages()) - set(_dockerfile_copies())
    assert not missing, f"deploy/Dockerfile does not COPY {sorted(missing)}"


def test_the_wheel_the_dockerfile_builds_holds_every_module_and_file(tmp_path: Path) -> None:
    """The image (and any `pip install .`) runs the wheel built from what the Dockerfile copies, not the checkout
    the suite's editable install imports: a package left out of it is an ImportError at `hilo serve`'s start
    (bot.tools was, until stop 53). Built for real, by pip, from exactly those paths."""
    build = tmp_path / "build"
    build.mkdir()
    for name in _dockerfile_copies():
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, build / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, build / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--verbose", "--no-deps",
                            "--disable-pip-version-check", "--wheel-dir", str(tmp_path / "dist"), str(build)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    # what setuptools deprecates stops the build on a date it names (the license as a table: 2027-02-18), and a
    # data folder setuptools takes for a package it was not told of may be left out
    for warned in ("SetuptoolsDeprecationWarning", "is absent from the `packages` configuration"):
        assert warned not in built.stdout + built.stderr, warned
    [wheel] = (tmp_path / "dist").glob("hilo-*.whl")
    with zipfile.ZipFile(wheel) as z:
        held = {n for n in z.namelist() if ".dist-info/" not in n}
    tracked = subprocess.run(["git", "ls-files", *_packages()], cwd=REPO, check=True, capture_output=True,
                             text=True).stdout.split()
    assert len(tracked) > 200
    missing = sorted(set(tracked) - held)
    assert not missing, f"the wheel leaves out {missing}"
