"""The ledger bench's C client (bench/loadgen.c) against a recording server: what it sends is
what the Python clients send (unique hold keys, consecutive matches, the credential), what it
counts is what the server answered, over a Unix socket and over TCP."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest
from litestar import Litestar, Request, post
from litestar.exceptions import HTTPException

from bench.bench_ledger import build_loadgen
from tests.uvicorn_server import UvicornServer

pytestmark = pytest.mark.skipif(
    shutil.which("cc") is None and shutil.which("gcc") is None,
    reason="no C compiler (.ci/run installs gcc)",
)

AUTH = "v1.bench.0.test"
SEEN: list[tuple[str, dict[str, Any]]] = []


def _recorded(request: Request, body: bytes, path: str) -> dict[str, Any]:  # type: ignore[type-arg]
    if request.headers.get("authorization") != AUTH:
        raise HTTPException(status_code=401, detail="no credential")
    data = msgspec.json.decode(body)
    SEEN.append((path, data))
    # a hold's key: h-c-<clients>-<connection>-<its request number>-<nonce>
    if path == "hold" and data["idempotency_key"].split("-")[4] == "3":
        raise HTTPException(status_code=409, detail="third request of a connection")
    return {"ok": True, "padding": "x" * 300}


@post("/v1/holds", status_code=200)
async def holds(request: Request) -> dict[str, Any]:  # type: ignore[type-arg]
    return _recorded(request, await request.body(), "hold")


@post("/v1/matches/settle", status_code=200)
async def settle(request: Request) -> dict[str, Any]:  # type: ignore[type-arg]
    return _recorded(request, await request.body(), "settle")


async def _loadgen(binary: Path, *args: str) -> dict[str, Any]:
    process = await asyncio.create_subprocess_exec(
        str(binary),
        *args,
        "--auth",
        AUTH,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    result: dict[str, Any] = json.loads(out)
    return result


async def test_loadgen_sends_what_the_python_clients_send(tmp_path):
    binary = build_loadgen(tmp_path)
    assert binary is not None
    path = tmp_path / "ledger.sock"
    SEEN.clear()
    async with UvicornServer(
        Litestar([holds, settle]), unix_socket=path, http="httptools", log_level="warning"
    ) as server:
        over_socket = await _loadgen(
            binary, "--unix", str(path), "--kind", "hold", "--clients", "4", "--seconds", "0.5"
        )
        held = [data for kind, data in SEEN if kind == "hold"]
        over_tcp = await _loadgen(
            binary,
            *("--tcp", f"127.0.0.1:{server.port}", "--kind", "hold", "--clients", "2"),
            *("--seconds", "0.5"),
        )
        SEEN.clear()
        settled = await _loadgen(
            binary,
            *("--unix", str(path), "--kind", "settle", "--clients", "3", "--seconds", "30"),
            *("--first-match", "101", "--last-match", "140"),
        )
    # every answer counted, every refusal an error (the third request of each connection)
    assert over_socket["operations"] == len(held) > 4
    assert over_socket["errors"] == 4 and over_socket["first_error"].startswith("409 ")
    assert over_tcp["operations"] > 2 and over_tcp["errors"] == 2
    keys = [h["idempotency_key"] for h in held]
    assert len(set(keys)) == len(keys)
    for h in held:
        assert h["reservation_id"] == h["idempotency_key"]
        assert h["amount"] == 1 and h["table_id"] == "bench"
        assert 0 <= int(h["player"].removeprefix("bp")) < 64
    # settlements: matches 101..140 once each, then each connection finds none left
    matches = sorted(int(d["match_id"].removeprefix("bm-")) for _, d in SEEN)
    assert matches == list(range(101, 141))
    for _, d in SEEN:
        m = int(d["match_id"].removeprefix("bm-"))
        assert d["idempotency_key"] == f"settle-{m}"
        assert d["winners"] == [{"player": f"bp{m % 64}"}]
    assert settled["operations"] == 40 and settled["next_match"] == 141
    assert settled["errors"] == 3 and settled["first_error"] == "out of started matches"
    assert 0 < settled["p50_ms"] <= settled["p99_ms"]


async def test_loadgen_fills_one_socket_before_the_next(tmp_path):
    """Several sockets (ledger replicas): connections fill the first up to --fill, then the
    next, as the services' fill-first routing does with one request in flight each."""
    binary = build_loadgen(tmp_path)
    assert binary is not None
    served: dict[str, set[int]] = {"a": set(), "b": set()}

    def replica(name: str) -> Litestar:
        @post("/v1/holds", status_code=200)
        async def hold(request: Request) -> dict[str, Any]:  # type: ignore[type-arg]
            data = msgspec.json.decode(await request.body())
            served[name].add(int(data["idempotency_key"].split("-")[3]))  # the connection
            return {"ok": True}

        return Litestar([hold])

    a, b = tmp_path / "ledger-0.sock", tmp_path / "ledger-1.sock"
    async with (
        UvicornServer(replica("a"), unix_socket=a, http="httptools", log_level="warning"),
        UvicornServer(replica("b"), unix_socket=b, http="httptools", log_level="warning"),
    ):
        result = await _loadgen(
            binary,
            *("--unix", str(a), "--unix", str(b), "--fill", "2"),
            *("--kind", "hold", "--clients", "5", "--seconds", "0.5"),
        )
    assert result["errors"] == 0 and result["operations"] > 5
    assert served == {"a": {0, 1}, "b": {2, 3, 4}}
