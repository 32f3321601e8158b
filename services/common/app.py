"""One factory for every service's ASGI app: health, request ids, auth, errors, database.

Internal services get a guard on every route but `/health`: a call without a valid service
credential is refused with 401. The public gateway passes `public=True` and brings its own
authentication.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Awaitable, Callable, Sequence
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
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from sqlalchemy.ext.asyncio import AsyncEngine
from structlog.contextvars import bind_contextvars, reset_contextvars

from services.common.auth import AUTH_HEADER, AuthError, VerifiedTokens
from services.common.config import VERSION, Settings
from services.common.db import check_database, create_engine
from services.common.errors import ServiceError
from services.common.logging import REQUEST_ID_HEADER, clean_request_id, get_logger
from services.common.metrics import REQUEST_SECONDS, REQUESTS, render

log = get_logger()

# Bodies larger than this are refused before they are parsed (413).
MAX_REQUEST_BODY_BYTES = 256 * 1024


class Health(msgspec.Struct, frozen=True):
    service: str
    version: str
    database: str


class ErrorBody(msgspec.Struct, frozen=True):
    error: str
    detail: str


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


def request_id_middleware(app: ASGIApp) -> ASGIApp:
    """Accept or create `X-Request-ID`, bind it for logging, echo it, log and count requests."""
    header_key = REQUEST_ID_HEADER.lower().encode()

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await app(scope, receive, send)
            return
        raw = None
        for key, value in scope.get("headers", []):
            if key == header_key:
                raw = value.decode("latin-1")
                break
        request_id = clean_request_id(raw)
        tokens = bind_contextvars(request_id=request_id)
        scope.setdefault("state", {})["request_id"] = request_id
        started = time.perf_counter()
        status_holder = [0]

        method = scope.get("method", "WS")

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                status_holder[0] = message["status"]
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", request_id.encode()))
                message = {**message, "headers": headers}  # type: ignore[assignment]
                # Logged before the response leaves, so a client that has its answer can
                # rely on the line being written (duration: until the response starts).
                log.debug(
                    "request",
                    method=method,
                    path=scope.get("path", ""),
                    status=status_holder[0],
                    duration_ms=round((time.perf_counter() - started) * 1000, 2),
                )
            await send(message)

        try:
            await app(scope, receive, send_with_id)
        finally:
            elapsed_s = time.perf_counter() - started
            route = scope.get("path_template") or "unmatched"
            service = scope["app"].state.get("service", "unknown") if "app" in scope else "unknown"
            REQUESTS.labels(service, method, route, f"{status_holder[0] // 100}xx").inc()
            REQUEST_SECONDS.labels(service, route).observe(elapsed_s)
            if scope["type"] == "websocket":
                log.debug(
                    "websocket_closed",
                    path=scope.get("path", ""),
                    duration_ms=round(elapsed_s * 1000, 2),
                )
            reset_contextvars(**tokens)

    return middleware


_UNGUARDED_PATHS = frozenset({"/health", "/metrics"})
_VERIFIED = VerifiedTokens()


async def internal_auth_guard(
    connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler
) -> None:
    # async on purpose: Litestar runs a sync guard in a worker thread, one thread hop per
    # request; the HMAC check is a few microseconds and never blocks.
    if connection.scope.get("path") in _UNGUARDED_PATHS:
        return
    settings: Settings = connection.app.state.settings
    try:
        caller = _VERIFIED.caller(settings.internal_secret, connection.headers.get(AUTH_HEADER))
    except AuthError as exc:
        raise NotAuthorizedException(detail=str(exc)) from None
    connection.scope.setdefault("state", {})["caller"] = caller


def make_health_handler(service: str) -> Any:
    @get("/health", include_in_schema=False)
    async def health(state: State) -> Response[Health]:
        engine: AsyncEngine | None = state.get("db")
        ok = engine is not None and await check_database(engine)
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


def freeze_startup_heap() -> None:
    """Move every object alive after startup (modules, classes, routes, pools: a few hundred
    thousand) out of the collector's reach. A full collection walks every tracked object and
    stalls the event loop meanwhile (tens of ms with the startup heap, paid by every request in
    flight); objects that live for the whole process never become garbage, so scanning them is
    pure cost. Objects created later are collected as usual."""
    gc.collect()
    gc.freeze()


def create_service_app(
    service: str,
    settings: Settings,
    route_handlers: Sequence[Any],
    *,
    public: bool = False,
    on_startup: Sequence[LifespanHook] = (),
    on_shutdown: Sequence[LifespanHook] = (),
    pool_size: int = 10,
    **litestar_kwargs: Any,
) -> Litestar:
    async def open_db(app: Litestar) -> None:
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
        engine: AsyncEngine | None = app.state.get("db")
        if engine is not None:
            await engine.dispose()

    return Litestar(
        route_handlers=[make_health_handler(service), metrics_handler, *route_handlers],
        state=State({"settings": settings, "service": service, "public": public}),
        guards=[] if public else [internal_auth_guard],
        exception_handlers=EXCEPTION_HANDLERS,
        middleware=[request_id_middleware],
        on_startup=[open_db, *on_startup, freeze_heap],
        on_shutdown=[*on_shutdown, close_db],
        request_max_body_size=MAX_REQUEST_BODY_BYTES,
        logging_config=None,
        **litestar_kwargs,
    )
