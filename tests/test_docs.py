"""The docs match the code: settings, where the generated secret key is kept, and the files the docs cite.

- every setting bot/config.py reads is in the README's configuration table, and deploy/env.example lists
  exactly the table's settings (a setting added later has to be written in both);
- the README says where HILO_SECRET_KEY is generated, as bot/app.py really keeps it;
- every path the README and docs/ cite exists in the repository, and no file cites a *.md it does not hold.
"""

from __future__ import annotations

import fnmatch
import re
import subprocess
from pathlib import Path

from bot.app import secret_file
from bot.config import Settings

REPO = Path(__file__).resolve().parent.parent
_NAME = r"(?:HILO|OPENAI|ANTHROPIC|TELEGRAM|TWILIO)_[A-Z0-9_]+|DATABASE_URL"


def _section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else len(text)]


def readme_settings() -> dict[str, str]:
    """Each setting named in the first column of the README's configuration table, with its row."""
    rows = [line for line in _section((REPO / "README.md").read_text(), "Configuration").splitlines()
            if line.startswith("| `")]
    return {name: row for row in rows for name in re.findall(rf"`({_NAME})`", row.split("|")[1])}


def env_example_settings() -> set[str]:
    return set(re.findall(rf"^#?\s*({_NAME})=", (REPO / "deploy" / "env.example").read_text(), flags=re.M))


def code_settings() -> set[str]:
    """The environment names bot/config.py and its areas' modules (bot/config_*.py: costs, routes, tools, media)
    read (each appears there as a quoted string)."""
    text = "".join(path.read_text() for path in sorted((REPO / "bot").glob("config*.py")))
    return set(re.findall(rf'"({_NAME})"', text))


def test_env_example_lists_every_setting_of_the_readme() -> None:
    missing = sorted(set(readme_settings()) - env_example_settings())
    assert not missing, f"deploy/env.example lacks {missing}"


def test_env_example_lists_only_settings_the_readme_explains() -> None:
    unexplained = sorted(env_example_settings() - set(readme_settings()))
    assert not unexplained, f"the README's configuration table lacks {unexplained}"


def test_readme_explains_every_setting_the_code_reads() -> None:
    missing = sorted(code_settings() - set(readme_settings()))
    assert not missing, f"bot/config.py reads {missing}, which the README's configuration table lacks"


def test_the_secret_key_is_documented_where_the_code_keeps_it() -> None:
    row = readme_settings()["HILO_SECRET_KEY"]
    beside_sqlite = secret_file(Settings(database_url="sqlite:///data/chat.db"))
    assert beside_sqlite == Path("data/chat.secret")  # the database's name, its suffix replaced
    assert "`hilo.db` -> `hilo.secret`" in row
    assert str(secret_file(Settings(database_url="sqlite:///hilo.db"))) == "hilo.secret"
    postgres = secret_file(Settings(database_url="postgresql://u@db.example.com/hilo"))
    assert f"`{postgres}`" in row and "working directory" in row
    example = (REPO / "deploy" / "env.example").read_text()
    assert "hilo.secret" in example and str(postgres) in example


# -- the files the docs cite ----------------------------------------------------------------------------------

_EXT = "md|py|js|sql|sh|service|example|png|toml|json|jsonl|html|ini|yml|yaml|cfg|txt"
#: a file (with one of those extensions) or a folder written with its trailing slash, as a word of its own:
#: not inside a URL (`//host/x.js`), not a route (`/widget.js`), not a host name (`hilo.example.com`).
_CITED = re.compile(rf"(?<![\w/.:@~-])((?:\.\.?/)*[\w*.-]+(?:/[\w*.-]+)*(?:\.(?:{_EXT})|/))(?![\w/-]|\.\w)")
_PLACEHOLDERS = {"FILE.jsonl"}  # `hilo import FILE.jsonl`: a file of yours


def _tracked() -> list[str]:
    return subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()


def _ignored(cited: str) -> bool:
    """A place the repository's .gitignore names: made by a run (artifacts/, bench/results/), never committed."""
    return subprocess.run(["git", "check-ignore", "-q", "--no-index", cited], cwd=REPO).returncode == 0


def _exists(cited: str, doc: Path, tracked: list[str]) -> bool:
    folders = {str(Path(f).parent) + "/" for f in tracked} | {
        "/".join(f.split("/")[:n]) + "/" for f in tracked for n in range(1, f.count("/") + 1)}
    if "/" not in cited.rstrip("/"):  # a bare name: some file (or folder) of the repository is called so
        names = {Path(f).name for f in tracked} | {Path(d).name + "/" for d in folders}
        return any(fnmatch.fnmatch(name, cited) for name in names)
    for base in (REPO, doc.parent):  # from the top, or from the citing file (Markdown links, images)
        target = (base / cited).resolve()
        try:
            relative = target.relative_to(REPO).as_posix() + ("/" if cited.endswith("/") else "")
        except ValueError:
            continue  # outside the repository
        if any(fnmatch.fnmatch(f, relative) for f in tracked) or relative in folders:
            return True
    return False


def test_every_path_the_readme_and_docs_cite_exists() -> None:
    tracked = _tracked()
    docs = [REPO / f for f in tracked if f.endswith(".md")]
    missing = []
    for doc in docs:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            for match in _CITED.finditer(line):
                cited = match.group(1)
                word_before = re.split(r"[\s`()\[\]]", line[:match.start()])[-1]  # the word it is part of
                if "://" in word_before or cited in _PLACEHOLDERS:  # a URL's path, a stand-in
                    continue
                if not _exists(cited, doc, tracked) and not _ignored(cited):
                    missing.append(f"{doc.relative_to(REPO)}:{number}: {cited}")
    assert docs and not missing, "cited but not in the repository:\n" + "\n".join(missing)


def test_no_file_cites_a_markdown_file_the_repository_lacks() -> None:
    """Docstrings and comments too: the shared design notes live outside the repository, so nothing cites them."""
    tracked = _tracked()
    names = {Path(f).name for f in tracked}
    missing = []
    for path in tracked:
        if not path.endswith((".py", ".md", ".sh", ".js", ".toml", ".sql", ".service", ".example")):
            continue
        for number, line in enumerate((REPO / path).read_text().splitlines(), 1):
            for cited in re.findall(r"(?<![\w/.-])([\w.-]+\.md)\b", line):
                if cited not in names:
                    missing.append(f"{path}:{number}: {cited}")
    assert not missing, "\n".join(missing)
