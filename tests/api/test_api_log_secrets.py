"""No log line carries a credential, password or secret: a platform signs a player in (cookie
session, CSRF token, bearer token), calls the services with a live service credential, and
sends failing and malformed requests with them (bad and nested JSON, unknown and forbidden
routes, a handler that raises with the headers in its message and locals), and makes a CPU
match's actor fail while it holds its unrevealed server seed; everything it logged,
structlog's lines and stdlib's (uvicorn, asyncio), is searched for each secret.

The platform runs in a subprocess (tests/api/log_probe.py) so its logging is configured
exactly as `mesa serve` configures it, before any logger is used.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from services.common.logging import MAX_LINE_CHARS
from services.common.migrate import upgrade
from tests.api.platform_stack import COMPONENTS

ROOT = Path(__file__).resolve().parents[2]
PROBE_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def platform_db(database_url: str) -> str:
    upgrade(database_url, COMPONENTS)
    return database_url


@pytest.mark.parametrize("log_format", ["console", "json"])
def test_no_secret_in_any_log_line(platform_db: str, tmp_path: Path, log_format: str) -> None:
    user = f"logs_{log_format}_{secrets.token_hex(3)}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-m", "tests.api.log_probe", platform_db, log_format, "debug"]
    done = subprocess.run(
        [*args, str(tmp_path), user],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT_S,
        check=False,
    )
    log = done.stderr
    assert done.returncode == 0, log[-5000:]
    found: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    # The probe did reach the paths that log: the failing handlers, a library's error, a
    # never-retrieved task, the request lines of the debug level.
    for expected in (
        "unhandled_error",
        "match_actor_failed",
        "Exception in ASGI application",
        "Task exception was never retrieved",
        "probe_careless",
        "/api/lobby/quick-join",
    ):
        assert expected in log, f"{expected!r} was not logged"
    leaked = {name: value for name, value in found.items() if value in log}
    where = {name: log[max(0, log.find(v) - 300) : log.find(v) + 100] for name, v in leaked.items()}
    assert not leaked, f"in the log: {where}"
    assert "RecursionError" not in log
    assert max(len(line) for line in log.splitlines()) <= MAX_LINE_CHARS
