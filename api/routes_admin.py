"""Admin: accounts and roles (create staff, lock, unlock, change a role). Nothing else."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from litestar import Request, get, patch, post
from litestar.params import FromPath, JSONBody, Parameter
from sqlalchemy.ext.asyncio import AsyncConnection

from api import accounts, staff_audit
from api.feed import MatchFeed
from api.guards import CurrentSession, GuardedController, requires_role
from api.openapi_errors import READ_ERRORS, WRITE_ERRORS
from api.routes_auth import Me, me_of
from api.routes_money import open_wallet_at_sign_up
from api.schema import Role
from api.staff_audit import Reason
from services.common.errors import ServiceError

Username = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9_.-]{3,32}$")]


class CreateUser(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    username: Username
    password: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    role: Role
    display_name: Annotated[str, msgspec.Meta(max_length=40, pattern=r"^[^\x00-\x1f<>&\"']*$")] = ""
    reason: Reason = "new account"


class UpdateUser(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    role: Role | None = None
    status: Literal["active", "locked"] | None = None
    # Why: kept in the staff audit log with who and when.
    reason: Reason


class AdminController(GuardedController):
    """Accounts and roles: admins only."""

    guards = [requires_role("admin")]

    @get("/api/admin/users", tags=["admin"], responses=READ_ERRORS)
    async def list_users(
        self,
        request: Request[Any, Any, Any],
        after: Annotated[str, Parameter(pattern=r"^[a-z0-9_.-]{0,32}$")] = "",
        limit: Annotated[int, Parameter(ge=1, le=200)] = 100,
    ) -> list[Me]:
        return [me_of(u) for u in await accounts.list_users(request.app.state.db, limit, after)]

    @post("/api/admin/users", status_code=201, tags=["admin"], responses=WRITE_ERRORS)
    async def create_user(
        self, session: CurrentSession, request: Request[Any, Any, Any], data: JSONBody[CreateUser]
    ) -> Me:
        try:
            user = await accounts.create_user(
                request.app.state.db, data.username, data.password, data.role, data.display_name
            )
        except accounts.AccountError as exc:
            raise ServiceError(
                409 if exc.code == "username_taken" else 400, exc.code, exc.detail
            ) from None
        await staff_audit.record(
            request.app.state.db,
            session.user,
            "admin.create_user",
            f"user:{user.id}",
            data.reason,
            {"role": user.role},
        )
        if user.role == "player":
            await open_wallet_at_sign_up(request.app.state, user.id)
        return me_of(user)

    @patch("/api/admin/users/{user_id:str}", tags=["admin"], responses=WRITE_ERRORS)
    async def update_user(
        self,
        session: CurrentSession,
        request: Request[Any, Any, Any],
        user_id: FromPath[str],
        data: JSONBody[UpdateUser],
    ) -> Me:
        """Change a role, lock (signs the user out everywhere) or unlock."""
        if user_id == session.user.id:
            raise ServiceError(409, "not_yourself", "an admin cannot change their own account")
        if accounts.USER_ID_RE.match(user_id) is None:
            raise ServiceError(400, "invalid_request", "bad user name")
        changes = {k: v for k, v in (("role", data.role), ("status", data.status)) if v}

        async def audit(conn: AsyncConnection, changed: accounts.User) -> None:
            await staff_audit.record(
                conn, session.user, "admin.update_user", f"user:{changed.id}", data.reason, changes
            )

        try:
            user = await accounts.update_user(
                request.app.state.db, user_id, role=data.role, status=data.status, then=audit
            )
        except accounts.AccountError as exc:
            raise ServiceError(404, exc.code, exc.detail) from None
        if data.status == "locked":
            feed: MatchFeed = request.app.state.feed
            await feed.announce_session_ended(request.app.state.db, user.id)
        return me_of(user)


ROUTES = [AdminController]
