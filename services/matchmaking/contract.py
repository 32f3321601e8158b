"""The matchmaking service's internal API: the Structs the gateway imports.

All routes need a service credential. Writes that sit or unseat a player carry an
`idempotency_key` (scoped to `player_id`): a retry with the same key and body returns the first
result with `replayed: true`; the same key with another body is refused with 409
`idempotency_key_reused`. Money is integer cents. Times are Unix milliseconds.

    GET  /v1/kinds                          -> KindList     (offered kinds and tiers)
    GET  /v1/lobby?kind=K&tier=T            -> Lobby        (open public tables with free seats,
                                                             none `unlisted`; filters optional)
    POST /v1/join/quick      QuickJoin      -> JoinResult   (fullest waiting table, else a new one)
    POST /v1/tables/private  CreatePrivate  -> JoinResult   (new private table; `invite_code`)
    POST /v1/join/code       JoinByCode     -> JoinResult   (sit at a private table)
    POST /v1/tables/cpu      PlayVsCpu      -> JoinResult   (free table, CPUs fill the rest,
                                                             started at once)
    POST /v1/leave           Leave          -> LeaveResult  (before the start; releases the hold)
    POST /v1/heartbeat       Heartbeat      -> HeartbeatResult (keeps a reservation alive)
    POST /v1/disconnect      Heartbeat      -> HeartbeatResult (reservation expires after
                                                             `disconnect_grace_ms`)
    GET  /v1/players/{player_id}/tables     -> PlayerTables (tables where the player holds a seat)
    GET  /v1/tables/{table_id}              -> TableStatus  (includes `match_id` once started)

`partner_id` (QuickJoin, CreatePrivate, JoinByCode) seats two friends across from each other
(seats 0+2 or 1+3) at a pairs kind; both holds are placed or neither.

Errors: 4xx `{"error": code, "detail": text}`; codes:
    400 invalid_request, partner_not_pairs, partner_is_self, tier_not_offered, cpu_free_only
    404 unknown_kind, table_not_found, invite_not_found, not_seated
    409 table_full, table_started, already_seated, reservation_pending, idempotency_key_reused,
        too_many_tables
    422 insufficient_funds (or another ledger refusal code for the hold: unknown_wallet, ...)
    503 ledger_unavailable (the seat is kept pending; retry with the same key)
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

__all__ = [
    "ROUTES",
    "CreatePrivate",
    "Heartbeat",
    "HeartbeatResult",
    "JoinByCode",
    "JoinResult",
    "KindInfo",
    "KindList",
    "Leave",
    "LeaveResult",
    "Lobby",
    "LobbyTable",
    "PlayVsCpu",
    "PlayerTables",
    "QuickJoin",
    "ReservationView",
    "SeatView",
    "TableStatus",
    "TierInfo",
]

ROUTES: dict[str, str] = {
    "kinds": "GET /v1/kinds",
    "lobby": "GET /v1/lobby",
    "quick_join": "POST /v1/join/quick",
    "create_private": "POST /v1/tables/private",
    "join_by_code": "POST /v1/join/code",
    "play_vs_cpu": "POST /v1/tables/cpu",
    "leave": "POST /v1/leave",
    "heartbeat": "POST /v1/heartbeat",
    "disconnect": "POST /v1/disconnect",
    "player_tables": "GET /v1/players/{player_id}/tables",
    "table_status": "GET /v1/tables/{table_id}",
}

Tier = Literal["free", "10", "20", "40", "80"]
Key = Annotated[str, msgspec.Meta(min_length=1, max_length=100)]
PlayerId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.@:-]{1,64}$")]
KindId = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9-]{1,40}$")]
TableId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
InviteCode = Annotated[str, msgspec.Meta(pattern=r"^[A-Z0-9]{4,16}$")]

TableState = Literal["waiting", "starting", "started", "playing", "finished", "voided"]
SeatState = Literal["pending", "seated", "staked"]


class QuickJoin(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    idempotency_key: Key
    player_id: PlayerId
    kind: KindId
    tier: Tier
    partner_id: PlayerId | None = None
    # The player sits only with random opponents: the table he joins leaves the lobby's list
    # (nobody picks it there), and only other quick joins fill it.
    unlisted: bool = False


class CreatePrivate(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    idempotency_key: Key
    player_id: PlayerId
    kind: KindId
    tier: Tier
    partner_id: PlayerId | None = None


class JoinByCode(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    idempotency_key: Key
    player_id: PlayerId
    invite_code: InviteCode
    partner_id: PlayerId | None = None


class PlayVsCpu(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    idempotency_key: Key
    player_id: PlayerId
    kind: KindId


class Leave(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    idempotency_key: Key
    player_id: PlayerId
    table_id: TableId


class Heartbeat(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    player_id: PlayerId
    table_id: TableId


class TierInfo(msgspec.Struct, frozen=True):
    tier: str
    stake_cents: int


class KindInfo(msgspec.Struct, frozen=True):
    kind: str
    variant: str
    title: str
    options: dict[str, Any]
    seat_count: int
    pairs: bool
    tiers: list[TierInfo]


class KindList(msgspec.Struct, frozen=True):
    kinds: list[KindInfo]
    currency: str


class LobbyTable(msgspec.Struct, frozen=True):
    table_id: str
    kind: str
    tier: str
    stake_cents: int
    seat_count: int
    taken: int
    free_seats: list[int]


class Lobby(msgspec.Struct, frozen=True):
    tables: list[LobbyTable]


class SeatView(msgspec.Struct, frozen=True):
    seat: int
    player_id: str | None
    bot: bool = False
    state: SeatState | None = None


class TableStatus(msgspec.Struct, frozen=True, kw_only=True):
    table_id: str
    kind: str
    variant: str
    options: dict[str, Any]
    tier: str
    stake_cents: int
    currency: str
    seat_count: int
    pairs: bool
    private: bool
    vs_cpu: bool
    invite_code: str | None
    status: TableState
    seats: list[SeatView]
    match_id: str | None
    created_at_ms: int
    started_at_ms: int | None


class ReservationView(msgspec.Struct, frozen=True):
    reservation_id: str
    player_id: str
    seat: int
    expires_at_ms: int


class JoinResult(msgspec.Struct, frozen=True, kw_only=True):
    table: TableStatus
    reservations: list[ReservationView]
    replayed: bool = False


class LeaveResult(msgspec.Struct, frozen=True, kw_only=True):
    table_id: str
    player_id: str
    released: bool
    replayed: bool = False


class HeartbeatResult(msgspec.Struct, frozen=True):
    table_id: str
    player_id: str
    expires_at_ms: int


class PlayerTables(msgspec.Struct, frozen=True):
    tables: list[TableStatus]
