"""Hot JSON routes as plain ASGI apps, for `DirectRoute` (ahead of Litestar's router).

One place for what every such route does the same way: POST only (405 otherwise), the body
read with the same size limit as every route (413), decoded by msgspec against the contract
(400 invalid_request), a `ServiceError` answered as {"error", "detail"} with its status,
anything else logged and answered as a 500 without internals. The handler gets the app's
state, the path's named groups and the decoded body, and returns a msgspec Struct or JSON
bytes it already has (the ledger passes its database's result document through).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

import msgspec
from litestar.datastructures import State
from litestar.types import Receive, Scope, Send

from services.common.app import MAX_REQUEST_BODY_BYTES, error_json, send_json
from services.common.errors import ServiceError
from services.common.logging import get_logger

log = get_logger()

_encoder = msgspec.json.Encoder()

Handler = Callable[[State, dict[str, str], Any], Awaitable[Any]]
ASGIHandler = Callable[[Scope, Receive, Send], Awaitable[None]]


async def read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ServiceError(400, "invalid_request", "the client went away")
        chunk = cast(bytes, message.get("body", b""))
        size += len(chunk)
        if size > MAX_REQUEST_BODY_BYTES:
            raise ServiceError(413, "body_too_large", "request body too large")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def post_json(decoder: msgspec.json.Decoder[Any], handler: Handler) -> ASGIHandler:
    """An ASGI app for one POST route: decode, run `handler`, answer 200 with its result."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        try:
            if scope.get("method") != "POST":
                raise ServiceError(405, "method_not_allowed", "Method Not Allowed")
            raw = await read_body(receive)
            try:
                data = decoder.decode(raw)
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                raise ServiceError(
                    400, "invalid_request", f"invalid body: {str(exc)[:400]}"
                ) from None
            result = await handler(scope["app"].state, scope.get("path_params") or {}, data)
        except ServiceError as exc:
            await send_json(send, exc.status, error_json(exc.code, exc.detail))
            return
        except Exception as exc:
            log.exception("unhandled_error", path=scope.get("path", ""), error=type(exc).__name__)
            await send_json(send, 500, error_json("server_error", "internal error"))
            return
        await send_json(send, 200, result if isinstance(result, bytes) else _encoder.encode(result))

    return app
