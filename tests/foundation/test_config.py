"""Configuration is checked at start: unknown variables and bad values name the variable."""

from __future__ import annotations

import pytest

from services.common.config import VARIABLES, ConfigError, load_settings, mask_url


def test_defaults_use_embedded_database_and_loopback(tmp_path):
    settings = load_settings({"MESA_VAR_DIR": str(tmp_path)})
    assert settings.database_is_embedded
    # Services log in as the least-privilege role; only migrations use the superuser.
    assert settings.database_url == "postgresql://mesa_app@127.0.0.1:54329/mesa"
    assert settings.migration_database_url == "postgresql://postgres@127.0.0.1:54329/mesa"
    assert settings.host == "127.0.0.1"
    assert settings.gateway_port == 8000
    assert settings.commission_rate_bp == 1000
    assert settings.url_of("ledger") == "http://127.0.0.1:8001"


def test_external_database_url_disables_embedded(tmp_path):
    settings = load_settings(
        {"MESA_VAR_DIR": str(tmp_path), "MESA_DATABASE_URL": "postgresql://u:p@db:5432/mesa"}
    )
    assert not settings.database_is_embedded
    assert settings.database_url == "postgresql://u:p@db:5432/mesa"
    assert settings.migration_database_url == settings.database_url


def test_embedded_urls_carry_the_generated_passwords_from_var(tmp_path):
    (tmp_path / "pg_app_password").write_text("a1b2\n")
    (tmp_path / "pg_superuser_password").write_text("c3d4\n")
    settings = load_settings({"MESA_VAR_DIR": str(tmp_path)})
    assert settings.database_url == "postgresql://mesa_app:a1b2@127.0.0.1:54329/mesa"
    assert settings.migration_database_url == "postgresql://postgres:c3d4@127.0.0.1:54329/mesa"


def test_mask_url_hides_the_password_only():
    assert mask_url("postgresql://mesa_app:s3cr3t@127.0.0.1:5432/mesa") == (
        "postgresql://mesa_app:***@127.0.0.1:5432/mesa"
    )
    assert mask_url("postgresql://postgres@h:1/d") == "postgresql://postgres@h:1/d"


def test_unknown_variable_is_named():
    with pytest.raises(ConfigError, match="MESA_GATEWAY_PROT"):
        load_settings({"MESA_GATEWAY_PROT": "8000"})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MESA_GATEWAY_PORT", "eighty"),
        ("MESA_GATEWAY_PORT", "70000"),
        ("MESA_LOG_FORMAT", "xml"),
        ("MESA_LOG_LEVEL", "loud"),
        ("MESA_DATABASE_URL", "sqlite:///x.db"),
        ("MESA_INTERNAL_SECRET", "abcd"),
        ("MESA_COMMISSION_RATE_BP", "10.5"),
        ("MESA_LEDGER_URL", "ftp://x"),
        ("MESA_LEDGER_URL", "http+unix:///var/run/ledger.sock"),
        ("MESA_LEDGER_URL", "http+unix://relative.sock"),
        ("MESA_LEDGER_SOCKET", "relative.sock"),
        ("MESA_ENGINE_SOCKET", "/" + "x" * 120),
        ("MESA_CURRENCY", "usd"),
    ],
)
def test_bad_values_name_the_variable(name, value):
    with pytest.raises(ConfigError, match=name):
        load_settings({name: value})


def test_every_variable_is_documented():
    from pathlib import Path

    reference = Path(__file__).resolve().parents[2] / "docs" / "reference" / "configuration.md"
    missing = [name for name in VARIABLES if name not in reference.read_text()]
    assert not missing, f"docs/reference/configuration.md lacks {missing}"


def test_unix_socket_urls_round_trip():
    from pathlib import Path

    from services.common.config import unix_socket_path, unix_socket_url

    url = unix_socket_url(Path("/var/run/mesa ledger.sock"))
    assert url == "http+unix://%2Fvar%2Frun%2Fmesa%20ledger.sock"
    assert unix_socket_path(url) == "/var/run/mesa ledger.sock"
    assert unix_socket_path("http://127.0.0.1:8001") is None
    settings = load_settings({"MESA_LEDGER_URL": url, "MESA_LEDGER_SOCKET": "/tmp/l.sock"})
    assert settings.url_of("ledger") == url
    assert settings.socket_of("ledger") == Path("/tmp/l.sock")
    assert settings.socket_of("gateway") is None
