"""End to end: `mesa up` as a subprocess on free ports, four health endpoints, clean stop."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest

from tests.conftest import platform_port_env

pytestmark = pytest.mark.e2e

READY_TIMEOUT_S = 120


def _env(var_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESA_")}
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
def running_platform(tmp_path_factory):
    var_dir = tmp_path_factory.mktemp("var")
    env = _env(var_dir, MESA_LOG_FORMAT="json", MESA_LOG_LEVEL="debug")
    log_path = var_dir / "up-stderr.log"
    proc = _start(env, log_path, "--demo")
    try:
        lines = _wait_ready(proc)
        yield proc, env, lines, log_path
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


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
    from services.common.config import load_settings
    from services.common.up import build_children, internal_url

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
    from services.common.config import load_settings
    from services.common.up import REPLICA_PORT_STRIDE, build_children

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
