"""Internal HTTP client: service credential, request id propagation, msgspec bodies.

Callers import the callee's `contract` Structs and call `post`/`get` with a response type.
A 4xx from the callee becomes `RemoteError` carrying its status and machine-readable code;
connection failures become `ServiceUnavailable` so callers can retry idempotent writes.

Plain `http://` callees, and `http+unix://` ones (a service on the same host, reached over its
Unix socket), are reached through `http1.Http1Pool` (keep-alive HTTP/1.1 on asyncio streams,
parsed by httptools): httpx cost more CPU per call than the callee and its database
together. A given `transport` (tests wire in-process ASGI apps with `httpx.ASGITransport`) or
an `https://` URL still goes through httpx.
"""

from __future__ import annotations

import re
import zlib
from collections import OrderedDict
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
import msgspec

from services.common.auth import AUTH_HEADER, TokenCache
from services.common.config import Settings, unix_socket_path
from services.common.http1 import (
    DEFAULT_MAX_RESPONSE_BYTES,
    Http1Pool,
    ResponseTooLarge,
    TransportError,
    request_target,
)
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
    """The callee could not be reached, did not answer in time, or answered 502/503/504
    (`code` is its machine-readable reason, e.g. `not_owner`, or `unreachable`)."""

    def __init__(self, message: str, code: str = "unreachable") -> None:
        super().__init__(message)
        self.code = code


class AnswerTooLarge(ServiceUnavailable):
    """The callee's answer was larger than the call's `max_response_bytes`: nothing of it is
    returned (the connection is closed rather than read to the end)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "response_too_large")


# A match id in an internal path; requests about one match go to the replica that owns it.
_MATCH_PATH = re.compile(r"^/internal/matches/([^/?]+)")
# Remembered owners per match, bounded (oldest forgotten first).
MAX_REMEMBERED_OWNERS = 100_000


class _ErrorBody(msgspec.Struct):
    error: str = "error"
    detail: str = ""


# How a caller spreads its requests over a service's replicas, when the service has a rule of
# its own (`InternalClient.of`): ledger replicas are filled one after the other, so that each
# group commit keeps its batches. Any other service: the engine's rule, by match (`_routed`).
# With several ledger replicas a caller fills one up to this many requests in flight before it
# sends to the next: half the ledger's group-commit batch, the point at which one replica starts
# a second call (ledger/batch.py, `open_slot_at`), so each replica keeps its batches whole.
FILL_FIRST = {"ledger": 16}


class InternalClient:
    @classmethod
    def of(cls, service: str, settings: Settings, caller: str, **options: Any) -> InternalClient:
        """A client of `service` at its configured URL(s), with that service's replica rule."""
        return cls(
            settings.url_of(service),
            settings,
            caller,
            audience=service,
            fill_first=FILL_FIRST.get(service),
            **options,
        )

    def __init__(
        self,
        base_url: str,
        settings: Settings,
        caller: str,
        *,
        audience: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.AsyncBaseTransport | None = None,
        max_connections: int = MAX_CONNECTIONS,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        fill_first: int | None = None,
    ) -> None:
        """`base_url`: one base URL, or several comma-separated ones for replicas. Replicas are
        engine processes, each owning its matches (`_routed`), unless `fill_first` is given:
        then any replica answers any request, and each request goes to the first replica
        with fewer than `fill_first` of this client's requests in flight (`_filled`).
        `caller` and `audience` (the callee's service name) are what its tokens name;
        `max_response_bytes` is the default limit of an answer's body (a call may set its
        own)."""
        if fill_first is not None and fill_first < 1:
            raise ValueError("fill_first must be at least 1")
        self._tokens = TokenCache(
            settings.internal_secret, caller, audience, settings.internal_token_ttl_s
        )
        self._timeout_s = timeout_s
        self._max_response_bytes = max_response_bytes
        self._pool: Http1Pool | None = None
        self._client: httpx.AsyncClient | None = None
        self._replicas: list[InternalClient] = []
        self._owners: OrderedDict[str, int] = OrderedDict()
        self._fill_first = fill_first
        urls = [u.strip() for u in base_url.split(",") if u.strip()]
        self._in_flight = [0] * len(urls)
        if len(urls) > 1 and transport is None:
            self._replicas = [
                InternalClient(
                    u,
                    settings,
                    caller,
                    audience=audience,
                    timeout_s=timeout_s,
                    max_connections=max_connections,
                    max_response_bytes=max_response_bytes,
                )
                for u in urls
            ]
            return
        base_url = urls[0] if urls else base_url
        url = urlsplit(base_url)
        unix_path = unix_socket_path(base_url)
        if transport is None and unix_path is not None:
            self._pool = Http1Pool(
                "localhost",
                0,
                max_connections=max_connections,
                max_response_bytes=max_response_bytes,
                unix_path=unix_path,
            )
            self._prefix = url.path.rstrip("/")
            self._host_header = "localhost"
        elif transport is None and url.scheme == "http" and url.hostname:
            self._pool = Http1Pool(
                url.hostname,
                url.port or 80,
                max_connections=max_connections,
                max_response_bytes=max_response_bytes,
            )
            self._prefix = url.path.rstrip("/")
            self._host_header = url.netloc.rsplit("@", 1)[-1]
        else:
            self._client = httpx.AsyncClient(
                base_url=base_url,
                timeout=timeout_s,
                limits=httpx.Limits(
                    max_connections=max_connections, max_keepalive_connections=MAX_CONNECTIONS
                ),
                transport=transport,
            )

    async def aclose(self) -> None:
        for replica in self._replicas:
            await replica.aclose()
        if self._pool is not None:
            await self._pool.aclose()
        if self._client is not None:
            await self._client.aclose()

    def _request_id(self) -> str:
        request_id = current_request_id()
        if not request_id or "\r" in request_id or "\n" in request_id:
            return new_request_id()
        return request_id

    def _headers(self) -> dict[str, str]:
        return {
            AUTH_HEADER: self._tokens.header(),
            REQUEST_ID_HEADER: self._request_id(),
            "Content-Type": "application/json",
        }

    async def request(
        self,
        method: str,
        path: str,
        response_type: type[T],
        body: Any = None,
        params: dict[str, Any] | None = None,
        max_response_bytes: int | None = None,
    ) -> T:
        """`max_response_bytes`: this call's limit on the answer's body (default: the
        client's); a larger answer raises AnswerTooLarge."""
        limit = self._max_response_bytes if max_response_bytes is None else max_response_bytes
        if self._replicas:
            if self._fill_first is not None:
                return await self._filled(method, path, response_type, body, params, limit)
            return await self._routed(method, path, response_type, body, params, limit)
        content = msgspec.json.encode(body) if body is not None else None
        if self._pool is None:
            return await self._request_httpx(method, path, response_type, content, params, limit)
        target = request_target(self._prefix, path, params)
        head = (
            f"{method} {target} HTTP/1.1\r\nHost: {self._host_header}\r\n"
            f"{AUTH_HEADER}: {self._tokens.header()}\r\n"
            f"{REQUEST_ID_HEADER}: {self._request_id()}\r\n"
            "Content-Type: application/json\r\n"
        )
        if content is not None:
            data = f"{head}Content-Length: {len(content)}\r\n\r\n".encode() + content
        elif method in ("GET", "HEAD", "DELETE", "OPTIONS"):
            data = f"{head}\r\n".encode()
        else:
            data = f"{head}Content-Length: 0\r\n\r\n".encode()
        try:
            status, payload = await self._pool.request(data, self._timeout_s, limit)
        except ResponseTooLarge as exc:
            raise AnswerTooLarge(f"{method} {path}: {exc}") from exc
        except TransportError as exc:
            raise ServiceUnavailable(f"{method} {path}: {exc.kind}") from exc
        return _result(method, path, status, payload, response_type)

    async def _request_httpx(
        self,
        method: str,
        path: str,
        response_type: type[T],
        content: bytes | None,
        params: dict[str, Any] | None,
        limit: int,
    ) -> T:
        if self._client is None:
            raise ServiceUnavailable(f"{method} {path}: no transport")
        try:
            async with self._client.stream(
                method, path, content=content, params=params, headers=self._headers()
            ) as response:
                chunks: list[bytes] = []
                size = 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > limit:
                        raise AnswerTooLarge(
                            f"{method} {path}: response body over the limit of {limit} bytes"
                        )
                    chunks.append(chunk)
        except (httpx.TransportError, httpx.TimeoutException) as exc:
            raise ServiceUnavailable(f"{method} {path}: {type(exc).__name__}") from exc
        return _result(method, path, response.status_code, b"".join(chunks), response_type)

    async def _routed(
        self,
        method: str,
        path: str,
        response_type: type[T],
        body: Any,
        params: dict[str, Any] | None,
        limit: int,
    ) -> T:
        """Send a request about one match to the replica that owns it.

        A new match goes to a replica chosen by its id (spreading matches); a replica that
        answers `not_owner` or cannot be reached is skipped for the next one, and the one that
        answers is remembered. Retrying on another replica is safe: a replica that is not the
        owner changes nothing, and a repeated action is refused by its sequence number.
        """
        found = _MATCH_PATH.match(path)
        match_id = found.group(1) if found else getattr(body, "match_id", None)
        n = len(self._replicas)
        if match_id is None:
            first = 0
        elif match_id in self._owners:
            first = self._owners[match_id]
        else:
            first = zlib.crc32(str(match_id).encode()) % n
        index, result = await self._first_answer(
            first, ("not_owner", "unreachable"), method, path, response_type, body, params, limit
        )
        if match_id is not None:
            self._owners[match_id] = index
            self._owners.move_to_end(match_id)
            if len(self._owners) > MAX_REMEMBERED_OWNERS:
                self._owners.popitem(last=False)
        return result

    async def _filled(
        self,
        method: str,
        path: str,
        response_type: type[T],
        body: Any,
        params: dict[str, Any] | None,
        limit: int,
    ) -> T:
        """Send a request to the first replica with fewer than `fill_first` of this client's
        requests in flight, or else to the one with the fewest; one that cannot be reached is
        skipped for the next.

        For the ledger: each replica's group commit posts the requests that arrive together
        in one transaction, and larger batches cost the database less per operation, so the
        replicas fill one after another instead of sharing the load evenly (which would halve
        every batch). A second replica takes requests only beyond what one group commit keeps
        in a call or two. Sending again to another replica is safe: every write carries its
        idempotency key, so a request the first replica did post is replayed, not posted
        twice."""
        fill = self._fill_first or 1
        loads = self._in_flight
        n = len(self._replicas)
        first = next((i for i in range(n) if loads[i] < fill), None)
        if first is None:
            first = min(range(n), key=loads.__getitem__)
        _, result = await self._first_answer(
            first, ("unreachable",), method, path, response_type, body, params, limit, loads
        )
        return result

    async def _first_answer(
        self,
        first: int,
        skip: tuple[str, ...],
        method: str,
        path: str,
        response_type: type[T],
        body: Any,
        params: dict[str, Any] | None,
        limit: int,
        loads: list[int] | None = None,
    ) -> tuple[int, T]:
        """The first replica's answer, from `first` on in turn, skipping those refused with a
        code in `skip` (the last such refusal is raised if every replica gives one); with
        `loads`, each replica's count of requests in flight is kept there."""
        n = len(self._replicas)
        last_error: ServiceUnavailable | None = None
        for step in range(n):
            index = (first + step) % n
            if loads is not None:
                loads[index] += 1
            try:
                return index, await self._replicas[index].request(
                    method, path, response_type, body, params, limit
                )
            except ServiceUnavailable as exc:
                if exc.code not in skip:
                    raise
                last_error = exc
            finally:
                if loads is not None:
                    loads[index] -= 1
        if last_error is None:
            raise ServiceUnavailable(f"{method} {path}: no replica")
        raise last_error

    async def get(
        self,
        path: str,
        response_type: type[T],
        params: dict[str, Any] | None = None,
        *,
        max_response_bytes: int | None = None,
    ) -> T:
        return await self.request(
            "GET", path, response_type, params=params, max_response_bytes=max_response_bytes
        )

    async def post(
        self, path: str, body: Any, response_type: type[T], *, max_response_bytes: int | None = None
    ) -> T:
        return await self.request(
            "POST", path, response_type, body=body, max_response_bytes=max_response_bytes
        )


def _result(method: str, path: str, status: int, content: bytes, response_type: type[T]) -> T:
    if status >= 400:
        try:
            err = msgspec.json.decode(content, type=_ErrorBody)
        except msgspec.DecodeError:
            err = _ErrorBody(error="error", detail=content.decode("utf-8", "replace")[:200])
        if status in (502, 503, 504):
            raise ServiceUnavailable(f"{method} {path}: {status} {err.error}", err.error)
        raise RemoteError(status, err.error, err.detail)
    return msgspec.json.decode(content, type=response_type)
