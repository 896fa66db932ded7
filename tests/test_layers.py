"""The layers (docs/architecture.md, "Layers"): surfaces -> bot -> memory -> kernel, arrows down only.

The import contracts themselves are checked by `lint-imports` (pyproject.toml, [tool.importlinter]) in
scripts/test.sh, so in .ci/run. What an import graph cannot see is checked here: that no surface reaches the
store through an attribute (it gets `pipeline.history`, `.deliveries` and `.opt_out` instead), and that the app
finds the surfaces through their entry points, loading an optional one only when it is configured.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def test_no_surface_reaches_the_store_through_an_attribute() -> None:
    reaches: list[str] = []
    for path in sorted((ROOT / "surfaces").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr == "store":
                reaches.append(f"surfaces/{path.name}:{node.lineno} {ast.unparse(node)}")
    assert reaches == [], "surfaces reach the store directly: " + ", ".join(reaches)


def test_every_shipped_surface_is_registered_by_entry_point() -> None:
    registered = {ep.name: ep.value for ep in entry_points(group="hilo.surfaces")}
    assert registered == {
        "web": "surfaces.registry:web", "telegram": "surfaces.registry:telegram",
        "whatsapp": "surfaces.registry:whatsapp", "admin": "surfaces.registry:admin",
    }
    from bot import plugins
    from surfaces.cli import chat

    assert plugins.chat() is chat


_APP = """
import json, sys
from bot.app import create_app
from bot.config import Settings
env = {"HILO_DATABASE_URL": "sqlite:///%(db)s", "HILO_SECRET_KEY": "k" * 40, **json.loads(sys.argv[1])}
app = create_app(Settings.from_mapping(env))
paths = sorted({getattr(r, "path", "") for r in app.routes})
print(json.dumps({"paths": paths, "telegram": "telegram" in sys.modules, "twilio": "twilio" in sys.modules}))
"""


def _app(tmp_path: Path, env: dict[str, str]) -> dict[str, Any]:
    code = _APP % {"db": tmp_path / "hilo.db"}
    out = subprocess.run([sys.executable, "-c", code, json.dumps(env)], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    result: dict[str, Any] = json.loads(out.stdout.splitlines()[-1])
    return result


def test_optional_surfaces_load_only_when_configured(tmp_path: Path) -> None:
    bare = _app(tmp_path, {})
    assert "/api/messages" in bare["paths"]
    assert (bare["telegram"], bare["twilio"]) == (False, False), bare
    assert not any("telegram" in p or "whatsapp" in p for p in bare["paths"]), bare
    assert not any(p.startswith("/admin") for p in bare["paths"]), bare  # the admin page is off by default
    full = _app(tmp_path, {
        "TELEGRAM_BOT_TOKEN": "123:ABC", "TWILIO_ACCOUNT_SID": "AC" + "0" * 32, "TWILIO_AUTH_TOKEN": "t" * 32,
        "TWILIO_WHATSAPP_NUMBER": "whatsapp:+14155238886", "HILO_PUBLIC_URL": "https://bot.example.com",
    })
    assert (full["telegram"], full["twilio"]) == (True, True), full
    assert any("whatsapp" in p for p in full["paths"]), full
