"""Internal HTTP client: service credential, request id propagation, msgspec bodies.

Callers import the callee's `contract` Structs and call `post`/`get` with a response type.
A 4xx from the callee becomes `RemoteError` carrying its status and machine-readable code;
connection failures become `ServiceUnavailable` so callers can retry idempotent writes.

Callees are reached with aiohttp's client (keep-alive HTTP/1.1, its C parser): `http://` and
`https://` URLs over TCP, `http+unix://` ones (a service on the same host) over its Unix
socket. Chosen by bench/bench_http.py (docs/decisions/0019-internal-http-client.md). A given
`transport` (tests wire in-process ASGI apps with `httpx.ASGITransport`) goes through httpx.
"""

from __future__ import annotations

import re
import zlib
from collections import OrderedDict
from types import SimpleNamespace
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiohttp
import httpx
import msgspec

from services.common.auth import AUTH_HEADER, TokenCache
from services.common.config import Settings, unix_socket_path
from services.common.logging import REQUEST_ID_HEADER, current_request_id, new_request_id

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 10.0
# Keep-alive connections per callee; bounded so a burst queues instead of exhausting sockets.
MAX_CONNECTIONS = 100
# Large enough for the largest answer a contract allows (a page of a report, a statement page,
# a page of log leaves: each a few MiB at most); a body above it is refused, not buffered.
DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024
# Below uvicorn's keep-alive timeout (5 s): an idle connection is dropped by us first, so the
# server rarely closes one under a request.
IDLE_TIMEOUT_S = 4.0
_READ_CHUNK_BYTES = 256 * 1024


class RemoteError(Exception):
    """The callee refused the request (4xx) or failed (5xx)."""

    def __init__(
        self, status: int, code: str, detail: str, refs: dict[str, list[str]] | None = None
    ) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail
        # The objects the refusal is about, by kind (services.common.errors).
        self.refs = refs or {}


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
    refs: dict[str, list[str]] | None = None


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
        self._client: httpx.AsyncClient | None = None
        self._session: aiohttp.ClientSession | None = None
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
        self._unix_path = unix_socket_path(base_url)
        self._max_connections = max_connections
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        # Paths are joined to the base URL's origin and path (a Unix socket's: "localhost").
        origin = (
            "http://localhost" if self._unix_path is not None else f"{url.scheme}://{url.netloc}"
        )
        self._base = origin + url.path.rstrip("/")
        if transport is not None:
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
        if self._session is not None:
            await self._session.close()
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
        if self._client is not None:
            return await self._request_httpx(method, path, response_type, content, params, limit)
        status, payload = await self._send(method, path, content, params, limit)
        return _result(method, path, status, payload, response_type)

    def session(self) -> aiohttp.ClientSession:
        """This client's aiohttp session, opened on first use (aiohttp wants a running loop):
        at most `max_connections` keep-alive connections, idle ones closed before the server
        would close them."""
        if self._session is None:
            connector: aiohttp.BaseConnector
            if self._unix_path is not None:
                connector = aiohttp.UnixConnector(
                    path=self._unix_path,
                    limit=self._max_connections,
                    keepalive_timeout=IDLE_TIMEOUT_S,
                )
            else:
                connector = aiohttp.TCPConnector(
                    limit=self._max_connections, keepalive_timeout=IDLE_TIMEOUT_S
                )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=self._timeout,
                trace_configs=[_REUSE_TRACE],
                skip_auto_headers=("User-Agent",),
            )
        return self._session

    async def _send(
        self,
        method: str,
        path: str,
        content: bytes | None,
        params: dict[str, Any] | None,
        limit: int,
    ) -> tuple[int, bytes]:
        """(status, body) of one request. A request on a kept-alive connection that the callee
        closed before answering (its idle timeout, a restart) is sent once more, on a new
        connection; on a new connection it is not: that callee could not answer it."""
        session = self.session()
        url = self._base + path
        headers = self._headers()
        query = _query(params) if params else None
        for attempt in range(2):
            seen = SimpleNamespace(reused=False)
            try:
                async with session.request(
                    method, url, data=content, params=query, headers=headers, trace_request_ctx=seen
                ) as response:
                    return response.status, await read_within(response, limit, method, path)
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                if (
                    attempt == 0
                    and seen.reused
                    and not isinstance(exc, aiohttp.ClientConnectorError)
                ):
                    continue
                raise ServiceUnavailable(f"{method} {path}: {type(exc).__name__}") from exc
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise ServiceUnavailable(f"{method} {path}: {type(exc).__name__}") from exc
        raise ServiceUnavailable(f"{method} {path}: no answer")

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


async def _on_reused(_: Any, context: SimpleNamespace, __: Any) -> None:
    if isinstance(context.trace_request_ctx, SimpleNamespace):
        context.trace_request_ctx.reused = True


# Tells `_send` whether its request went out on a kept-alive connection (aiohttp's tracing).
_REUSE_TRACE = aiohttp.TraceConfig()
_REUSE_TRACE.on_connection_reuseconn.append(_on_reused)


async def read_within(
    response: aiohttp.ClientResponse, limit: int, method: str, path: str
) -> bytes:
    """The whole body, or AnswerTooLarge as soon as it is known to be over `limit` (its
    Content-Length, or the bytes received): the connection is then closed, not read on."""
    declared = response.content_length
    if declared is not None and declared > limit:
        response.close()
        raise AnswerTooLarge(f"{method} {path}: response body over the limit of {limit} bytes")
    if declared is not None:
        return await response.read()
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(_READ_CHUNK_BYTES):
        size += len(chunk)
        if size > limit:
            response.close()
            raise AnswerTooLarge(f"{method} {path}: response body over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _query(params: dict[str, Any]) -> list[tuple[str, str]]:
    """A query as httpx writes one: lists repeat the key, booleans are lower case, None is
    empty."""
    items: list[tuple[str, str]] = []
    for key, value in params.items():
        for v in value if isinstance(value, list | tuple) else (value,):
            text = "" if v is None else "true" if v is True else "false" if v is False else str(v)
            items.append((str(key), text))
    return items


def _result(method: str, path: str, status: int, content: bytes, response_type: type[T]) -> T:
    if status >= 400:
        try:
            err = msgspec.json.decode(content, type=_ErrorBody)
        except msgspec.DecodeError:
            err = _ErrorBody(error="error", detail=content.decode("utf-8", "replace")[:200])
        if status in (502, 503, 504):
            raise ServiceUnavailable(f"{method} {path}: {status} {err.error}", err.error)
        raise RemoteError(status, err.error, err.detail, err.refs)
    return msgspec.json.decode(content, type=response_type)
