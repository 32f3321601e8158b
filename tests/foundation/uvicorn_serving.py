"""A uvicorn server on a free loopback port inside a test (imported by name)."""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn

from services.common.embedded_pg import free_port


async def serve(
    app: Any, protocol: type[asyncio.Protocol] | str
) -> tuple[uvicorn.Server, int, asyncio.Task[None]]:
    """Start `app` with this HTTP protocol; stop it with `server.should_exit = True` and
    awaiting the task."""
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, http=protocol, lifespan="off", log_config=None
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    for _ in range(500):  # bounded: uvicorn offers a flag, not an event, for "listening"
        if server.started:
            break
        await asyncio.sleep(0.01)
    if not server.started:
        raise RuntimeError("uvicorn did not start")
    return server, port, task
