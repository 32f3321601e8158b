"""Hot JSON routes answered ahead of Litestar's router (`DirectRoute`).

One place for what every such route does the same way (`JsonPost.answer`): POST only (405
otherwise), the body within the same size limit as every route (413) and nesting depth
(`services.common.json_limits`, 400), decoded by msgspec against the contract (400
invalid_request), a `ServiceError` answered as {"error", "detail"} with its status, anything
else logged and answered as a 500 without internals. The handler gets the app's state, the
path's named groups and the decoded body, and returns a msgspec Struct or JSON bytes it
already has (the ledger passes its database's result document through).

`services.common.app.DirectDispatch` answers a `JsonPost` with the service's duties around it,
two ways: ahead of Litestar's router as ASGI (Litestar's test client, any ASGI server), and in
the services' HTTP protocol itself (`services.common.serve`), which reads the whole body and
writes the answer without the ASGI layers in between.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

import msgspec
from litestar.datastructures import State
from litestar.types import Receive, Send

from services.common.errors import ServiceError
from services.common.json_limits import json_depth_exceeds, too_deep_error
from services.common.logging import get_logger

log = get_logger()

# Bodies larger than this are refused before they are parsed (413).
MAX_REQUEST_BODY_BYTES = 256 * 1024

_encoder = msgspec.json.Encoder()

Handler = Callable[[State, dict[str, str], Any], Awaitable[Any]]


class ErrorBody(msgspec.Struct, frozen=True):
    error: str
    detail: str


def error_json(code: str, detail: str) -> bytes:
    return msgspec.json.encode(ErrorBody(error=code, detail=detail))


_TOO_LARGE = (413, error_json("body_too_large", "request body too large"))


async def read_body(receive: Receive) -> bytes | None:
    """The whole request body, or None when it is larger than `MAX_REQUEST_BODY_BYTES`."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ServiceError(400, "invalid_request", "the client went away")
        chunk = cast(bytes, message.get("body", b""))
        size += len(chunk)
        if size > MAX_REQUEST_BODY_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


class JsonPost:
    """One POST route with a JSON body: decode the body with `decoder`, run `handler`, answer
    200 with its result; `answer` gives the status and JSON body."""

    __slots__ = ("decoder", "handler")

    def __init__(self, decoder: msgspec.json.Decoder[Any], handler: Handler) -> None:
        self.decoder = decoder
        self.handler = handler

    async def answer(
        self, state: State, params: dict[str, str], method: str, body: bytes | None
    ) -> tuple[int, bytes]:
        """(status, JSON body) for a request; `body` None: it was larger than the limit."""
        try:
            if method != "POST":
                raise ServiceError(405, "method_not_allowed", "Method Not Allowed")
            if body is None:
                return _TOO_LARGE
            if json_depth_exceeds(body):
                raise too_deep_error()
            try:
                data = self.decoder.decode(body)
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                raise ServiceError(
                    400, "invalid_request", f"invalid body: {str(exc)[:400]}"
                ) from None
            result = await self.handler(state, params, data)
        except ServiceError as exc:
            return exc.status, error_json(exc.code, exc.detail)
        except Exception as exc:
            log.exception("unhandled_error", method=method, error=type(exc).__name__)
            return 500, error_json("server_error", "internal error")
        return 200, result if isinstance(result, bytes) else _encoder.encode(result)


_JSON_HEADERS = [(b"content-type", b"application/json")]


async def send_json(
    send: Send, status: int, body: bytes, headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    """A whole JSON answer at the ASGI level (for what answers ahead of Litestar)."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                *_JSON_HEADERS,
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})
