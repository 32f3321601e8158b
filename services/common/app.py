"""One factory for every service's ASGI app: health, request ids, auth, errors, database.

Internal services check the service credential on every route but `/health` and `/metrics`:
a call without a valid one is refused with 401; a valid one minted for another service, or
naming a caller the route does not declare (`services.common.auth.callers_opt`,
`DirectRoute.callers`), with 403, and so is any call of a route that declares no callers. The
public gateway passes `public=True` and brings its own authentication.
"""

from __future__ import annotations

import gc
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import msgspec
from litestar import Litestar, MediaType, Request, Response, get
from litestar.datastructures import State
from litestar.exceptions import (
    HTTPException,
    NotAuthorizedException,
    ValidationException,
)
from litestar.types import (
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    WebSocketCloseEvent,
)
from sqlalchemy.ext.asyncio import AsyncEngine
from structlog.contextvars import bind_contextvars, reset_contextvars

from services.common.auth import (
    AUTH_HEADER,
    AuthError,
    Forbidden,
    VerifiedTokens,
    check_audience,
    check_caller,
    declared_callers,
)
from services.common.config import VERSION, Settings
from services.common.db import check_database, create_engine
from services.common.direct import (
    MAX_REQUEST_BODY_BYTES,
    ErrorBody,
    JsonPost,
    error_json,
    read_body,
    send_json,
)
from services.common.errors import ServiceError
from services.common.json_limits import check_json_depth
from services.common.logging import REQUEST_ID_HEADER, clean_request_id, get_logger
from services.common.loop_health import LoopHealth
from services.common.metrics import REQUEST_SECONDS, REQUESTS, child, render
from services.common.strict_json import strict_json_body

log = get_logger()


class Health(msgspec.Struct, frozen=True):
    service: str
    version: str
    database: str


class BoundedRequest(Request[Any, Any, Any]):
    """Litestar's request, with the JSON body's nesting bounded before it is decoded: Litestar
    decodes every JSON body to `Any` (then converts it to the handler's type), where deep
    nesting is a RecursionError (services.common.json_limits)."""

    async def json(self) -> Any:
        check_json_depth(await self.body())
        return await super().json()


def error_response(status: int, code: str, detail: str) -> Response[Any]:
    return Response(
        content=ErrorBody(error=code, detail=detail),
        status_code=status,
        media_type=MediaType.JSON,
    )


def _service_error_handler(_: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    if not isinstance(exc, ServiceError):
        raise exc
    return error_response(exc.status, exc.code, exc.detail)


def _validation_handler(_: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    detail = getattr(exc, "detail", "") or "invalid request"
    extra = getattr(exc, "extra", None)
    if extra:
        detail = f"{detail}: {msgspec.json.encode(extra).decode()[:500]}"
    return error_response(400, "invalid_request", str(detail))


def _http_exception_handler(_: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    if not isinstance(exc, HTTPException):
        raise exc
    codes = {
        400: "invalid_request",
        401: "unauthorized",
        403: "forbidden",
        404: "not_found",
        405: "method_not_allowed",
        413: "body_too_large",
        429: "rate_limited",
    }
    status = exc.status_code
    code = codes.get(status, "server_error" if status >= 500 else "bad_request")
    if status >= 500:
        log.error("http_error", status=status, detail=exc.detail)
        return error_response(status, code, "internal error")
    return error_response(status, code, str(exc.detail))


def _internal_error_handler(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    log.exception("unhandled_error", path=request.url.path, error=type(exc).__name__)
    return error_response(500, "server_error", "internal error")


EXCEPTION_HANDLERS: dict[Any, Callable[..., Response[Any]]] = {
    ServiceError: _service_error_handler,
    ValidationException: _validation_handler,
    HTTPException: _http_exception_handler,
    Exception: _internal_error_handler,
}


_UNGUARDED_PATHS = frozenset({"/health", "/metrics"})
_VERIFIED = VerifiedTokens()


class RequestGuard:
    """What the service does around every request, whichever way it is answered (the ASGI
    middleware below, or `DirectDispatch` in the services' HTTP protocol): the request id, the
    service credential (internal services), and the request's metrics and log line."""

    __slots__ = (
        "auth_key",
        "log_requests",
        "public",
        "request_id_key",
        "secret",
        "service",
    )

    def __init__(self, service: str, settings: Settings, public: bool) -> None:
        self.service = service
        self.public = public
        self.secret = settings.internal_secret
        self.request_id_key = REQUEST_ID_HEADER.lower().encode()
        self.auth_key = AUTH_HEADER.lower().encode()
        # The request line is a debug line: below that level it is not even built. (Logging is
        # configured before the app is made: `mesa serve`.)
        self.log_requests = bool(log.is_enabled_for(logging.DEBUG))

    def identify(self, headers: Iterable[tuple[bytes, bytes]]) -> tuple[str, str | None]:
        """(request id: the caller's if well formed, else a new one; the credential header)."""
        raw = None
        auth = None
        for key, value in headers:
            if key == self.request_id_key:
                raw = value.decode("latin-1")
            elif key == self.auth_key:
                auth = value.decode("latin-1")
        return clean_request_id(raw), auth

    def caller(
        self, path: str, auth: str | None, allowed: frozenset[str] | None, route: str
    ) -> str | None:
        """The calling service, or None where no credential is asked for. AuthError (401) when
        the credential is missing, malformed, forged or expired; Forbidden (403) when it was
        minted for another service or names a caller not in the route's `allowed` (None: the
        route declares no callers, and nobody may call it)."""
        if self.public or path in _UNGUARDED_PATHS:
            return None
        token = _VERIFIED.token(self.secret, auth)
        check_audience(token, self.service)
        check_caller(token.caller, allowed, route)
        return token.caller

    def answered(self, method: str, path: str, status: int, started: float) -> None:
        """Logged before the response leaves, so a client that has its answer can rely on the
        line being written (duration: until the response starts)."""
        if not self.log_requests:
            return
        log.debug(
            "request",
            method=method,
            path=path,
            status=status,
            duration_ms=round((time.perf_counter() - started) * 1000, 2),
        )

    def finished(self, method: str, route: str, status: int, elapsed_s: float) -> None:
        child(REQUESTS, self.service, method, route, f"{status // 100}xx").inc()
        child(REQUEST_SECONDS, self.service, route).observe(elapsed_s)


def service_middleware(guard: RequestGuard) -> Callable[[ASGIApp], ASGIApp]:
    """Request ids, logging, metrics, and (internal services) the service credential check.

    The credential is checked here on the raw headers rather than as a Litestar guard: a guard
    costs a copy of the route handler and a parsed header map per request, a few per cent of
    an engine's CPU at thousands of internal calls a second. Litestar runs this middleware
    after routing, so the route's handler (and its `opt`, which declares the callers) is in
    the scope. A call without a valid credential is refused with 401, one with a credential
    for another service or caller with 403, before its handler runs or its body is read (a
    direct route's body, bounded by the limit, is read first: `DirectDispatch`)."""

    def middleware_for(app: ASGIApp) -> ASGIApp:
        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] not in ("http", "websocket"):
                await app(scope, receive, send)
                return
            request_id, auth = guard.identify(scope.get("headers", []))
            tokens = bind_contextvars(request_id=request_id)
            state = scope.setdefault("state", {})
            state["request_id"] = request_id
            started = time.perf_counter()
            status_holder = [0]
            method = str(scope.get("method", "WS"))

            async def send_with_id(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status_holder[0] = message["status"]
                    headers = list(message.get("headers", []))
                    headers.append((b"x-request-id", request_id.encode()))
                    message = {**message, "headers": headers}  # type: ignore[assignment]
                    guard.answered(method, scope.get("path", ""), status_holder[0], started)
                await send(message)

            try:
                if "\x00" in scope.get("path", ""):
                    # No route has one; a NUL reaching a file lookup (the page's static files)
                    # is a ValueError there.
                    await _refuse(scope, send_with_id, "no such path", 404)
                    return
                handler = scope.get("route_handler")
                try:
                    caller = guard.caller(
                        scope.get("path", ""),
                        auth,
                        declared_callers(getattr(handler, "opt", None)),
                        str(scope.get("path_template") or scope.get("path", "")),
                    )
                except AuthError as exc:
                    await _refuse(scope, send_with_id, str(exc))
                    return
                except Forbidden as exc:
                    await _refuse(scope, send_with_id, str(exc), 403)
                    return
                if caller is not None:
                    state["caller"] = caller
                await app(scope, receive, send_with_id)
            finally:
                elapsed_s = time.perf_counter() - started
                route = scope.get("path_template") or "unmatched"
                guard.finished(method, route, status_holder[0], elapsed_s)
                if scope["type"] == "websocket":
                    log.debug(
                        "websocket_closed",
                        path=scope.get("path", ""),
                        duration_ms=round(elapsed_s * 1000, 2),
                    )
                reset_contextvars(**tokens)

        return middleware

    return middleware_for


_REFUSAL_CODES = {401: "unauthorized", 403: "forbidden", 404: "not_found"}


async def _refuse(scope: Scope, send: Send, detail: str, status: int = 401) -> None:
    """401 (or `status`) with the same body as every other refusal ({"error", "detail"}); a
    WebSocket is closed with 1008 (policy violation)."""
    code = _REFUSAL_CODES[status]
    if scope["type"] == "websocket":
        close: WebSocketCloseEvent = {"type": "websocket.close", "code": 1008, "reason": code}
        await send(close)
        return
    await send_json(send, status, error_json(code, detail))


def make_health_handler(service: str) -> Any:
    @get("/health", include_in_schema=False)
    async def health(state: State) -> Response[Health]:
        ok = await check_database(state.get("db"))
        body = Health(service=service, version=VERSION, database="ok" if ok else "unavailable")
        return Response(body, status_code=200 if ok else 503)

    return health


@get("/metrics", include_in_schema=False)
async def metrics_handler(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Prometheus exposition. On the public gateway only loopback and private networks see it."""
    state = request.app.state
    client = request.client.host if request.client else ""
    if state.get("public") and not _is_private_address(client):
        raise NotAuthorizedException(detail="metrics are not public")
    body, content_type = render()
    return Response(body, media_type=content_type)


def _is_private_address(host: str) -> bool:
    import ipaddress

    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host == "testclient"
    return address.is_loopback or address.is_private


LifespanHook = Callable[[Litestar], Awaitable[None]]


class DirectRoute(msgspec.Struct, frozen=True):
    """A hot route answered ahead of Litestar's router.

    Litestar's per-request routing, signature parsing, dependency resolution and response
    building cost more CPU than the engine's own work on an action; a few routes every action
    goes through skip them. `DirectDispatch` keeps the same duties (credential, request id,
    logging, metrics under `path_template`). The route finds the path's named groups in its
    params, checks the method and answers every error itself as {"error", "detail"}.
    """

    path: re.Pattern[str]
    path_template: str
    app: JsonPost
    # The callers the route accepts (`services.common.auth.frozen_callers`); None: nobody.
    callers: frozenset[str] | None = None


class DirectDispatch:
    """A service's direct routes, as its HTTP protocol answers them (`services.common.serve`):
    a whole request in, (status, JSON body, request id) out, with the `RequestGuard`'s duties
    and no ASGI messages in between.

    Measured on the ledger service (holds, 32 raw clients, 4 s runs): 0.100-0.108 ms of CPU
    per request through the ASGI layers (uvicorn's request cycle, the middleware, Litestar's
    entry point, four ASGI messages), 0.074-0.091 ms answered by the protocol here."""

    __slots__ = ("app", "guard", "routes")

    def __init__(self, app: Litestar, routes: Sequence[DirectRoute], guard: RequestGuard):
        self.app = app
        self.routes = tuple(routes)
        self.guard = guard

    def match(self, path: str) -> tuple[DirectRoute, dict[str, str]] | None:
        for route in self.routes:
            if (found := route.path.fullmatch(path)) is not None:
                return route, found.groupdict()
        return None

    async def answer(
        self,
        route: DirectRoute,
        params: dict[str, str],
        method: str,
        path: str,
        headers: Iterable[tuple[bytes, bytes]],
        body: bytes | None,
    ) -> tuple[int, bytes, str]:
        """`body` None: larger than the limit. The credential is checked here, once the body
        is in (the limit bounds what an unknown caller can make the service read). Never
        raises for a request's sake."""
        guard = self.guard
        request_id, auth = guard.identify(headers)
        tokens = bind_contextvars(request_id=request_id)
        started = time.perf_counter()
        status = 500
        try:
            try:
                guard.caller(path, auth, route.callers, route.path_template)
            except AuthError as exc:
                status, out = 401, error_json("unauthorized", str(exc))
            except Forbidden as exc:
                status, out = 403, error_json("forbidden", str(exc))
            else:
                status, out = await route.app.answer(self.app.state, params, method, body)
            guard.answered(method, path, status, started)
            return status, out, request_id
        finally:
            guard.finished(method, route.path_template, status, time.perf_counter() - started)
            reset_contextvars(**tokens)


class _DirectFirst:
    """The app's entry point with its direct routes ahead of its router, answered as ASGI by
    the same `DirectDispatch` the services' HTTP protocol answers them with."""

    __slots__ = ("dispatch", "routed")

    def __init__(self, routed: ASGIApp, dispatch: DirectDispatch) -> None:
        self.routed = routed
        self.dispatch = dispatch

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (found := self.dispatch.match(scope["path"])) is None:
            await self.routed(scope, receive, send)
            return
        route, params = found
        method = str(scope.get("method", ""))
        try:
            body = await read_body(receive) if method == "POST" else b""
        except ServiceError:
            return  # the client went away: nobody to answer
        status, out, request_id = await self.dispatch.answer(
            route, params, method, scope["path"], scope["headers"], body
        )
        await send_json(send, status, out, [(b"x-request-id", request_id.encode())])


# ASGI wrappers a server may put around the app (uvicorn's proxy-headers middleware), at most.
_MAX_WRAPPERS = 4


def direct_dispatch_of(app: Any) -> DirectDispatch | None:
    """The direct routes of `app`, or of the app it wraps (as `.app`), if it has any."""
    for _ in range(_MAX_WRAPPERS + 1):
        if isinstance(app, Litestar):
            handler = app.asgi_handler
            return handler.dispatch if isinstance(handler, _DirectFirst) else None
        app = getattr(app, "app", None)
        if app is None:
            return None
    return None


# Middle-generation passes three times as often, so each is a third as long. A service's live
# objects are mostly long-lived (a table socket's tasks and coroutines in the gateway, a
# match's state in the engine): they survive the young passes and pile up in the middle
# generation, so with Python's (700, 10, 10) every middle pass walked thousands of them (at
# 500-700 tables of the load test, 19 of 20 to 36 of 53 of the engine's took over 10 ms).
# Load test, quiet, 700 tables: p99 106 ms and engine loop late by over 10 ms in 31 of 1,512
# probes with (700, 10, 100); 31.8 ms and 8 of 1,566 with (700, 3, 300).
# No automatic full passes (the third threshold is never reached): they walk every live object
# and ran every 30-60 s under load; `loop_health.collect_fully_every` runs them on a schedule.
SERVICE_GC_THRESHOLDS = (700, 3, 1_000_000_000)


def freeze_startup_heap() -> None:
    """Move every object alive after startup (modules, classes, routes, pools: a few hundred
    thousand) out of the collector's reach. A full collection walks every tracked object and
    stalls the event loop meanwhile (tens of ms with the startup heap, paid by every request in
    flight); objects that live for the whole process never become garbage, so scanning them is
    pure cost. Objects created later are collected with `SERVICE_GC_THRESHOLDS`."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*SERVICE_GC_THRESHOLDS)


def create_service_app(
    service: str,
    settings: Settings,
    route_handlers: Sequence[Any],
    *,
    public: bool = False,
    on_startup: Sequence[LifespanHook] = (),
    on_shutdown: Sequence[LifespanHook] = (),
    pool_size: int | None = 10,
    direct_routes: Sequence[DirectRoute] = (),
    **litestar_kwargs: Any,
) -> Litestar:
    # `pool_size=None`: the service opens its own asyncpg pool in a startup hook and stores
    # it as `app.state.db` (its only database path, which /health then checks).
    async def open_db(app: Litestar) -> None:
        if pool_size is None:
            return
        app.state.db = create_engine(
            settings.database_url,
            application_name=f"mesa-{service}",
            pool_size=pool_size,
        )

    async def freeze_heap(_: Litestar) -> None:
        # Not under tests: one process starts many apps, and each freeze would pin whatever
        # the earlier tests left for the collector.
        if settings.env != "test":
            freeze_startup_heap()

    async def close_db(app: Litestar) -> None:
        engine = app.state.get("db")
        if isinstance(engine, AsyncEngine):
            await engine.dispose()

    guard = RequestGuard(service, settings, public)
    middleware = service_middleware(guard)
    loop_health = LoopHealth()
    litestar_kwargs.setdefault("before_request", strict_json_body)
    app = Litestar(
        route_handlers=[make_health_handler(service), metrics_handler, *route_handlers],
        state=State({"settings": settings, "service": service, "public": public}),
        exception_handlers=EXCEPTION_HANDLERS,
        middleware=[middleware],
        on_startup=[open_db, *on_startup, freeze_heap, loop_health.start],
        on_shutdown=[loop_health.stop, *on_shutdown, close_db],
        request_max_body_size=MAX_REQUEST_BODY_BYTES,
        request_class=BoundedRequest,
        logging_config=None,
        **litestar_kwargs,
    )
    if direct_routes:
        app.asgi_handler = _DirectFirst(app.asgi_handler, DirectDispatch(app, direct_routes, guard))
    return app
