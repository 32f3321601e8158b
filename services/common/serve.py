"""`mesa serve SERVICE`: run one service process with uvicorn (what `mesa up` launches)."""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import socket
import stat
import sys
from pathlib import Path
from typing import Any

import uvicorn

from services.common.config import SERVICES, ConfigError, Settings, load_settings
from services.common.logging import configure_logging, get_logger
from services.common.ports import port_is_free

APP_FACTORIES = {
    "ledger": "services.ledger.app:create_app",
    "engine": "services.engine.app:create_app",
    "matchmaking": "services.matchmaking.app:create_app",
    "gateway": "api.app:create_app",
}
PORT_VARIABLES = {
    "ledger": "MESA_LEDGER_PORT",
    "engine": "MESA_ENGINE_PORT",
    "matchmaking": "MESA_MATCHMAKING_PORT",
    "gateway": "MESA_GATEWAY_PORT",
}
# The internal services may also listen on a Unix socket (the gateway serves browsers: TCP).
SOCKET_VARIABLES = {
    "ledger": "MESA_LEDGER_SOCKET",
    "engine": "MESA_ENGINE_SOCKET",
    "matchmaking": "MESA_MATCHMAKING_SOCKET",
}


class SocketInUse(Exception):
    """The Unix socket path is taken: by a live server, or by a file that is not a socket."""


def bind_unix_socket(path: Path) -> socket.socket:
    """A Unix socket bound at `path`, for this user only (mode 0600: the service credential
    still guards every call, and other local users cannot even connect). A socket file left by
    a process that died is replaced; a live one is never taken over."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise SocketInUse(f"{path} exists and is not a socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError):
            path.unlink(missing_ok=True)  # nobody listens: left by a process that died
        else:
            raise SocketInUse(f"{path} is in use by a running server")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    umask = os.umask(0o177)  # created 0600: no window in which others could connect
    try:
        sock.bind(str(path))
    except OSError:
        sock.close()
        raise
    finally:
        os.umask(umask)
    return sock


def load_app(service: str, settings: Settings) -> Any:
    module_name, factory = APP_FACTORIES[service].split(":")
    module = importlib.import_module(module_name)
    return getattr(module, factory)(settings)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="mesa serve")
    parser.add_argument("service", choices=SERVICES)
    parser.add_argument("--port", type=int, default=None, help="override the configured port")
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"mesa serve: {exc}", file=sys.stderr)
        return 2
    configure_logging(args.service, settings.log_format, settings.log_level)
    port = args.port or settings.port_of(args.service)
    if not port_is_free(settings.host, port):
        print(
            f"mesa serve: port {port} for {args.service} ({PORT_VARIABLES[args.service]}) "
            "is already in use",
            file=sys.stderr,
        )
        return 3
    if len(settings.internal_secret) < 32:
        print("mesa serve: MESA_INTERNAL_SECRET is not set (mesa up creates one)", file=sys.stderr)
        return 2
    try:
        app = load_app(args.service, settings)
    except ConfigError as exc:
        print(f"mesa serve {args.service}: {exc}", file=sys.stderr)
        return 2
    get_logger().info("service_starting", port=port, host=settings.host)
    return run_app(app, args.service, settings.host, port, settings.socket_of(args.service))


def uvicorn_options() -> dict[str, Any]:
    """uvicorn's settings for every `mesa serve` process (tests serve apps with them too)."""
    return dict(
        log_config=None,
        access_log=False,
        lifespan="on",
        http="httptools",
        ws_max_size=64 * 1024,
        # Table frames are small JSON (at most a few KiB): per-message deflate would cost CPU on
        # both ends for every frame and mix hidden and chosen data in one compression context.
        ws_per_message_deflate=False,
        timeout_graceful_shutdown=5,
        # uvicorn would believe X-Forwarded-For from 127.0.0.1 by default; the gateway decides
        # which proxies to believe (MESA_TRUSTED_PROXIES, api.security.client_address).
        proxy_headers=False,
    )


def bind_tcp_socket(host: str, port: int) -> socket.socket:
    """The service's TCP socket, bound as uvicorn binds one (address reuse on); OSError when
    the port is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def bind_service_sockets(host: str, port: int, socket_path: Path) -> list[socket.socket]:
    """The TCP socket and the Unix socket at `socket_path`; SocketInUse or OSError when
    either is taken. A failed start leaves nothing behind: if the TCP port cannot be bound,
    the Unix socket is closed and its file removed."""
    unix = bind_unix_socket(socket_path)
    try:
        tcp = bind_tcp_socket(host, port)
    except BaseException:
        unix.close()
        socket_path.unlink(missing_ok=True)
        raise
    return [tcp, unix]


async def serve_on_sockets(
    server: uvicorn.Server, sockets: list[socket.socket], socket_path: Path | None
) -> None:
    """`server.serve` on bound sockets; the Unix socket's file is removed once it has stopped
    serving, also when a SIGTERM ends it (`remove_on_sigterm`)."""
    try:
        await server.serve(sockets=sockets)
    finally:
        if socket_path is not None:
            socket_path.unlink(missing_ok=True)


def remove_on_sigterm(socket_path: Path) -> None:
    """Remove the socket file when the process ends by SIGTERM. uvicorn captures SIGTERM while
    it serves, shuts down, restores the handler it found and raises the signal again before
    `serve` returns: with the default handler the process would end before any `finally`."""

    def remove_then_terminate(signum: int, _frame: object) -> None:
        socket_path.unlink(missing_ok=True)
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)

    signal.signal(signal.SIGTERM, remove_then_terminate)


def run_app(app: Any, service: str, host: str, port: int, socket_path: Path | None) -> int:
    """Serve `app` as `mesa serve` does (also what the ledger benchmark runs) until stopped:
    on host:port, and on the Unix socket at `socket_path` if one is given."""
    config = uvicorn.Config(app, host=host, port=port, **uvicorn_options())
    server = uvicorn.Server(config)
    if socket_path is None:
        server.run()
        return 0
    # Both at once: TCP for the health checks, metrics and callers on other hosts; the Unix
    # socket for the services on this host (`mesa up` points their URLs at it).
    try:
        sockets = bind_service_sockets(host, port, socket_path)
    except (SocketInUse, OSError) as exc:
        print(
            f"mesa serve: socket for {service} ({SOCKET_VARIABLES[service]}): {exc}",
            file=sys.stderr,
        )
        return 3
    get_logger().info("service_socket", path=str(socket_path))
    remove_on_sigterm(socket_path)
    try:
        server.run(sockets=sockets)
    finally:
        socket_path.unlink(missing_ok=True)
    return 0
