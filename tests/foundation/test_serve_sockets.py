"""`mesa serve`'s sockets: stock uvicorn serving on a TCP port and a Unix socket at once.

The socket file is this user's only (0600); a dead predecessor's file is replaced, a live one
refused, anything else left alone; a failed start leaves no file; a clean stop, or SIGTERM,
removes it.
"""

from __future__ import annotations

import os
import signal
import socket as sockets
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest
from litestar import Litestar, get

from services.common.ports import free_port
from services.common.serve import SocketInUse, bind_service_sockets, bind_unix_socket
from tests.uvicorn_server import UvicornServer

START_POLLS = 1000  # of 10 ms


def test_unix_socket_binding_replaces_only_a_dead_socket(tmp_path):
    path = tmp_path / "run" / "ledger.sock"
    live = bind_unix_socket(path)  # the folder is created
    try:
        assert path.is_socket() and oct(path.stat().st_mode & 0o777) == "0o600"
        live.listen(1)
        with pytest.raises(SocketInUse, match="in use by a running server"):
            bind_unix_socket(path)
    finally:
        live.close()  # the file stays, as after a kill -9: nobody listens on it now
    assert path.is_socket()
    replaced = bind_unix_socket(path)
    replaced.listen(1)
    probe = sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM)
    probe.connect(str(path))
    probe.close()
    replaced.close()
    path.unlink()
    path.write_text("not a socket")
    with pytest.raises(SocketInUse, match="not a socket"):
        bind_unix_socket(path)
    assert path.read_text() == "not a socket"


def test_a_start_that_cannot_bind_its_port_leaves_no_socket_file(tmp_path):
    taken = sockets.socket(sockets.AF_INET, sockets.SOCK_STREAM)
    taken.setsockopt(sockets.SOL_SOCKET, sockets.SO_REUSEADDR, 0)
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        port = taken.getsockname()[1]
        path = tmp_path / "run" / "ledger.sock"
        with pytest.raises(OSError):
            bind_service_sockets("127.0.0.1", port, path)
        assert not path.exists()
    finally:
        taken.close()


@get("/ping")
async def ping() -> str:
    return "pong"


async def test_served_on_both_sockets_and_the_file_removed_on_a_clean_stop(tmp_path):
    path = tmp_path / "run" / "ledger.sock"
    async with UvicornServer(Litestar([ping]), unix_socket=path, log_level="warning") as served:
        assert oct(path.stat().st_mode & 0o777) == "0o600"
        transport = httpx.AsyncHTTPTransport(uds=str(path))
        async with httpx.AsyncClient(transport=transport) as over_unix:
            assert (await over_unix.get("http://localhost/ping")).text == "pong"
        async with httpx.AsyncClient() as over_tcp:
            assert (await over_tcp.get(f"{served.url}/ping")).text == "pong"
        with pytest.raises(SocketInUse):  # a second server is refused while this one runs
            bind_unix_socket(path)
    assert not path.exists()


def test_sigterm_removes_the_socket_file(tmp_path):
    """`run_app` as `mesa serve` runs it: uvicorn raises a captured SIGTERM again once it is
    down, which ends the process there; the file is gone all the same."""
    path = tmp_path / "engine.sock"
    program = textwrap.dedent(
        f"""
        from pathlib import Path
        from litestar import Litestar, get
        from services.common.serve import run_app

        @get("/ping")
        async def ping() -> str:
            return "pong"

        run_app(Litestar([ping]), "engine", "127.0.0.1", {free_port()}, Path({str(path)!r}))
        """
    )
    process = subprocess.Popen([sys.executable, "-c", program], cwd=Path(__file__).parents[2])
    try:
        for _ in range(START_POLLS):
            if path.exists():
                probe = sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM)
                try:
                    probe.connect(str(path))
                    break
                except OSError:
                    pass
                finally:
                    probe.close()
            assert process.poll() is None, "the server ended before listening"
            time.sleep(0.01)
        os.kill(process.pid, signal.SIGTERM)
        assert process.wait(timeout=20) == -signal.SIGTERM
        assert not path.exists()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_no_private_uvicorn_module_is_imported():
    """Stock uvicorn through its public API: no `_`-prefixed module, no protocol subclass."""
    root = Path(__file__).parents[2]
    for source in [*(root / "services").rglob("*.py"), *(root / "api").rglob("*.py")]:
        text = source.read_text()
        assert "uvicorn._" not in text and "uvicorn.protocols" not in text, source
