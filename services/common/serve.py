"""`mesa serve SERVICE`: run one service process with uvicorn (what `mesa up` launches)."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from services.common.config import SERVICES, ConfigError, Settings, load_settings
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


class HttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, minus a reference cycle left by every WebSocket upgrade.

    After the upgrade the transport belongs to the WebSocket protocol and this object is
    dropped, but it and its request parser still refer to each other (the parser holds its
    bound callbacks), and through them the socket objects: garbage that only a full collector
    pass can free. uvicorn breaks the cycle in `connection_lost`, which an upgraded connection
    never reaches here; so it is broken right after the hand-over."""

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
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=port,
        log_config=None,
        access_log=False,
        lifespan="on",
        http=HttpProtocol,
        ws_max_size=64 * 1024,
        # Table frames are small JSON (at most a few KiB): per-message deflate would cost CPU on
        # both ends for every frame and mix hidden and chosen data in one compression context.
        ws_per_message_deflate=False,
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    server.run()
    return 0
