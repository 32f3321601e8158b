"""End to end: `mesa up` as a subprocess on free ports, four health endpoints, clean stop."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import asyncpg
import httpx
import psutil
import pytest

from services.common.auth import header_value
from services.common.secret_file import read_secret
from tests.conftest import platform_port_env

pytestmark = pytest.mark.e2e

READY_TIMEOUT_S = 120


def _env(var_dir: Path, **extra: str) -> dict[str, str]:
    # PYTHONUNBUFFERED dropped: mesa up's lines must reach the pipe by its own flushing.
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("MESA_") and k != "PYTHONUNBUFFERED"
    }
    env.update(platform_port_env())
    env.update(
        MESA_VAR_DIR=str(var_dir),
        **extra,
    )
    return env


def _start(env: dict[str, str], log_path: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "services.cli", "up", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=open(log_path, "w"),
        text=True,
    )


def _wait_ready(proc: subprocess.Popen[str]) -> list[str]:
    lines: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:  # blocks on the process's own output, no polling
        lines.append(line.rstrip())
        if "ready; Ctrl-C stops everything" in line:
            return lines
    raise AssertionError(f"mesa up exited before ready: {lines}")


@pytest.fixture(scope="module")
def running_platform():
    # A folder of ours the server's own user (when we are root) may pass through, so the data
    # stays in var/pg (pytest's own temp root is 0700 and not ours to open).
    top = Path(tempfile.mkdtemp(prefix="mesa-e2e-"))
    top.chmod(0o711)
    var_dir = top / "var"
    env = _env(var_dir, MESA_LOG_FORMAT="json", MESA_LOG_LEVEL="debug")
    var_dir.mkdir()
    log_path = var_dir / "up-stderr.log"
    proc = _start(env, log_path, "--demo")
    try:
        lines = _wait_ready(proc)
        yield proc, env, lines, log_path
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(top, ignore_errors=True)


def test_up_serves_four_health_endpoints(running_platform):
    _, env, lines, _ = running_platform
    text = "\n".join(lines)
    for name, var in [
        ("ledger", "MESA_LEDGER_PORT"),
        ("engine", "MESA_ENGINE_PORT"),
        ("matchmaking", "MESA_MATCHMAKING_PORT"),
        ("gateway", "MESA_GATEWAY_PORT"),
    ]:
        url = f"http://127.0.0.1:{env[var]}"
        assert url in text
        response = httpx.get(f"{url}/health", timeout=5)
        assert response.status_code == 200
        assert response.json() == {"service": name, "version": "0.1.0", "database": "ok"}


def test_services_log_in_as_mesa_app_with_a_password_no_log_shows(running_platform):
    _, env, lines, log_path = running_platform
    var = Path(env["MESA_VAR_DIR"])
    app_password = (var / "pg_app_password").read_text().strip()
    superuser_password = (var / "pg_superuser_password").read_text().strip()
    for name in ("pg_app_password", "pg_superuser_password", "internal_secret"):
        assert oct((var / name).stat().st_mode & 0o777) == "0o600", name
    port = env["MESA_PG_PORT"]

    async def users() -> set[str]:
        conn = await asyncpg.connect(
            f"postgresql://postgres:{superuser_password}@127.0.0.1:{port}/mesa"
        )
        try:
            rows = await conn.fetch(
                "SELECT DISTINCT usename FROM pg_stat_activity "
                "WHERE datname = 'mesa' AND application_name LIKE 'mesa%'"
            )
        finally:
            await conn.close()
        with pytest.raises(asyncpg.InvalidPasswordError):
            await asyncpg.connect(f"postgresql://postgres@127.0.0.1:{port}/mesa")
        return {r["usename"] for r in rows}

    assert asyncio.run(users()) == {"mesa_app"}
    state = json.loads((var / "up.json").read_text())
    assert state["database_url"] == f"postgresql://mesa_app:***@127.0.0.1:{port}/mesa"
    output = "\n".join(lines) + log_path.read_text()
    assert "mesa_app:***@" in output
    assert app_password not in output and superuser_password not in output


def test_internal_services_listen_on_their_unix_sockets(running_platform):
    """`mesa up` points the services' URLs at each other's sockets in var/run (the wallet call
    below goes gateway -> ledger over one); TCP stays for health checks and other hosts."""
    _, env, lines, _ = running_platform
    run = Path(env["MESA_VAR_DIR"]) / "run"
    guarded = {"ledger": "/v1/holds", "engine": "/internal/matches", "matchmaking": "/v1/leave"}
    for name, guarded_path in guarded.items():
        path = run / f"{name}.sock"
        assert f"(internal calls: {path})" in "\n".join(lines)
        assert path.is_socket() and oct(path.stat().st_mode & 0o777) == "0o600"
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(path)), timeout=5) as client:
            health = client.get("http://localhost/health")
            assert health.json()["service"] == name
            refused = client.post(f"http://localhost{guarded_path}", json={})
            assert refused.status_code == 401, (name, refused.text)
    assert sorted(p.name for p in run.iterdir()) == [
        "engine.sock",
        "ledger.sock",
        "matchmaking.sock",
    ]


def test_demo_accounts_are_printed_and_can_sign_in(running_platform):
    _, env, lines, _ = running_platform
    text = "\n".join(lines)
    assert "players ana, beto, cris, dani" in text
    assert "password 'mesa-demo-2026'" in text
    gateway = f"http://127.0.0.1:{env['MESA_GATEWAY_PORT']}"
    token = httpx.post(
        f"{gateway}/api/auth/tokens",
        json={"username": "ana", "password": "mesa-demo-2026", "label": "e2e"},
        timeout=10,
    )
    assert token.status_code == 201, token.text
    wallet = httpx.get(
        f"{gateway}/api/me/wallet",
        headers={"Authorization": f"Bearer {token.json()['token']}"},
        timeout=10,
    )
    assert wallet.status_code == 200, wallet.text
    assert "10000" in wallet.text


def test_demo_money_came_through_the_checked_cashier_as_finance(running_platform):
    """The demo funds its players as staff do: each deposit is the gateway's cashier's, by the
    demo's finance user, in the staff audit log; the ledger takes deposits from no one else."""
    _, env, _, _ = running_platform
    var = Path(env["MESA_VAR_DIR"])
    superuser_password = (var / "pg_superuser_password").read_text().strip()

    async def audited() -> list[tuple[str, str, str, int]]:
        conn = await asyncpg.connect(
            f"postgresql://postgres:{superuser_password}@127.0.0.1:{env['MESA_PG_PORT']}/mesa"
        )
        try:
            rows = await conn.fetch(
                "SELECT actor, action, subject, (detail->>'amount')::int AS amount "
                "FROM gateway.staff_actions WHERE action = 'finance.deposit' ORDER BY subject"
            )
        finally:
            await conn.close()
        return [(r["actor"], r["action"], r["subject"], r["amount"]) for r in rows]

    assert asyncio.run(audited()) == [
        ("finance", "finance.deposit", f"user:{name}", 10_000)
        for name in ("ana", "beto", "cris", "dani")
    ]
    secret = bytes.fromhex(read_secret(var / "internal_secret"))
    run = var / "run" / "ledger.sock"
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(run)), timeout=5) as client:
        refused = client.post(
            "http://localhost/v1/deposits",
            json={},
            headers={"Authorization": header_value(secret, "cashier", "ledger")},
        )
        assert refused.status_code == 403, refused.text


def test_internal_services_refuse_calls_without_credential(running_platform):
    _, env, _, _ = running_platform
    for var in ("MESA_LEDGER_PORT", "MESA_ENGINE_PORT", "MESA_MATCHMAKING_PORT"):
        response = httpx.get(f"http://127.0.0.1:{env[var]}/internal/anything", timeout=5)
        assert response.status_code in (401, 404)
        assert response.status_code != 200


def test_logs_are_json_and_carry_the_request_id(running_platform):
    _, env, _, log_path = running_platform
    httpx.get(
        f"http://127.0.0.1:{env['MESA_GATEWAY_PORT']}/health",
        headers={"X-Request-ID": "e2e-request-77"},
        timeout=5,
    )
    # The request line is written before the response is sent; the file is read after.
    records = []
    for line in log_path.read_text().splitlines():
        if line.startswith("{"):
            records.append(json.loads(line))
    assert any(
        r.get("request_id") == "e2e-request-77" and r.get("service") == "gateway" for r in records
    ), records[-5:]


def test_second_up_on_same_state_refuses(running_platform, tmp_path):
    _, env, _, _ = running_platform
    second = subprocess.run(
        [sys.executable, "-m", "services.cli", "up"],
        env={**env, "MESA_LOG_FORMAT": "console"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert second.returncode != 0
    assert "already running" in second.stdout + second.stderr
    assert f"held by pid {running_platform[0].pid} (" in second.stdout


def test_sigterm_stops_everything_postgres_included(running_platform):
    proc, _, _, _ = running_platform
    parent = psutil.Process(proc.pid)
    descendants = parent.children(recursive=True)
    names = " ".join(" ".join(p.cmdline()) for p in descendants)
    assert "postgres" in names and "serve" in names
    postmaster = [p for p in descendants if p.name() == "postgres"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    gone, alive = psutil.wait_procs(descendants + postmaster, timeout=30)
    assert not alive, [p.cmdline() for p in alive]


def test_kill_9_of_mesa_up_leaves_no_process_behind():
    """No parent-death signal is relied on: the watchdogs stop the services' process groups
    and PostgreSQL when the supervisor is killed outright."""
    top = Path(tempfile.mkdtemp(prefix="mesa-e2e-kill-"))
    top.chmod(0o711)
    try:
        env = _env(top / "var")
        (top / "var").mkdir()
        proc = _start(env, top / "var" / "up-stderr.log")
        try:
            _wait_ready(proc)
            descendants = psutil.Process(proc.pid).children(recursive=True)
            assert any(p.name() == "postgres" for p in descendants)
        finally:
            proc.kill()
            proc.wait()
        _, alive = psutil.wait_procs(descendants, timeout=60)
        assert not alive, [p.cmdline() for p in alive]
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_port_in_use_is_reported_by_name(tmp_path):
    env = _env(tmp_path)
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", int(env["MESA_GATEWAY_PORT"])))
        blocker.listen()
        result = subprocess.run(
            [sys.executable, "-m", "services.cli", "up"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 3
    assert "MESA_GATEWAY_PORT" in result.stdout
    # and who holds it: this test process
    assert f"in use by pid {os.getpid()} (" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_bad_configuration_fails_naming_the_variable(tmp_path):
    env = _env(tmp_path, MESA_LOG_FORMAT="yaml")
    result = subprocess.run(
        [sys.executable, "-m", "services.cli", "up"], env=env, capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "MESA_LOG_FORMAT" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_a_socket_path_too_long_falls_back_to_tcp(tmp_path):
    from launcher.up import build_children, internal_url
    from services.common.config import load_settings

    deep = tmp_path / ("d" * 90)
    settings = load_settings({"MESA_VAR_DIR": str(deep)})
    children = build_children(settings, engines=2, gateways=1)
    assert [c.socket for c in children] == [None, None, None, None, None]
    assert internal_url(settings, children[0]) == f"http://127.0.0.1:{settings.ledger_port}"
    short = build_children(load_settings({"MESA_VAR_DIR": str(tmp_path)}), 2, 1)
    assert [c.socket.name if c.socket else None for c in short] == [
        "ledger.sock",
        "engine-0.sock",
        "engine-1.sock",
        "matchmaking.sock",
        None,  # the gateway serves browsers over TCP only
    ]
    assert internal_url(settings, short[1]).startswith("http+unix://%2F")


def test_ledger_replicas_get_their_own_ports_and_sockets(tmp_path):
    from launcher.up import REPLICA_PORT_STRIDE, build_children
    from services.common.config import load_settings

    settings = load_settings({"MESA_VAR_DIR": str(tmp_path)})
    children = build_children(settings, engines=1, gateways=1, ledgers=2)
    ledgers = [c for c in children if c.service == "ledger"]
    assert [c.name for c in ledgers] == ["ledger-0", "ledger-1"]
    assert [c.port for c in ledgers] == [
        settings.ledger_port,
        settings.ledger_port + REPLICA_PORT_STRIDE,
    ]
    assert [c.socket.name if c.socket else None for c in ledgers] == [
        "ledger-0.sock",
        "ledger-1.sock",
    ]
