"""Partner invitations: list yours, accept or decline one sent to you, cancel one you sent.

Accepting is the partner's consent, given in his own session: only then does the gateway check
both players again (`check_may_sit`) and ask matchmaking for the paired join (the inviter as
`player_id`, the invitee as `partner_id`), which seats them across and holds both stakes or
neither. The join's idempotency key is the invitation's, so accepting again (after a 503, or
a double click) replays it instead of seating twice.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Request, get, post
from litestar.params import Parameter

from api import invitations
from api.accounts import User
from api.backends import get_backends
from api.guards import CurrentSession, CurrentUser, GuardedController, requires_role
from api.invitations import Invitation
from api.openapi_errors import READ_ERRORS, WRITE_ERRORS
from api.routes_lobby import InvitationOut, TableOut, invitation_out, joined, may_sit
from services.common.errors import ServiceError
from services.common.logging import get_logger
from services.matchmaking.contract import CreatePrivate, JoinByCode, QuickJoin

log = get_logger()

InvitationId = Annotated[int, Parameter(ge=1, le=invitations.MAX_ID)]


class InvitationList(msgspec.Struct, frozen=True):
    """Your pending invitations: sent to you (accept or decline) and sent by you (cancel)."""

    incoming: list[InvitationOut]
    outgoing: list[InvitationOut]


class Accepted(msgspec.Struct, frozen=True):
    invitation: InvitationOut
    table: TableOut


def _closed(inv: Invitation) -> ServiceError:
    if inv.expired or inv.status == "expired":
        return ServiceError(409, "invitation_expired", "that invitation has expired")
    return ServiceError(409, "invitation_closed", f"that invitation is {inv.status}")


async def _seat_pair(request: Request[Any, Any, Any], inv: Invitation, me: str) -> TableOut:
    """The paired join an accepted invitation stands for; its outcome is recorded on it."""
    key = f"gw-inv-{inv.id}"
    body: QuickJoin | CreatePrivate | JoinByCode
    if inv.op == "code" and inv.invite_code is not None:
        path = "/v1/join/code"
        body = JoinByCode(
            idempotency_key=key,
            player_id=inv.inviter,
            invite_code=inv.invite_code,
            partner_id=inv.invitee,
        )
    elif inv.op in ("quick", "private") and inv.kind is not None and inv.tier is not None:
        path = "/v1/join/quick" if inv.op == "quick" else "/v1/tables/private"
        body_type = QuickJoin if inv.op == "quick" else CreatePrivate
        body = body_type(
            idempotency_key=key,
            player_id=inv.inviter,
            kind=inv.kind,
            tier=inv.tier,  # type: ignore[arg-type]  # the table's CHECK keeps it a Tier
            partner_id=inv.invitee,
        )
    else:
        raise ValueError(f"invitation {inv.id} has no join to stand for")
    db = request.app.state.db
    try:
        table = await joined(request, path, body, me)
    except ServiceError as exc:
        if exc.status < 500:
            await invitations.record_outcome(db, inv.id, table_id=None, failure=exc.code[:64])
            log.info("invitation_join_refused", invitation_id=inv.id, code=exc.code)
        raise
    await invitations.record_outcome(db, inv.id, table_id=table.table_id, failure=None)
    return table


async def _decide(
    request: Request[Any, Any, Any],
    user: User,
    invitation_id: int,
    to: invitations.InvitationStatus,
) -> InvitationOut:
    me = user.id
    db = request.app.state.db
    inv = await invitations.get_for(db, invitation_id, me)
    if to == "declined" and inv.invitee != me:
        raise ServiceError(403, "not_invitee", "only the invited player may decline")
    if to == "cancelled" and inv.inviter != me:
        raise ServiceError(403, "not_inviter", "only the player who sent it may cancel")
    done = await invitations.transition(
        db,
        inv.id,
        to=to,
        by_invitee=me if to == "declined" else None,
        by_inviter=me if to == "cancelled" else None,
    )
    if done is None:
        if inv.status == "pending" and inv.expired:
            await invitations.expire_due(db, me)
        raise _closed(await invitations.get_for(db, invitation_id, me))
    log.info("invitation_" + to, invitation_id=inv.id, by=me)
    return invitation_out(done)


class InvitationController(GuardedController):
    """Partner invitations: players only."""

    guards = [requires_role("player")]

    @get("/api/invitations", tags=["lobby"], responses=READ_ERRORS)
    async def my_invitations(
        self, user: CurrentUser, request: Request[Any, Any, Any]
    ) -> InvitationList:
        """Pending invitations sent to you and by you (expired ones are dropped)."""
        incoming, outgoing = await invitations.pending_of(request.app.state.db, user.id)
        return InvitationList(
            incoming=[invitation_out(i) for i in incoming],
            outgoing=[invitation_out(i) for i in outgoing],
        )

    @get("/api/invitations/{invitation_id:int}", tags=["lobby"], responses=READ_ERRORS)
    async def invitation_status(
        self, user: CurrentUser, request: Request[Any, Any, Any], invitation_id: InvitationId
    ) -> InvitationOut:
        """One invitation you sent or received (its outcome once decided)."""
        inv = await invitations.get_for(request.app.state.db, invitation_id, user.id)
        return invitation_out(inv)

    @post(
        "/api/invitations/{invitation_id:int}/accept",
        status_code=200,
        tags=["lobby"],
        responses=WRITE_ERRORS,
    )
    async def accept(
        self, session: CurrentSession, request: Request[Any, Any, Any], invitation_id: InvitationId
    ) -> Accepted:
        """Accept an invitation sent to you: both of you are checked, then seated across."""
        me = session.user
        db = request.app.state.db
        get_backends(request.app.state)  # 503 before any change while the gateway is starting
        inv = await invitations.get_for(db, invitation_id, me.id)
        if inv.invitee != me.id:
            raise ServiceError(403, "not_invitee", "only the invited player may accept")
        if inv.status == "pending" and inv.expired:
            await invitations.expire_due(db, me.id)
            raise _closed(inv)
        if inv.status not in ("pending", "accepted"):
            raise _closed(inv)
        if inv.status == "pending" or inv.table_id is None:
            # Both players, now: the invitee in his own session, the inviter by his invitation.
            await may_sit(request, me.id, me, inv.kind, inv.tier, invitation=inv)
            await may_sit(request, inv.inviter, me, inv.kind, inv.tier, invitation=inv)
        if inv.status == "pending":
            claimed = await invitations.transition(db, inv.id, to="accepted", by_invitee=me.id)
            if claimed is None:
                now = await invitations.get_for(db, invitation_id, me.id)
                if now.status != "accepted":
                    raise _closed(now)
                claimed = now
            inv = claimed
            log.info(
                "invitation_accepted", invitation_id=inv.id, inviter=inv.inviter, invitee=me.id
            )
        table = await _seat_pair(request, inv, me.id)
        final = await invitations.get_for(db, invitation_id, me.id)
        return Accepted(invitation=invitation_out(final), table=table)

    @post(
        "/api/invitations/{invitation_id:int}/decline",
        status_code=200,
        tags=["lobby"],
        responses=WRITE_ERRORS,
    )
    async def decline(
        self, user: CurrentUser, request: Request[Any, Any, Any], invitation_id: InvitationId
    ) -> InvitationOut:
        """Decline an invitation sent to you (nothing was held or seated for you)."""
        return await _decide(request, user, invitation_id, "declined")

    @post(
        "/api/invitations/{invitation_id:int}/cancel",
        status_code=200,
        tags=["lobby"],
        responses=WRITE_ERRORS,
    )
    async def cancel(
        self, user: CurrentUser, request: Request[Any, Any, Any], invitation_id: InvitationId
    ) -> InvitationOut:
        """Cancel an invitation you sent while it is pending."""
        return await _decide(request, user, invitation_id, "cancelled")


ROUTES = [InvitationController]
