"""Sign up, sign in (cookie session or bearer token), sign out, who am I, self-exclusion."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import msgspec
from litestar import Controller, Request, Response, get, post
from litestar.datastructures import Cookie
from litestar.params import JSONBody
from sqlalchemy.ext.asyncio import AsyncEngine

from api import accounts
from api.feed import MatchFeed
from api.guards import (
    PUBLIC,
    CurrentSession,
    CurrentUser,
    GuardedController,
    requires_role,
    signed_in,
)
from api.integrity import device_cookie
from api.openapi_errors import READ_ERRORS, WRITE_ERRORS
from api.routes_money import open_wallet_at_sign_up
from api.security import (
    CSRF_COOKIE,
    SESSION_COOKIE,
    SignInLimits,
    client_address,
    sign_in_request_guard,
)
from services.common.config import Settings
from services.common.errors import ServiceError

Username = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.-]{3,32}$")]
Password = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
DisplayName = Annotated[str, msgspec.Meta(max_length=40, pattern=r"^[^\x00-\x1f<>&\"']*$")]
Label = Annotated[str, msgspec.Meta(max_length=64, pattern=r"^[A-Za-z0-9 _.-]*$")]


class RegisterRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    username: Username
    password: Password
    display_name: DisplayName = ""


class LoginRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    username: Username
    password: Password


class TokenRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    username: Username
    password: Password
    label: Label = ""


class SelfExcludeRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    days: Annotated[int, msgspec.Meta(ge=1, le=3650)]


class Me(msgspec.Struct, frozen=True):
    id: str
    display_name: str
    role: str
    status: str
    excluded_until: datetime | None
    may_play_paid: bool


class SignedIn(msgspec.Struct, frozen=True):
    user: Me
    csrf_token: str


class TokenOut(msgspec.Struct, frozen=True):
    token: str
    token_type: str
    expires_at: datetime


class Ok(msgspec.Struct, frozen=True):
    ok: bool = True


def me_of(user: accounts.User) -> Me:
    return Me(
        id=user.id,
        display_name=user.display_name,
        role=user.role,
        status=user.status,
        excluded_until=user.excluded_until,
        may_play_paid=user.role == "player" and user.may_play_paid(),
    )


def _cookies(settings: Settings, token: str, csrf: str, max_age: int) -> list[Cookie]:
    secure = settings.env == "production"
    return [
        Cookie(
            key=SESSION_COOKIE,
            value=token,
            httponly=True,
            samesite="strict",
            secure=secure,
            path="/",
            max_age=max_age,
        ),
        Cookie(
            key=CSRF_COOKIE,
            value=csrf,
            httponly=False,
            samesite="strict",
            secure=secure,
            path="/",
            max_age=max_age,
        ),
    ]


async def _signed_in(request: Request[Any, Any, Any], user: accounts.User) -> Response[SignedIn]:
    db: AsyncEngine = request.app.state.db
    token, csrf, expires = await accounts.open_session(db, user, "cookie")
    max_age = int((expires - datetime.now(UTC)).total_seconds())
    cookies = _cookies(request.app.state.settings, token, csrf, max_age)
    device = device_cookie(request.app.state.settings, dict(request.cookies))
    return Response(
        SignedIn(user=me_of(user), csrf_token=csrf),
        cookies=cookies if device is None else [*cookies, device],
    )


def _feed(request: Request[Any, Any, Any]) -> MatchFeed:
    feed: MatchFeed = request.app.state.feed
    return feed


def _limits(request: Request[Any, Any, Any]) -> SignInLimits:
    limits: SignInLimits = request.app.state.sign_in_limits
    return limits


async def _authenticate(request: Request[Any, Any, Any], username: str, password: str) -> Any:
    name = username.lower()
    address = client_address(request)
    limits = _limits(request)
    limits.check(name, address)
    user = await accounts.authenticate(request.app.state.db, name, password)
    if user is None:
        limits.failed(name, address)
        raise ServiceError(401, "bad_credentials", "wrong user name or password")
    if user.status == "locked":
        raise ServiceError(403, "account_locked", "this account is locked")
    limits.succeeded(name, address)
    return user


class AuthController(Controller):
    """Sign up and sign in: public on purpose, same-origin JSON only (no login CSRF)."""

    opt = PUBLIC
    guards = [sign_in_request_guard]

    @post(
        "/api/auth/register",
        status_code=201,
        tags=["auth"],
        responses=WRITE_ERRORS,
    )
    async def register(
        self, request: Request[Any, Any, Any], data: JSONBody[RegisterRequest]
    ) -> Response[SignedIn]:
        """Create a player account and sign in (cookie session)."""
        _limits(request).check(data.username.lower(), client_address(request))
        try:
            user = await accounts.create_user(
                request.app.state.db, data.username, data.password, "player", data.display_name
            )
        except accounts.AccountError as exc:
            raise ServiceError(
                409 if exc.code == "username_taken" else 400, exc.code, exc.detail
            ) from None
        await open_wallet_at_sign_up(request.app.state, user.id)
        response = await _signed_in(request, user)
        response.status_code = 201
        return response

    @post("/api/auth/login", status_code=200, tags=["auth"], responses=WRITE_ERRORS)
    async def login(
        self, request: Request[Any, Any, Any], data: JSONBody[LoginRequest]
    ) -> Response[SignedIn]:
        """Sign in for the web page: sets the HttpOnly session cookie and the CSRF cookie."""
        user = await _authenticate(request, data.username, data.password)
        return await _signed_in(request, user)

    @post(
        "/api/auth/tokens",
        status_code=201,
        tags=["auth"],
        responses=WRITE_ERRORS,
    )
    async def create_token(
        self, request: Request[Any, Any, Any], data: JSONBody[TokenRequest]
    ) -> TokenOut:
        """A bearer token for API clients (`Authorization: Bearer ...`); shown once."""
        user = await _authenticate(request, data.username, data.password)
        token, _, expires = await accounts.open_session(
            request.app.state.db, user, "bearer", data.label
        )
        return TokenOut(token=token, token_type="bearer", expires_at=expires)  # noqa: S106 (the token type name, not a password)


class SessionController(GuardedController):
    """The caller's own session, whatever the role."""

    guards = [signed_in]

    @post("/api/auth/logout", status_code=200, tags=["auth"], responses=WRITE_ERRORS)
    async def logout(
        self, session: CurrentSession, request: Request[Any, Any, Any]
    ) -> Response[Ok]:
        """End this session (or revoke this bearer token)."""
        await accounts.revoke_session(request.app.state.db, session.token_hash)
        await _feed(request).announce_session_ended(
            request.app.state.db, session.user.id, session.token_hash
        )
        return Response(
            Ok(),
            cookies=[
                Cookie(key=SESSION_COOKIE, value="", max_age=0, path="/", httponly=True),
                Cookie(key=CSRF_COOKIE, value="", max_age=0, path="/"),
            ],
        )

    @get("/api/me", tags=["auth"], responses=READ_ERRORS)
    async def whoami(self, user: CurrentUser, request: Request[Any, Any, Any]) -> Me:
        return me_of(user)


class SelfExclusionController(GuardedController):
    """Responsible gaming: players only."""

    guards = [requires_role("player")]

    @post("/api/me/self-exclusion", status_code=200, tags=["player"], responses=WRITE_ERRORS)
    async def self_exclude(
        self,
        session: CurrentSession,
        request: Request[Any, Any, Any],
        data: JSONBody[SelfExcludeRequest],
    ) -> Me:
        """Exclude yourself from paid tables for `days` days (cannot be shortened here)."""
        until = datetime.now(UTC) + timedelta(days=data.days)
        current = session.user.excluded_until
        if session.user.status == "self_excluded" and current is not None and current > until:
            until = current
        user = await accounts.update_user(
            request.app.state.db, session.user.id, status="self_excluded", excluded_until=until
        )
        # Its table sockets close: a seat at a paid table must not outlive the exclusion.
        await _feed(request).announce_session_ended(request.app.state.db, user.id)
        return me_of(user)


ROUTES = [AuthController, SessionController, SelfExclusionController]
