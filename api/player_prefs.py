"""A player's seating choice: "seat me only with random opponents" (issue 29), kept in his
settings row (`gateway.play_settings`, with his reminders and cool-off).

With it on, `api.eligibility.check_may_sit` refuses him every seat he or someone else chose
(a private table, a code, an invitation: `random_only`), and his quick joins ask matchmaking
for an unlisted seat, so his table is never offered in the lobby's list for someone to pick.
Only the quick-join queue seats him. A friend cannot steer him to a chosen table.
"""

from __future__ import annotations

from typing import Any

import msgspec
import sqlalchemy as sa
from litestar import Request, get, put
from litestar.params import JSONBody
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from api.guards import CurrentUser, GuardedController, requires_role
from api.openapi_errors import READ_ERRORS, WRITE_ERRORS
from api.schema import play_settings


class Preferences(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    random_opponents_only: bool


async def random_only(db: AsyncEngine, player_id: str) -> bool:
    """Whether the player sits only with random opponents (off when never set)."""
    async with db.connect() as conn:
        found = (
            await conn.execute(
                sa.select(play_settings.c.random_opponents_only).where(
                    play_settings.c.player == player_id
                )
            )
        ).scalar_one_or_none()
    return bool(found)


async def set_random_only(db: AsyncEngine, player_id: str, on: bool) -> None:
    statement = insert(play_settings).values(player=player_id, random_opponents_only=on)
    statement = statement.on_conflict_do_update(
        index_elements=[play_settings.c.player],
        set_={"random_opponents_only": on, "updated_at": sa.func.now()},
    )
    async with db.begin() as conn:
        await conn.execute(statement)


class PreferencesController(GuardedController):
    """The signed-in player's own seating choice."""

    guards = [requires_role("player")]

    @get("/api/preferences", tags=["player"], responses=READ_ERRORS)
    async def read_preferences(
        self, user: CurrentUser, request: Request[Any, Any, Any]
    ) -> Preferences:
        return Preferences(random_opponents_only=await random_only(request.app.state.db, user.id))

    @put("/api/preferences", tags=["player"], responses=WRITE_ERRORS)
    async def write_preferences(
        self, user: CurrentUser, request: Request[Any, Any, Any], data: JSONBody[Preferences]
    ) -> Preferences:
        """Turn "seat me only with random opponents" on or off; it counts from the next seat
        (a table he already sits at keeps him)."""
        await set_random_only(request.app.state.db, user.id, data.random_opponents_only)
        return data


ROUTES = [PreferencesController]
