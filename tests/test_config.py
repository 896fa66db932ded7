"""Settings are read once from a mapping; a wrong setting fails with what to set."""

from pathlib import Path

import pytest

from bot.config import ModelSpec, Settings, ensure_secret_key
from kernel.errors import ConfigError


def test_defaults_run_offline_on_sqlite() -> None:
    s = Settings.from_mapping({})
    assert s.database_url == "sqlite:///hilo.db"
    assert s.model == ModelSpec("echo", "echo")
    assert s.fallback_models == ()
    assert s.context_budget == 8000 and s.cross_surface_hours == 24


def test_database_url_falls_back_to_DATABASE_URL() -> None:
    assert Settings.from_mapping({"DATABASE_URL": "sqlite:///x.db"}).database_url == "sqlite:///x.db"
    both = {"DATABASE_URL": "sqlite:///x.db", "HILO_DATABASE_URL": "sqlite:///y.db"}
    assert Settings.from_mapping(both).database_url == "sqlite:///y.db"


def test_model_chain_parsed_in_order() -> None:
    s = Settings.from_mapping({
        "HILO_MODEL": "openai:gpt-4o-mini", "OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k",
        "HILO_FALLBACK_MODELS": "anthropic:claude-3-5-haiku-latest, echo",
    })
    assert [m.label for m in s.models] == ["openai:gpt-4o-mini", "anthropic:claude-3-5-haiku-latest", "echo"]


def test_key_picks_a_default_model() -> None:
    assert Settings.from_mapping({"OPENAI_API_KEY": "k"}).model.provider == "openai"
    assert Settings.from_mapping({"ANTHROPIC_API_KEY": "k"}).model.provider == "anthropic"


def test_openai_compatible_server_needs_no_key() -> None:
    s = Settings.from_mapping({"HILO_MODEL": "openai:llama3", "OPENAI_BASE_URL": "http://127.0.0.1:11434/v1"})
    assert s.model.label == "openai:llama3"


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"HILO_MODEL": "gpt-4"}, "provider:model"),
        ({"HILO_MODEL": "foo:bar"}, "provider:model"),
        ({"HILO_MODEL": "openai:gpt-4o"}, "OPENAI_API_KEY"),
        ({"HILO_FALLBACK_MODELS": "anthropic:claude"}, "ANTHROPIC_API_KEY"),
        ({"HILO_CONTEXT_BUDGET": "lots"}, "HILO_CONTEXT_BUDGET"),
        ({"HILO_CONTEXT_BUDGET": "10"}, "at least 256"),
        ({"HILO_DATABASE_URL": "mysql://x"}, "sqlite:///"),
        ({"HILO_TELEGRAM_MODE": "push"}, "polling or webhook"),
    ],
)
def test_wrong_settings_say_what_to_set(env: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        Settings.from_mapping(env)


def test_dotenv_is_read_and_environment_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("HILO_CONTEXT_BUDGET=3000\nHILO_CROSS_SURFACE_HOURS=48\n")
    monkeypatch.setenv("HILO_CROSS_SURFACE_HOURS", "36")
    s = Settings.from_env(env_file)
    assert s.context_budget == 3000
    assert s.cross_surface_hours == 36


def test_secret_key_generated_once_and_kept(tmp_path: Path) -> None:
    key_file = tmp_path / "hilo.secret"
    first = ensure_secret_key(Settings(), key_file)
    second = ensure_secret_key(Settings(), key_file)
    assert first.secret_key and first.secret_key == second.secret_key
    assert key_file.stat().st_mode & 0o077 == 0
    assert ensure_secret_key(Settings(secret_key="mine"), key_file).secret_key == "mine"


def test_no_secret_is_in_the_settings_repr() -> None:
    """Settings end up printed (a REPL, a test's failure, an error message that shows them): their repr leaves
    every key, token, secret and the database's password out, as HTTP tools' secrets are (bot/config_tools.py)."""
    secrets = {name: f"marker-{k}-{name.lower()}" for k, name in enumerate((
        "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "HILO_SECRET_KEY", "TELEGRAM_BOT_TOKEN", "TELEGRAM_WEBHOOK_SECRET",
        "TWILIO_AUTH_TOKEN", "HILO_SITE_SECRET", "HILO_JWT_SECRET", "HILO_EMBEDDING_API_KEY", "HILO_METRICS_TOKEN",
        "HILO_ADMIN_TOKEN", "HILO_TRANSCRIBE_API_KEY", "SUPABASE_SERVICE_ROLE_KEY"))}
    # URLs that are credentials themselves (a Slack or Discord webhook's path), or carry a password
    secrets["HILO_ALERT_WEBHOOK_URL"] = "https://hooks.slack.com/services/T0/B0/marker-slack-webhook"
    secrets["HILO_ALERT_SMTP_URL"] = "smtps://alerts:marker-smtp-password@smtp.example.com:465"
    password = "marker-db-password"
    settings = Settings.from_mapping({**secrets, "HILO_DATABASE_URL": f"postgresql://hilo:{password}@db:5432/hilo",
                                      "HILO_MEDIA_STORE": "supabase", "SUPABASE_URL": "https://p.supabase.co",
                                      "HILO_ALERT_EMAIL_TO": "ops@example.com"})
    assert settings.openai_api_key == secrets["OPENAI_API_KEY"]  # read, and so present to be left out
    assert settings.admin_token == secrets["HILO_ADMIN_TOKEN"] and password in settings.database_url
    shown = repr(settings)
    assert "model=ModelSpec(provider='openai'" in shown  # the rest is shown
    leaked = [name for name, value in secrets.items() if value in shown] + (["database password"] * (password in shown))
    assert leaked == []


@pytest.mark.parametrize("url", ["mysql://hilo:s3cret-pw@db:3306/hilo",
                                 "postgresql+asyncpg://postgres:s3cret-pw@db.abc.supabase.co:5432/postgres"])
def test_a_database_url_refused_is_shown_without_its_password(url: str) -> None:
    """A URL of another scheme (another database, or SQLAlchemy's driver suffix copied from elsewhere) is refused,
    and the error, which goes to the terminal and the service's log, shows it with its password masked."""
    with pytest.raises(ConfigError) as refused:
        Settings.from_mapping({"HILO_DATABASE_URL": url})
    assert "s3cret-pw" not in str(refused.value)
    assert url.replace("s3cret-pw", "***") in str(refused.value)


def test_an_alert_webhook_url_refused_is_not_echoed() -> None:
    """A Slack or Discord webhook's URL is its credential: written without its scheme, it is refused without being
    printed (the error goes to the terminal and the service's log)."""
    with pytest.raises(ConfigError, match="HILO_ALERT_WEBHOOK_URL is not an http") as refused:
        Settings.from_mapping({"HILO_ALERT_WEBHOOK_URL": "hooks.slack.com/services/T0/B0/marker-slack-secret"})
    assert "marker-slack-secret" not in str(refused.value)
