"""Restart restores live matches from their logs; one owner per match; kill -9 end to end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import msgspec
import pytest

from services.common.db import asyncpg_dsn
from services.common.ports import free_port
from services.engine import records as L
from services.engine import rules as R
from services.engine import runtime as RT
from services.engine.clock import ManualClock
from tests.engine.engine_helpers import auth, commitment, drive, spec
from tests.service_auth import CallerByRoute, engine_caller

APUESTA_TURN_MS = R.make_ruleset("apuesta").turn_timeout_ms


async def test_engine_restart_restores_state_and_timers(
    harness_factory: Any, internal_secret: bytes
) -> None:
    h = auth(internal_secret)
    clock = ManualClock()
    async with harness_factory(clock=clock) as hz:
        c = hz.client
        await c.post(
            "/internal/matches", json=spec("rs1", "apuesta", {"mode": "parejas"}, 4), headers=h
        )
        clock.advance(RT.SEED_COMMIT_TIMEOUT_MS)
        for _ in range(5):
            clock.advance(APUESTA_TURN_MS)
        before = (await c.get("/internal/matches/rs1", headers=h)).json()
        views = [
            (await c.get(f"/internal/matches/rs1/seats/{s}/view", headers=h)).json()
            for s in range(4)
        ]
    assert before["status"] == "playing"
    # the engine is down while the turn deadline passes: honoured at restart
    async with harness_factory(clock=clock) as hz2:
        c2 = hz2.client
        after = (await c2.get("/internal/matches/rs1", headers=h)).json()
        assert after["table"] == before["table"] and after["seq"] == before["seq"]
        views2 = [
            (await c2.get(f"/internal/matches/rs1/seats/{s}/view", headers=h)).json()
            for s in range(4)
        ]
        assert [v["hand"] for v in views2] == [v["hand"] for v in views]
        clock.advance(APUESTA_TURN_MS)
        moved = (await c2.get("/internal/matches/rs1", headers=h)).json()
        assert moved["seq"] == before["seq"] + 1 and len(moved["table"]) == len(before["table"]) + 1
        st = await drive(c2, hz2.engine, "rs1", h)
        assert st["status"] == "finished"


async def test_engine_two_engines_never_run_one_match(
    harness_factory: Any, internal_secret: bytes
) -> None:
    h = auth(internal_secret)
    async with AsyncExitStack() as stack:
        a = await stack.enter_async_context(harness_factory())
        body = spec("own1", "casa", {"players": 2}, 2)
        assert (await a.client.post("/internal/matches", json=body, headers=h)).status_code == 200
        b = await stack.enter_async_context(harness_factory(scan=True))
        for _ in range(3):
            r = await b.client.get("/internal/matches/own1", headers=h)
            assert r.status_code == 503 and r.json()["error"] == "not_owner"
        seq = (await a.client.get("/internal/matches/own1", headers=h)).json()["seq"]
        await a.client.__aexit__(None, None, None)  # a's process goes away: its locks go
        r = await b.client.get("/internal/matches/own1", headers=h)
        assert r.status_code == 200 and r.json()["seq"] == seq


def _start(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "services.cli", "serve", "engine"],
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        cwd=Path(__file__).resolve().parents[2],
    )


def _wait_up(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("engine exited")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("engine did not start")


@pytest.mark.e2e
def test_engine_e2e_kill_mid_hand_and_continue(
    engine_db: str, internal_secret: bytes, tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESA_")} | {
        "MESA_DATABASE_URL": engine_db,
        "MESA_INTERNAL_SECRET": internal_secret.hex(),
        "MESA_ENGINE_PORT": str(port),
        "MESA_VAR_DIR": str(tmp_path),
        "MESA_OPERATOR_KEY": os.urandom(32).hex(),
        "MESA_LOG_LEVEL": "warning",
        # also on a Unix socket, as `mesa up` runs it: the kill below leaves the socket file
        "MESA_ENGINE_SOCKET": str(tmp_path / "engine.sock"),
    }
    h = auth(internal_secret)
    log = tmp_path / "engine.log"
    proc = _start(env, log)
    try:
        _wait_up(url, proc)
        # a second server may not take over a socket that a live one listens on
        rival = subprocess.run(
            [sys.executable, "-m", "services.cli", "serve", "engine", "--port", str(free_port())],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert rival.returncode == 3 and "in use by a running server" in rival.stderr
        with httpx.Client(
            base_url=url,
            headers=h,
            auth=CallerByRoute(internal_secret, "engine", engine_caller),
            timeout=10,
        ) as c:
            assert (
                c.post(
                    "/internal/matches", json=spec("e2e1", "casa", {"players": 2}, 2)
                ).status_code
                == 200
            )

            def act() -> None:
                st = c.get("/internal/matches/e2e1").json()
                seat = st["deadline"]["seats"][0]
                snap = c.get(f"/internal/matches/e2e1/seats/{seat}/view").json()
                a = snap["legal"][0]
                if a["type"] == "seed_commit":
                    action = {"type": "seed_commit", "commitment": commitment(f"e2e{seat}")}
                elif a["type"] == "seed_reveal":
                    action = {"type": "seed_reveal", "seed": f"e2e{seat}"}
                elif a["type"] == "play":
                    action = {"type": "play", "tile": a["tile"]}
                    if a["end"]:
                        action["end"] = a["end"]
                else:
                    action = {"type": a["type"]}
                body = {"seat": seat, "seq": snap["seq"], "action": action}
                r = c.post("/internal/matches/e2e1/actions", json=body)
                assert r.status_code == 200, r.text

            for _ in range(6):  # two commits, two reveals, two tiles
                act()
            st = c.get("/internal/matches/e2e1").json()
            assert st["phase"] == "play" and len(st["table"]) >= 2
            views = [c.get(f"/internal/matches/e2e1/seats/{s}/view").json() for s in (0, 1)]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert (tmp_path / "engine.sock").is_socket()  # left behind by the killed process
        proc = _start(env, log)
        _wait_up(url, proc)
        # the restarted engine took the dead one's socket over: the rest goes through it
        over_socket = httpx.HTTPTransport(uds=str(tmp_path / "engine.sock"))
        with httpx.Client(
            base_url=url,
            headers=h,
            auth=CallerByRoute(internal_secret, "engine", engine_caller),
            timeout=10,
            transport=over_socket,
        ) as c:
            st2 = c.get("/internal/matches/e2e1").json()
            assert st2["seq"] == st["seq"] and st2["table"] == st["table"]
            views2 = [c.get(f"/internal/matches/e2e1/seats/{s}/view").json() for s in (0, 1)]
            assert [v["hand"] for v in views2] == [v["hand"] for v in views]
            act()
            assert c.get("/internal/matches/e2e1").json()["seq"] > st["seq"]
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
        assert not (tmp_path / "engine.sock").exists()  # a clean stop removes its socket
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


async def test_engine_log_holds_typed_records(
    harness_factory: Any, internal_secret: bytes, engine_db: str
) -> None:
    """The match log is the tagged union of services.engine.records: readable tags and field
    names, every stored entry decodes to its Struct, and anything else is refused."""
    h = auth(internal_secret)
    async with harness_factory() as hz:
        body = spec("lg1", "dominicana", {"mode": "2v2"}, 4)
        assert (await hz.client.post("/internal/matches", json=body, headers=h)).status_code == 200
        st = await drive(hz.client, hz.engine, "lg1", h)
        assert st["status"] == "finished"
    conn = await asyncpg.connect(asyncpg_dsn(engine_db))
    try:
        rows = await conn.fetch(
            "SELECT record FROM engine.match_log WHERE match_id = 'lg1' ORDER BY log_no"
        )
    finally:
        await conn.close()
    records = [L.decode(r["record"]) for r in rows]
    assert isinstance(records[0], L.Open)
    assert {L.Commit, L.Reveal, L.Act} <= {type(r) for r in records}
    first = msgspec.json.decode(rows[0]["record"])
    assert first["t"] == "open" and {"at_ms", "purpose", "deal_id", "server_seed"} <= set(first)
    plays = [r for r in records if isinstance(r, L.Act) and isinstance(r.action, R.Play)]
    assert plays and all(0 <= a.seat < 4 for a in plays)
    assert msgspec.json.decode(L.encode(plays[0]))["action"]["type"] == "play"
    for bad in (
        b'{"k":"act","seat":0}',  # the one-letter dict form
        b'{"t":"act","at_ms":1,"seat":0,"action":{"type":"play","tile":1},"x":1}',
        b'{"t":"jump","at_ms":1}',
    ):
        with pytest.raises(msgspec.ValidationError):
            L.decode(bad)
