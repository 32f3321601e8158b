"""uvicorn serving an app on a free loopback port, for tests that need real sockets."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import uvicorn

from services.common.ports import free_port
from services.common.serve import bind_service_sockets, serve_on_sockets

START_POLLS = 500  # of 10 ms: uvicorn offers a flag, not an event, for "listening"
STOP_TIMEOUT_S = 10.0


class UvicornServer:
    """`async with UvicornServer(app, **config) as served:` serves `app` at `served.url`
    (`config`: uvicorn's own settings, e.g. `http=`, `lifespan=`); leaving stops it. With
    `unix_socket`, also there, as `mesa serve` does (`bind_service_sockets`)."""

    def __init__(self, app: Any, unix_socket: Path | None = None, **config: Any) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config_ = uvicorn.Config(app, host="127.0.0.1", port=self.port, **config)
        self.server = uvicorn.Server(config_)
        self.unix_socket = unix_socket
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> UvicornServer:
        if self.unix_socket is None:
            self.task = asyncio.create_task(self.server.serve())
        else:
            sockets = bind_service_sockets("127.0.0.1", self.port, self.unix_socket)
            self.task = asyncio.create_task(
                serve_on_sockets(self.server, sockets, self.unix_socket)
            )
        for _ in range(START_POLLS):
            if self.server.started:
                return self
            if self.task.done():
                break
            await asyncio.sleep(0.01)
        await self.__aexit__()
        raise RuntimeError("uvicorn did not start")

    async def __aexit__(self, *exc: object) -> None:
        self.server.should_exit = True
        if self.task is not None:
            await asyncio.wait_for(self.task, STOP_TIMEOUT_S)
