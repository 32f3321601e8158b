"""`mesa serve SERVICE`: run one service process with uvicorn (what `mesa up` launches)."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import socket
import stat
import sys
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn._types import ASGI3Application, ASGISendEvent
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

from services.common.app import DirectDispatch, DirectRoute, direct_dispatch_of
from services.common.config import SERVICES, ConfigError, Settings, load_settings
from services.common.direct import MAX_REQUEST_BODY_BYTES
from services.common.embedded_pg import port_is_free
from services.common.logging import configure_logging, get_logger

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


class _Capture:
    """A transport's stand-in while uvicorn formats a message: keeps what it writes, and
    whether it closed the connection; anything else goes to the real transport."""

    __slots__ = ("closed", "data", "real")

    def __init__(self, real: asyncio.Transport, data: list[bytes]) -> None:
        self.real = real
        self.data = data
        self.closed = False

    def write(self, data: bytes) -> None:
        self.data.append(data)

    def close(self) -> None:
        self.closed = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


class _OneWriteCycle(RequestResponseCycle):
    """uvicorn's request cycle, writing a response's status line and headers together with
    its body: one `send` system call (and one TCP segment for the client to wake up to) where
    uvicorn makes two. The headers wait for the next message of the same response: a plain
    response's body, sent straight after them; a streamed response's first chunk (the client
    sees nothing of that response before it).

    Measured on the ledger service (py-spy, settlements at 8 clients): the two writes were
    15.5% and 5.3% of its samples."""

    _held: list[bytes] | None = None

    async def send(self, message: ASGISendEvent) -> None:
        if self._held is None and message["type"] != "http.response.start":
            await super().send(message)  # the headers went out: later chunks as uvicorn writes
            return
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()  # first: uvicorn's own wait must not find the stand-in
        real = self.transport
        capture = _Capture(real, self._held if self._held is not None else [])
        self.transport = capture  # type: ignore[assignment]
        try:
            await super().send(message)
        finally:
            self.transport = real
        if message["type"] == "http.response.start" and not capture.closed:
            self._held = capture.data
            return
        self._held = None
        if capture.data:
            real.write(b"".join(capture.data))
        if capture.closed:
            real.close()


class _DirectCycle(RequestResponseCycle):
    """A request to one of the app's direct routes (`DirectDispatch`): its whole body is read
    (up to the limit), then answered in one task with one write, as a JSON response."""

    # A request becomes a _DirectCycle when its turn comes (earlier requests on the connection
    # answered); it starts once its body is complete as well.
    dispatch: DirectDispatch
    route: tuple[DirectRoute, dict[str, str]]
    started = False
    too_large = False

    def take(self, data: bytes) -> None:
        if self.too_large:
            return
        if len(self.body) + len(data) > MAX_REQUEST_BODY_BYTES:
            self.too_large = True  # the rest of the body is read and dropped: memory stays bounded
            self.body = bytearray()
            return
        self.body += data

    def write_answer(self, status: int, body: bytes, request_id: str) -> None:
        if not self.disconnected:
            head = [STATUS_LINE[status]]
            for name, value in self.default_headers:
                head += [name, b": ", value, b"\r\n"]
            head.append(
                b"content-type: application/json\r\ncontent-length: %d\r\nx-request-id: %s\r\n"
                % (len(body), request_id.encode())
            )
            if not self.keep_alive:
                head.append(b"connection: close\r\n")
            head += [b"\r\n", body]
            self.transport.write(b"".join(head))
        self.finish()

    def finish(self) -> None:
        self.response_started = True
        self.response_complete = True
        self.message_event.set()
        if not self.keep_alive:
            self.transport.close()
        on_response, self.on_response = self.on_response, lambda: None
        on_response()


class HttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with three changes.

    The app's direct routes (`services.common.app.DirectRoute`) are answered here, without the
    ASGI layers: the whole request is read, `DirectDispatch.answer` gives the answer, and it
    goes out in one write. Only POST requests: anything else goes the ASGI way, where the same
    route answers it (405).

    Any other response goes out in one write too (`_OneWriteCycle`).

    No reference cycle is left by a WebSocket upgrade. After the upgrade the transport belongs
    to the WebSocket protocol and this object is dropped, but it and its request parser still
    refer to each other (the parser holds its bound callbacks), and through them the socket
    objects: garbage that only a full collector pass can free. uvicorn breaks the cycle in
    `connection_lost`, which an upgraded connection never reaches here; so it is broken right
    after the hand-over."""

    _dispatch: DirectDispatch | None | bool = False  # False: not looked up yet

    def _direct(self) -> DirectDispatch | None:
        if self._dispatch is False:
            self._dispatch = direct_dispatch_of(self.app)
        return self._dispatch if isinstance(self._dispatch, DirectDispatch) else None

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
        # `app` is not the app when uvicorn refuses the request (its concurrency limit).
        dispatch = self._direct() if app is self.app else None
        found = dispatch.match(cycle.scope["path"]) if dispatch is not None else None
        if dispatch is not None and found is not None and cycle.scope["method"] == "POST":
            cycle.__class__ = _DirectCycle  # same state, its own methods
            direct: _DirectCycle = cycle  # type: ignore[assignment]
            direct.dispatch = dispatch
            direct.route = found
            if direct.more_body:
                if direct.waiting_for_100_continue and not self.transport.is_closing():
                    self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                    direct.waiting_for_100_continue = False
                self.flow.resume_reading()  # a pipelined body may have paused it
                return  # started when its body is complete (`on_message_complete`)
            self._start_direct(direct)
            return
        cycle.__class__ = _OneWriteCycle  # before its task runs: same state, one more method
        super()._start_asgi_task(cycle, app)

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if isinstance(cycle, _DirectCycle) and not cycle.response_complete:
            cycle.take(body)  # never pauses reading: the body is wanted whole
            return
        super().on_body(body)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        cycle = self.cycle
        if isinstance(cycle, _DirectCycle) and not cycle.started:
            self._start_direct(cycle)

    def _start_direct(self, cycle: _DirectCycle) -> None:
        cycle.started = True
        task = self.loop.create_task(self._answer_direct(cycle))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)

    async def _answer_direct(self, cycle: _DirectCycle) -> None:
        route, params = cycle.route
        scope = cycle.scope
        # (a body that arrived whole while earlier requests were answered was never `take`n)
        too_large = cycle.too_large or len(cycle.body) > MAX_REQUEST_BODY_BYTES
        body = None if too_large else bytes(cycle.body)
        cycle.body = bytearray()
        try:
            status, out, request_id = await cycle.dispatch.answer(
                route, params, "POST", scope["path"], scope["headers"], body
            )
            if self.flow.write_paused and not cycle.disconnected:
                await self.flow.drain()
            cycle.write_answer(status, out, request_id)
        except BaseException as exc:
            # `answer` maps every failure of a request to its status: this is a bug or a
            # cancellation (shutdown). The client must not wait: the connection ends.
            self.logger.error("Exception in a direct route", exc_info=exc)
            cycle.keep_alive = False
            cycle.finish()
            if not isinstance(exc, Exception):
                raise

    def handle_websocket_upgrade(self) -> None:
        super().handle_websocket_upgrade()
        self.parser = None  # type: ignore[assignment]


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
        http=HttpProtocol,
        ws_max_size=64 * 1024,
        # Table frames are small JSON (at most a few KiB): per-message deflate would cost CPU on
        # both ends for every frame and mix hidden and chosen data in one compression context.
        ws_per_message_deflate=False,
        timeout_graceful_shutdown=5,
        # uvicorn would believe X-Forwarded-For from 127.0.0.1 by default; the gateway decides
        # which proxies to believe (MESA_TRUSTED_PROXIES, api.security.client_address).
        proxy_headers=False,
    )


def run_app(app: Any, service: str, host: str, port: int, socket_path: Path | None) -> int:
    """Serve `app` as `mesa serve` does (also what the ledger benchmark runs) until stopped:
    on host:port, and on the Unix socket at `socket_path` if one is given."""
    config = uvicorn.Config(app, host=host, port=port, **uvicorn_options())
    if socket_path is None:
        uvicorn.Server(config).run()
        return 0
    # Both at once: TCP for the health checks, metrics and callers on other hosts; the Unix
    # socket for the services on this host (`mesa up` points their URLs at it).
    server = ServerWithSocket(config, socket_path)
    try:
        sockets = server.bind()
    except (SocketInUse, OSError) as exc:
        print(
            f"mesa serve: socket for {service} ({SOCKET_VARIABLES[service]}): {exc}",
            file=sys.stderr,
        )
        return 3
    get_logger().info("service_socket", path=str(socket_path))
    server.run(sockets=sockets)
    return 0


class ServerWithSocket(uvicorn.Server):
    """A uvicorn server on its TCP port and on a Unix socket at once (`bind`, then `run` or
    `serve` with those sockets). Removes its socket file once it has stopped serving. (Not after
    `run` returns: uvicorn raises a captured SIGTERM again once the server is down, which ends
    the process there.)"""

    def __init__(self, config: uvicorn.Config, socket_path: Path) -> None:
        super().__init__(config)
        self.socket_path = socket_path

    def bind(self) -> list[socket.socket]:
        """The two listening sockets; SocketInUse or OSError when the Unix socket is taken.
        If the TCP port cannot be bound (uvicorn logs it and exits), the Unix socket is closed
        and its file removed: a failed start leaves nothing behind."""
        unix = bind_unix_socket(self.socket_path)
        try:
            tcp = self.config.bind_socket()
        except BaseException:  # SystemExit from uvicorn, or an OSError
            unix.close()
            self.socket_path.unlink(missing_ok=True)
            raise
        return [tcp, unix]

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().shutdown(sockets=sockets)
        finally:
            self.socket_path.unlink(missing_ok=True)
