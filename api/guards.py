"""Who may call a gateway route: Litestar guards on the controllers, the caller by injection.

Every route is either guarded or marked public on purpose (`PUBLIC`, or `CHECKED_AT_CONNECT`
for the table WebSocket, which must accept before it can close with a reason): a test walks
the app's routes and fails on any other (tests/api/test_guards.py).

- `signed_in`: any session; `requires_role("player", ...)`: a session with one of the roles.
  Both answer 401 `unauthorized` when signed out and check the CSRF token of a cookie session
  on unsafe methods (403 `csrf_failed`); a role guard answers 403 `forbidden` to other roles.
- Handlers take the caller as `session: Session` or `user: User` (`DEPENDENCIES`). The session
  is looked up once per request (`api.security.session_of`), so the guard and the handler
  share one database round trip and one count against the caller's request rate.
"""

from __future__ import annotations

from typing import Any, TypeAlias

from litestar import Controller
from litestar.connection import ASGIConnection
from litestar.di import NamedDependency, Provide
from litestar.handlers.base import BaseRouteHandler
from litestar.openapi.spec import Components, SecurityRequirement, SecurityScheme
from litestar.params import SkipValidation
from litestar.types import Guard

from api import schema
from api.accounts import Session, User
from api.security import SESSION_COOKIE, check_csrf, session_of
from services.common.errors import ServiceError

# A route's `opt` key saying who may call it without a guard, and why.
ACCESS_OPT = "access"
PUBLIC: dict[str, Any] = {ACCESS_OPT: "public"}
# The table WebSocket checks the caller itself at connect (`authorize`), after accepting, so
# it can close with code 1008 and a reason the page shows.
CHECKED_AT_CONNECT: dict[str, Any] = {ACCESS_OPT: "checked_at_connect"}
ROLES = frozenset(schema.ROLES)


async def authorize(
    connection: ASGIConnection[Any, Any, Any, Any], roles: frozenset[str]
) -> Session:
    """The caller's session if it has one of `roles` (any role when empty); 401 when signed
    out, 403 for another role or a cookie session's unsafe request without its CSRF token."""
    session = await session_of(connection)
    if session is None:
        raise ServiceError(401, "unauthorized", "sign in first")
    check_csrf(connection, session)
    if roles and session.user.role not in roles:
        raise ServiceError(403, "forbidden", "your role may not do this")
    return session


async def signed_in(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Guard: any signed-in caller."""
    await authorize(connection, frozenset())


def requires_role(*roles: str) -> Guard:
    """Guard: a signed-in caller with one of `roles`."""
    allowed = frozenset(roles)
    if not allowed or not allowed <= ROLES:
        raise ValueError(f"a role guard names one or more of {sorted(ROLES)}, not {roles}")

    async def role_guard(
        connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler
    ) -> None:
        await authorize(connection, allowed)

    role_guard.__qualname__ = f"requires_role({', '.join(sorted(allowed))})"
    return role_guard


async def provide_session(request: ASGIConnection[Any, Any, Any, Any]) -> Session:
    """The guarded caller's session (already looked up and checked by the route's guard)."""
    session = await session_of(request)
    if session is None:
        # Only a handler without a guard can get here: refuse rather than serve anonymously.
        raise ServiceError(401, "unauthorized", "sign in first")
    return session


async def provide_user(session: CurrentSession) -> User:
    return session.user


# A handler's parameter types for the injected caller (already checked by the guard).
CurrentSession: TypeAlias = NamedDependency[SkipValidation[Session]]
CurrentUser: TypeAlias = NamedDependency[SkipValidation[User]]

DEPENDENCIES = {
    "session": Provide(provide_session),
    "user": Provide(provide_user),
}

# OpenAPI: the page's cookie session (with its CSRF header on changes), or a bearer token.
SECURITY_SCHEMES: dict[str, SecurityScheme] = {
    "bearer": SecurityScheme(
        type="http",
        scheme="bearer",
        description="A token from POST /api/auth/tokens.",
    ),
    "session_cookie": SecurityScheme(
        type="apiKey",
        name=SESSION_COOKIE,
        security_scheme_in="cookie",
        description="The page's session, set by POST /api/auth/login.",
    ),
    "csrf_header": SecurityScheme(
        type="apiKey",
        name="X-CSRF-Token",
        security_scheme_in="header",
        description="With a cookie session, on POST/PUT/PATCH/DELETE: the mesa_csrf cookie.",
    ),
}
COMPONENTS = Components(security_schemes=dict(SECURITY_SCHEMES))
SIGNED_IN_SECURITY: list[SecurityRequirement] = [
    {"bearer": []},
    {"session_cookie": [], "csrf_header": []},
]


class GuardedController(Controller):
    """A controller whose routes need a signed-in caller (subclasses set `guards`), which
    they take as `session: CurrentSession` or `user: CurrentUser`."""

    dependencies = DEPENDENCIES
    security = SIGNED_IN_SECURITY
