"""The staff audit log: who did what to whom, when and why, for every staff action.

Every route by which support, finance, compliance or an admin changes something (an account,
money, a closed day, an alert) writes one row here with `record`, in the same transaction as
the change when the change is the gateway's own, or right after the owning service accepted it
(the service's idempotency key goes into `detail`, so a replayed request is visible as such).
The table is append-only: `mesa_app` may only insert and read, and a trigger refuses any
update, delete or truncate. Admins and auditors read it (`GET /api/staff/audit`).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

import msgspec
import sqlalchemy as sa
from litestar import Request, get
from litestar.params import Parameter
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from api.accounts import User
from api.guards import GuardedController, requires_role
from api.openapi_errors import READ_ERRORS
from api.schema import staff_actions

ACTION_RE = re.compile(r"^[a-z][a-z0-9_.]{0,63}$")
MAX_REASON = 1000
MAX_SUBJECT = 200
MAX_DETAIL_BYTES = 16_000
MAX_PAGE = 200

# A staff action's reason as the routes take it (one per request, shown to auditors).
Reason = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_REASON)]


class StaffAction(msgspec.Struct, frozen=True):
    id: int
    at: datetime
    actor: str
    actor_role: str
    action: str
    subject: str
    reason: str
    detail: dict[str, Any]


class StaffActionPage(msgspec.Struct, frozen=True):
    actions: list[StaffAction]
    # The `before` of the next (older) page; null on the last.
    next: int | None


def _checked(action: str, subject: str, reason: str, detail: dict[str, Any]) -> bytes:
    if ACTION_RE.match(action) is None:
        raise ValueError(f"bad staff action name {action!r}")
    if not 1 <= len(subject) <= MAX_SUBJECT:
        raise ValueError("a staff action names its subject (1..200 characters)")
    if not reason.strip() or len(reason) > MAX_REASON:
        raise ValueError("a staff action gives its reason (1..1000 characters)")
    encoded = msgspec.json.encode(detail)
    if len(encoded) > MAX_DETAIL_BYTES:
        raise ValueError("a staff action's detail is at most 16 KB")
    return encoded


async def record(
    db: AsyncEngine | AsyncConnection,
    actor: User,
    action: str,
    subject: str,
    reason: str,
    detail: dict[str, Any] | None = None,
) -> int:
    """Append one staff action; its id. On a connection, it commits with that transaction.

    `action` is a dotted code (`admin.lock`, `finance.deposit`), `subject` what it acted on
    (`user:bob`, `day:2026-12-01`, `alert:17`), `reason` the staff member's words.
    """
    payload = msgspec.json.decode(_checked(action, subject, reason, detail or {}))
    statement = (
        sa.insert(staff_actions)
        .values(
            actor=actor.id,
            actor_role=actor.role,
            action=action,
            subject=subject,
            reason=reason.strip(),
            detail=payload,
        )
        .returning(staff_actions.c.id)
    )
    if isinstance(db, AsyncConnection):
        return int((await db.execute(statement)).scalar_one())
    async with db.begin() as conn:
        return int((await conn.execute(statement)).scalar_one())


async def read(
    db: AsyncEngine,
    *,
    before: int | None = None,
    limit: int = MAX_PAGE,
    actor: str | None = None,
    subject: str | None = None,
    action: str | None = None,
) -> StaffActionPage:
    """Newest first, a page at a time, optionally for one actor, subject or action."""
    limit = max(1, min(limit, MAX_PAGE))
    query = sa.select(staff_actions).order_by(staff_actions.c.id.desc()).limit(limit + 1)
    if before is not None:
        query = query.where(staff_actions.c.id < before)
    if actor:
        query = query.where(staff_actions.c.actor == actor)
    if subject:
        query = query.where(staff_actions.c.subject == subject)
    if action:
        query = query.where(staff_actions.c.action == action)
    async with db.connect() as conn:
        rows = (await conn.execute(query)).mappings().all()
    page = [StaffAction(**dict(row)) for row in rows[:limit]]
    more = len(rows) > limit
    return StaffActionPage(actions=page, next=page[-1].id if more and page else None)


Filter = Annotated[str | None, Parameter(max_length=MAX_SUBJECT)]


class StaffAuditController(GuardedController):
    """The staff audit log: admins and auditors read it; nobody edits it."""

    guards = [requires_role("admin", "auditor")]

    @get("/api/staff/audit", tags=["staff"], responses=READ_ERRORS)
    async def staff_audit(
        self,
        request: Request[Any, Any, Any],
        before: Annotated[int | None, Parameter(ge=1, le=2**62)] = None,
        limit: Annotated[int, Parameter(ge=1, le=MAX_PAGE)] = 100,
        actor: Filter = None,
        subject: Filter = None,
        action: Filter = None,
    ) -> StaffActionPage:
        """Staff actions, newest first; `next` is the `before` of the next page."""
        return await read(
            request.app.state.db,
            before=before,
            limit=limit,
            actor=actor,
            subject=subject,
            action=action,
        )


ROUTES = [StaffAuditController]
