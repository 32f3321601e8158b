"""The engine service's internal API: the Structs its callers (matchmaking, gateway) import.

Routes (all under the service credential):
- POST /internal/matches                          CreateMatch -> MatchCreated (idempotent on match_id)
- POST /internal/matches/{match_id}/actions       SubmitAction -> ActionAccepted (409 stale_seq)
- GET  /internal/matches/{match_id}                -> PublicMatchState
- GET  /internal/matches/{match_id}/seats/{seat}/view -> SeatSnapshot
- GET  /internal/matches/{match_id}/seats/{seat}/events?after=SEQ -> EventPage
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

StakeTier = Literal["free", "10", "20", "40", "80"]


class SeatSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    seat: int
    player_id: str | None = None
    # A CPU player from the start (free tables only).
    bot: bool = False
    # The ledger hold behind this seat at a paid table (kept for settlement and refunds).
    hold_id: str | None = None


class CreateMatch(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    match_id: str
    variant: str
    options: dict[str, Any]
    seats: list[SeatSpec]
    tier: StakeTier = "free"
    stake_cents: int = 0
    currency: str = "USD"
    table_id: str | None = None


class MatchCreated(msgspec.Struct, frozen=True):
    match_id: str
    seq: int
    status: str
