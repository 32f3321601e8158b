"""One factory for every service's ASGI app: health, request ids, auth, errors, database.

Internal services check the service credential on every route but `/health` and `/metrics`,
in one Litestar guard (`ServiceCallerGuard`) built from the callers each route declares
(`services.common.auth.callers_opt`): a call without a valid credential is refused with 401;
a valid one minted for another service, or naming a caller the route does not declare, with
403, and so is any call of a route that declares no callers. The public gateway passes
`public=True` and brings its own authentication.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import msgspec
from litestar import Litestar, MediaType, Request, Response, get
from litestar.connection import ASGIConnection
from litestar.datastructures import State
from litestar.exceptions import (
    HTTPException,
    NotAuthorizedException,
    ValidationException,
)
from litestar.handlers.base import BaseRouteHandler
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
from services.common.errors import ServiceError
from services.common.json_limits import check_json_depth
from services.common.logging import REQUEST_ID_HEADER, clean_request_id, get_logger
from services.common.loop_health import LoopHealth
from services.common.metrics import REQUEST_SECONDS, REQUESTS, child, render
from services.common.strict_json import decoded_body, strict_json_body

log = get_logger()

# Bodies larger than this are refused before they are parsed (413).
MAX_REQUEST_BODY_BYTES = 256 * 1024


class ErrorBody(msgspec.Struct, frozen=True, omit_defaults=True):
    error: str
    detail: str
    # What the refusal is about, by kind (see services.common.errors); absent when nothing.
    refs: dict[str, list[str]] | None = None


def error_json(code: str, detail: str) -> bytes:
    return msgspec.json.encode(ErrorBody(error=code, detail=detail))


class Health(msgspec.Struct, frozen=True):
    service: str
    version: str
    database: str


class BoundedRequest(Request[Any, Any, Any]):
    """Litestar's request, with the JSON body's nesting bounded before it is decoded: Litestar
    decodes every JSON body to `Any` (then converts it to the handler's type), where deep
    nesting is a RecursionError (services.common.json_limits)."""

    async def json(self) -> Any:
        done, value = decoded_body(self)
        if done:
            return value
        check_json_depth(await self.body())
        return await super().json()


def error_response(
    status: int, code: str, detail: str, refs: dict[str, list[str]] | None = None
) -> Response[Any]:
    return Response(
        content=ErrorBody(error=code, detail=detail, refs=refs),
        status_code=status,
        media_type=MediaType.JSON,
    )


def _service_error_handler(_: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    if not isinstance(exc, ServiceError):
        raise exc
    return error_response(exc.status, exc.code, exc.detail, exc.refs)


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


class ServiceCallerGuard:
    """The internal services' one access check, a Litestar guard on every route (default deny):
    the service credential must be valid (else 401 unauthorized), minted for this service and
    name a caller the route declares in its `opt` (`callers_opt`; else 403 forbidden, and a
    route that declares none refuses everyone). Litestar runs guards before the body is read
    or the handler runs. The header is read from the raw ASGI headers, and a credential seen
    before costs a dict lookup (`VerifiedTokens`): thousands of internal calls a second go
    through here. (A coroutine: Litestar runs a plain function guard in a worker thread.)"""

    __slots__ = ("auth_key", "secret", "service", "verified")

    def __init__(self, service: str, settings: Settings) -> None:
        self.service = service
        self.secret = settings.internal_secret
        self.auth_key = AUTH_HEADER.lower().encode()
        self.verified = VerifiedTokens()

    async def __call__(
        self, connection: ASGIConnection[Any, Any, Any, Any], route: BaseRouteHandler
    ) -> None:
        scope = connection.scope
        path = scope.get("path", "")
        if path in _UNGUARDED_PATHS:
            return
        auth = None
        for key, value in scope.get("headers", ()):
            if key == self.auth_key:
                auth = value.decode("latin-1")
                break
        template = str(scope.get("path_template") or path)
        try:
            token = self.verified.token(self.secret, auth)
            check_audience(token, self.service)
            check_caller(token.caller, declared_callers(route.opt), template)
        except AuthError as exc:
            raise ServiceError(401, "unauthorized", str(exc)) from None
        except Forbidden as exc:
            raise ServiceError(403, "forbidden", str(exc)) from None
        scope.setdefault("state", {})["caller"] = token.caller


class RequestLog:
    """What the service does around every request: the request id, the request's metrics and
    its log line."""

    __slots__ = ("log_requests", "request_id_key", "service")

    def __init__(self, service: str) -> None:
        self.service = service
        self.request_id_key = REQUEST_ID_HEADER.lower().encode()
        # The request line is a debug line: below that level it is not even built. (Logging is
        # configured before the app is made: `mesa serve`.)
        self.log_requests = bool(log.is_enabled_for(logging.DEBUG))

    def request_id(self, headers: Iterable[tuple[bytes, bytes]]) -> str:
        """The caller's request id if well formed, else a new one."""
        for key, value in headers:
            if key == self.request_id_key:
                return clean_request_id(value.decode("latin-1"))
        return clean_request_id(None)

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


def service_middleware(requests: RequestLog) -> Callable[[ASGIApp], ASGIApp]:
    """Request ids, logging and metrics. Litestar runs this middleware after routing, so the
    route's template is in the scope for the metrics."""

    def middleware_for(app: ASGIApp) -> ASGIApp:
        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] not in ("http", "websocket"):
                await app(scope, receive, send)
                return
            request_id = requests.request_id(scope.get("headers", []))
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
                    requests.answered(method, scope.get("path", ""), status_holder[0], started)
                await send(message)

            try:
                if "\x00" in scope.get("path", ""):
                    # No route has one; a NUL reaching a file lookup (the page's static files)
                    # is a ValueError there.
                    await _refuse(scope, send_with_id, "no such path", 404)
                    return
                await app(scope, receive, send_with_id)
            finally:
                elapsed_s = time.perf_counter() - started
                route = scope.get("path_template") or "unmatched"
                requests.finished(method, route, status_holder[0], elapsed_s)
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
    body = error_json(code, detail)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


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

    middleware = service_middleware(RequestLog(service))
    if not public:
        litestar_kwargs["guards"] = [
            ServiceCallerGuard(service, settings),
            *litestar_kwargs.get("guards", ()),
        ]
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
    return app
