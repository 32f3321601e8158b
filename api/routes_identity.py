"""A player's own verification status: may he play for money here and now, and if not, why."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, get

from api.backends import get_backends
from api.guards import CurrentUser, GuardedController, requires_role
from api.identity import DETAILS
from api.openapi_errors import READ_ERRORS
from api.security import client_address


class Verification(msgspec.Struct, frozen=True):
    """`reason` is the refusal paid seats and the cashier would give now (null: none)."""

    may_play_paid: bool
    reason: str | None
    detail: str | None


class VerificationController(GuardedController):
    """Identity and place, as the player himself sees them: players only."""

    guards = [requires_role("player")]

    @get("/api/me/verification", tags=["player"], responses=READ_ERRORS)
    async def my_verification(
        self, user: CurrentUser, request: Request[Any, Any, Any]
    ) -> Verification:
        """Whether you may play for money from where you are, and what to do if not."""
        gate = get_backends(request.app.state).place
        reason = await gate.paid_play_refusal(
            request.app.state.db, user.id, client_address(request)
        )
        return Verification(
            may_play_paid=reason is None,
            reason=reason,
            detail=None if reason is None else DETAILS.get(reason, reason),
        )


ROUTES = [VerificationController]
