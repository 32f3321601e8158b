"""Internal HTTP client: service credential, request id propagation, msgspec bodies.

Callers import the callee's `contract` Structs and call `post`/`get` with a response type.
A 4xx from the callee becomes `RemoteError` carrying its status and machine-readable code;
connection failures become `ServiceUnavailable` so callers can retry idempotent writes.
"""

from __future__ import annotations

from typing import Any, TypeVar

import httpx
import msgspec

from services.common.auth import AUTH_HEADER, TokenCache
from services.common.config import Settings
from services.common.logging import REQUEST_ID_HEADER, current_request_id, new_request_id

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 10.0
# Keep-alive connections per callee; bounded so a burst queues instead of exhausting sockets.
MAX_CONNECTIONS = 100


class RemoteError(Exception):
    """The callee refused the request (4xx) or failed (5xx)."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail


class ServiceUnavailable(Exception):
    """The callee could not be reached or did not answer in time."""


class _ErrorBody(msgspec.Struct):
    error: str = "error"
    detail: str = ""


class InternalClient:
    def __init__(
        self,
        base_url: str,
        settings: Settings,
        caller: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.AsyncBaseTransport | None = None,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self._tokens = TokenCache(settings.internal_secret, caller, settings.internal_token_ttl_s)
        self._client = httpx.AsyncClient(
            base_url=base_url,
            timeout=timeout_s,
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=MAX_CONNECTIONS
            ),
            transport=transport,
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    def _headers(self) -> dict[str, str]:
        return {
            AUTH_HEADER: self._tokens.header(),
            REQUEST_ID_HEADER: current_request_id() or new_request_id(),
            "Content-Type": "application/json",
        }

    async def request(
        self,
        method: str,
        path: str,
        response_type: type[T],
        body: Any = None,
        params: dict[str, Any] | None = None,
    ) -> T:
        content = msgspec.json.encode(body) if body is not None else None
        try:
            response = await self._client.request(
                method, path, content=content, params=params, headers=self._headers()
            )
        except (httpx.TransportError, httpx.TimeoutException) as exc:
            raise ServiceUnavailable(f"{method} {path}: {type(exc).__name__}") from exc
        if response.status_code >= 400:
            try:
                err = msgspec.json.decode(response.content, type=_ErrorBody)
            except msgspec.DecodeError:
                err = _ErrorBody(error="error", detail=response.text[:200])
            if response.status_code in (502, 503, 504):
                raise ServiceUnavailable(f"{method} {path}: {response.status_code} {err.error}")
            raise RemoteError(response.status_code, err.error, err.detail)
        return msgspec.json.decode(response.content, type=response_type)

    async def get(
        self, path: str, response_type: type[T], params: dict[str, Any] | None = None
    ) -> T:
        return await self.request("GET", path, response_type, params=params)

    async def post(self, path: str, body: Any, response_type: type[T]) -> T:
        return await self.request("POST", path, response_type, body=body)
