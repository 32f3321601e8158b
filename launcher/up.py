"""`mesa up`: PostgreSQL, migrations, then every service as its own process, supervised.

Stops everything (PostgreSQL included) on Ctrl-C or SIGTERM. A service process that dies is
started again after a short pause, so killing one (as the crash test does) loses nothing
but the requests it had in flight. Only one `mesa up` runs per var/ folder.

Each child runs in its own process group, registered with a watchdog (launcher.reaper)
that stops the groups if this process dies without doing so (kill -9): portable POSIX, where
Linux alone has a parent-death signal.

Services log in to the embedded PostgreSQL as the least-privilege role `mesa_app` with its
generated password (var/pg_app_password); only the migrations use the superuser.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx
import msgspec

from launcher.embedded_pg import (
    EmbeddedPostgres,
    EmbeddedPostgresError,
    describe_process,
    port_in_use_message,
)
from launcher.reaper import Reaper
from services.common.config import (
    PG_APP_PASSWORD_FILE,
    ConfigError,
    Settings,
    load_settings,
    mask_url,
    socket_path_fits,
    unix_socket_url,
)
from services.common.db import APP_ROLE
from services.common.migrate import upgrade
from services.common.ports import port_is_free
from services.common.secret_file import SecretFileError, ensure_secret
from services.common.serve import PORT_VARIABLES, SOCKET_VARIABLES

_HEALTH_TIMEOUT_S = 60
_STOP_TIMEOUT_S = 15
# A service that keeps dying is restarted at most this often (crash loops stay visible).
_RESTART_DELAY_S = 1.0
REPLICA_PORT_STRIDE = 100


@dataclass
class Child:
    name: str
    service: str
    port: int
    # Where the services on this host call it (None: over TCP, like callers elsewhere).
    socket: Path | None = None
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    died_at: float | None = None
    extra_env: dict[str, str] = field(default_factory=dict)


def _say(message: str) -> None:
    print(f"mesa up: {message}", flush=True)


def ensure_internal_secret(var_dir: Path) -> bytes:
    return bytes.fromhex(ensure_secret(var_dir / "internal_secret")[0])


def ensure_operator_key(settings: Settings) -> None:
    """Create the development signing key on first start (fairness owns the format)."""
    try:
        from fairness import keys
    except ImportError:
        return
    ensure = getattr(keys, "ensure_dev_key", None)
    if (
        ensure is not None
        and settings.operator_key_file is not None
        and not os.environ.get("MESA_OPERATOR_KEY")
    ):
        ensure(settings.operator_key_file)


class Supervisor:
    def __init__(self, settings: Settings, children: list[Child], env: dict[str, str]) -> None:
        self.settings = settings
        self.children = children
        self.env = env
        self.stopping = threading.Event()
        self.pg: EmbeddedPostgres | None = None
        self.reaper: Reaper | None = None

    def start_child(self, child: Child) -> None:
        env = {**self.env, **child.extra_env, PORT_VARIABLES[child.service]: str(child.port)}
        if child.socket is not None:
            env[SOCKET_VARIABLES[child.service]] = str(child.socket)
        if self.reaper is None:
            self.reaper = Reaper()
        if child.process is not None:
            self.reaper.release(child.process.pid)
        child.process = subprocess.Popen(  # noqa: S603 (argv is our own interpreter and module, no shell)
            [sys.executable, "-m", "services.cli", "serve", child.service],
            env=env,
            stdin=subprocess.DEVNULL,
            # Its own process group: a terminal's Ctrl-C reaches us, and we stop it in order.
            start_new_session=True,
        )
        self.reaper.guard(child.process.pid, signal.SIGTERM, group=True)

    def wait_healthy(self, child: Child, deadline: float) -> bool:
        url = f"http://{self.settings.host}:{child.port}/health"
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline and not self.stopping.is_set():
                if child.process is not None and child.process.poll() is not None:
                    return False
                try:
                    if client.get(url).status_code == 200:
                        return True
                except httpx.HTTPError:
                    pass
                self.stopping.wait(0.1)
        return False

    def watch(self) -> None:
        """Restart dead children (and a dead embedded PostgreSQL) until asked to stop."""
        while not self.stopping.wait(0.25):
            if (
                self.pg is not None
                and self.pg.process is not None
                and self.pg.process.poll() is not None
            ):
                _say("PostgreSQL stopped unexpectedly; starting it again")
                try:
                    self.pg.start()
                except EmbeddedPostgresError as exc:
                    _say(f"could not restart PostgreSQL: {exc}")
            now = time.monotonic()
            for child in self.children:
                if child.process is None or child.process.poll() is None:
                    continue
                if child.died_at is None:
                    child.died_at = now
                    _say(f"{child.name} exited with {child.process.returncode}; restarting")
                elif now - child.died_at >= _RESTART_DELAY_S:
                    child.died_at = None
                    child.restarts += 1
                    self.start_child(child)

    def stop_all(self) -> None:
        self.stopping.set()
        for child in self.children:
            if child.process is not None and child.process.poll() is None:
                child.process.terminate()
        deadline = time.monotonic() + _STOP_TIMEOUT_S
        for child in self.children:
            if child.process is None:
                continue
            try:
                child.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.process.kill()
                child.process.wait()
        if self.pg is not None:
            self.pg.stop()
        if self.reaper is not None:
            self.reaper.close()  # signals any process group still alive, then exits
            self.reaper = None


def build_children(
    settings: Settings, engines: int, gateways: int, ledgers: int = 1
) -> list[Child]:
    children = []
    for i in range(ledgers):
        port = settings.ledger_port + i * REPLICA_PORT_STRIDE
        children.append(Child(f"ledger-{i}" if ledgers > 1 else "ledger", "ledger", port))
    for i in range(engines):
        port = settings.engine_port + i * REPLICA_PORT_STRIDE
        children.append(Child(f"engine-{i}" if engines > 1 else "engine", "engine", port))
    children.append(Child("matchmaking", "matchmaking", settings.matchmaking_port))
    for i in range(gateways):
        port = settings.gateway_port + i * REPLICA_PORT_STRIDE
        children.append(Child(f"gateway-{i}" if gateways > 1 else "gateway", "gateway", port))
    for child in children:
        path = settings.var_dir / "run" / f"{child.name}.sock"
        if child.service in SOCKET_VARIABLES and socket_path_fits(path):
            child.socket = path
    return children


def internal_url(settings: Settings, child: Child) -> str:
    """How the other services reach `child`: over its Unix socket when it has one (a call over
    loopback TCP costs both ends more CPU: docs/decisions/0007-unix-sockets-for-internal-calls.md),
    else over TCP."""
    if child.socket is not None:
        return unix_socket_url(child.socket)
    return f"http://{settings.host}:{child.port}"


def _acquire_lock(var_dir: Path) -> IO[str] | None:
    lock_file = open(var_dir / "up.lock", "a+")
    try:
        fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock_file.seek(0)
        written = lock_file.read().strip()
        lock_file.close()
        holder = describe_process(int(written)) if written.isdigit() else "an unknown process"
        _say(
            f"already running for {var_dir}: {var_dir / 'up.lock'} is held by {holder}; stop it first"
        )
        return None
    lock_file.seek(0)
    lock_file.truncate()
    lock_file.write(str(os.getpid()))
    lock_file.flush()
    return lock_file


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="mesa up", description="run the whole platform")
    parser.add_argument("--engines", type=int, default=1, help="engine replicas (default 1)")
    parser.add_argument("--gateways", type=int, default=1, help="gateway replicas (default 1)")
    parser.add_argument("--ledgers", type=int, default=1, help="ledger replicas (default 1)")
    parser.add_argument(
        "--demo", action="store_true", help="create demo players with play money, print sign-in"
    )
    args = parser.parse_args(argv)
    if not all(1 <= n <= 16 for n in (args.engines, args.gateways, args.ledgers)):
        _say("--engines, --gateways and --ledgers must be between 1 and 16")
        return 2
    try:
        settings = load_settings()
    except ConfigError as exc:
        _say(str(exc))
        return 2
    settings.var_dir.mkdir(parents=True, exist_ok=True)
    lock = _acquire_lock(settings.var_dir)
    if lock is None:
        return 1

    children = build_children(settings, args.engines, args.gateways, args.ledgers)
    for c in children:
        if c.service in SOCKET_VARIABLES and c.socket is None:
            _say(f"{c.name}: its socket path in {settings.var_dir} is too long; called over TCP")
    busy = [c for c in children if not port_is_free(settings.host, c.port)]
    if busy:
        for c in busy:
            what = f"{c.name} ({PORT_VARIABLES[c.service]})"
            _say(port_in_use_message(settings.host, c.port, what))
        return 3

    try:
        secret = settings.internal_secret or ensure_internal_secret(settings.var_dir)
    except SecretFileError as exc:
        _say(str(exc))
        return 2
    ensure_operator_key(settings)
    if settings.report_key_file is not None:
        try:
            ensure_secret(settings.report_key_file)  # 32 random bytes: the Ed25519 seed
        except SecretFileError as exc:
            _say(str(exc))
            return 2
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESA_")}
    env.update({k: v for k, v in os.environ.items() if k.startswith("MESA_")})
    env["MESA_INTERNAL_SECRET"] = secret.hex()
    env["MESA_VAR_DIR"] = str(settings.var_dir)
    if settings.report_key_file is not None:
        env["MESA_REPORT_KEY_FILE"] = str(settings.report_key_file)
    if settings.operator_key_file is not None and "MESA_OPERATOR_KEY" not in env:
        env["MESA_OPERATOR_KEY_FILE"] = str(settings.operator_key_file)
    for name, url_var, configured in (
        ("ledger", "MESA_LEDGER_URL", settings.ledger_url),
        ("engine", "MESA_ENGINE_URL", settings.engine_url),
        ("matchmaking", "MESA_MATCHMAKING_URL", settings.matchmaking_url),
    ):
        if not configured:
            # Every caller knows every replica: it routes each match to the engine that owns
            # it, and fills one ledger replica before the next (services.common.http).
            env[url_var] = ",".join(
                internal_url(settings, c) for c in children if c.service == name
            )

    supervisor = Supervisor(settings, children, env)

    def on_signal(signum: int, _frame: Any) -> None:
        supervisor.stopping.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    try:
        services_url = settings.database_url
        if settings.database_is_embedded:
            pg = EmbeddedPostgres(
                settings.var_dir / "pg", settings.pg_port, "127.0.0.1", secrets_dir=settings.var_dir
            )
            supervisor.pg = pg
            where = "" if pg.data_dir == pg.requested_data_dir else f", data in {pg.data_dir}"
            _say(f"starting embedded PostgreSQL on 127.0.0.1:{settings.pg_port}{where}")
            pg.start()
            pg.create_database("mesa")
            app_password = ensure_secret(settings.var_dir / PG_APP_PASSWORD_FILE)[0]
            migrated = upgrade(pg.url("mesa"), app_password=app_password)
            services_url = pg.role_url(APP_ROLE, app_password, "mesa")
        else:
            migrated = upgrade(settings.migration_database_url or settings.database_url)
        env["MESA_DATABASE_URL"] = services_url
        settings = msgspec.structs.replace(settings, database_url=services_url)
        supervisor.settings = settings
        _say(
            f"migrations applied: {', '.join(migrated)}; services connect as {mask_url(services_url)}"
        )
        for child in children:
            supervisor.start_child(child)
        deadline = time.monotonic() + _HEALTH_TIMEOUT_S
        for child in children:
            if not supervisor.wait_healthy(child, deadline):
                if supervisor.stopping.is_set():
                    break
                _say(f"{child.name} did not become healthy on port {child.port}")
                supervisor.stop_all()
                return 1
        if not supervisor.stopping.is_set():
            urls = {c.name: f"http://{settings.host}:{c.port}" for c in children}
            state = {"pid": os.getpid(), "urls": urls, "database_url": mask_url(services_url)}
            (settings.var_dir / "up.json").write_text(json.dumps(state, indent=2))
            for c in children:
                internal = f" (internal calls: {c.socket})" if c.socket is not None else ""
                _say(f"{c.name:<12} {urls[c.name]}{internal}")
            _say(f"web page: {urls[children[-1].name if args.gateways == 1 else 'gateway-0']}/")
            if args.demo:
                import asyncio

                from launcher.demo import DemoError, create_demo_players

                try:
                    asyncio.run(create_demo_players(settings))
                except DemoError as exc:
                    _say(str(exc))
                    supervisor.stop_all()
                    return 1
            _say("ready; Ctrl-C stops everything")
            supervisor.watch()
    except (EmbeddedPostgresError, SecretFileError) as exc:
        _say(str(exc))
        supervisor.stop_all()
        return 3
    finally:
        _say("stopping")
        supervisor.stop_all()
        (settings.var_dir / "up.json").unlink(missing_ok=True)
        lock.close()
    _say("stopped")
    return 0
