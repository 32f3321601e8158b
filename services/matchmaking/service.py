"""Matchmaking core: seat reservations in PostgreSQL, stakes through the ledger, matches in the engine.

Consistency rules (see docs/matchmaking.md):
- A table row is locked (`FOR UPDATE`) before any of its seats change, and partial unique
  indexes allow one live reservation per seat and per player at a table: never overfilled,
  never a player twice.
- Money calls happen outside database transactions in two steps: a seat is reserved as
  'pending' (tx 1), the ledger hold is placed with an idempotency key derived from the
  reservation id, then the seat is marked 'seated' (tx 2). Leaving marks the seat
  'releasing' (the seat is free at once), releases the hold, then marks it 'released'.
  A crash between the steps leaves a 'pending' or 'releasing' row that the sweeper repairs by
  repeating the idempotent ledger call.
- The last seat filling marks the table 'starting' with a match id; one ledger call moves
  every hold into the pot (all or nothing); then 'started' and the engine creates the match
  ('playing'). A refused pot move drops the offending seat and the table waits again.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import msgspec

from services.common.errors import ServiceError, bad_request, conflict, not_found
from services.common.http import InternalClient, RemoteError, ServiceUnavailable
from services.common.logging import get_logger
from services.engine.contract import CreateMatch, MatchCreated, PublicMatchState, SeatSpec
from services.ledger.contract import (
    EntryResult,
    HoldRequest,
    ReleaseRequest,
    SeatStake,
    StartMatchRequest,
    VoidMatchRequest,
)
from services.matchmaking import contract as c
from services.matchmaking.config import MatchmakingConfig
from services.matchmaking.db import RETRY_SQLSTATES, Conn, Database, text
from services.matchmaking.kinds import CATALOGUE, TIERS, Kind, across

log = get_logger()

Clock = Callable[[], int]
LIVE = ("pending", "seated", "staked")
# Ledger refusals that mean a hold is already gone: releasing it again is done.
_RELEASE_DONE = {"hold_closed", "unknown_hold"}
_INVITE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _sqlstate(exc: asyncpg.PostgresError) -> str:
    return str(getattr(exc, "sqlstate", "") or "")


def _hash(body: msgspec.Struct) -> bytes:
    return hashlib.sha256(msgspec.json.encode(body)).digest()


@dataclass(frozen=True, slots=True)
class JoinSpec:
    op: str  # quick | private | code | cpu
    player_id: str
    idempotency_key: str
    request_hash: bytes
    partner_id: str | None = None
    kind: str | None = None
    tier: str | None = None
    invite_code: str | None = None


@dataclass(frozen=True, slots=True)
class Res:
    id: str
    table_id: str
    seat: int
    player_id: str
    status: str
    stake_cents: int
    expires_ms: int


class _Replay(Exception):
    def __init__(self, status: int, body: bytes) -> None:
        self.status = status
        self.body = body


class _Resume(Exception):
    def __init__(self, reservation_ids: list[str]) -> None:
        self.reservation_ids = reservation_ids


class Matchmaker:
    def __init__(
        self,
        db: Database,
        config: MatchmakingConfig,
        *,
        ledger: InternalClient,
        engine: InternalClient,
        currency: str = "USD",
        clock: Clock = wall_clock_ms,
    ) -> None:
        self.db = db
        self.config = config
        self.ledger = ledger
        self.engine = engine
        self.currency = currency
        self.clock = clock

    # ------------------------------------------------------------------ catalogue and reads

    def kinds(self) -> c.KindList:
        out = []
        for kind in CATALOGUE.values():
            tiers = self.config.offered_tiers(kind.kind)
            if not tiers:
                continue
            out.append(
                c.KindInfo(
                    kind=kind.kind,
                    variant=kind.variant,
                    title=kind.title,
                    options=dict(kind.options),
                    seat_count=kind.seat_count,
                    pairs=kind.pairs,
                    tiers=[c.TierInfo(t, TIERS[t]) for t in TIERS if t in tiers],
                )
            )
        return c.KindList(kinds=out, currency=self.currency)

    def _kind(self, kind: str, tier: str) -> Kind:
        found = CATALOGUE.get(kind)
        if found is None or not self.config.offered_tiers(kind):
            raise not_found("unknown_kind", f"no table kind {kind!r} is offered")
        if tier not in self.config.offered_tiers(kind):
            raise bad_request("tier_not_offered", f"{kind} is not offered at tier {tier!r}")
        return found

    async def lobby(self, kind: str | None, tier: str | None) -> c.Lobby:
        if kind is not None and (kind not in CATALOGUE or not self.config.offered_tiers(kind)):
            raise not_found("unknown_kind", f"no table kind {kind!r} is offered")
        if tier is not None and tier not in TIERS:
            raise bad_request("tier_not_offered", f"no tier {tier!r}")
        async with self.db.connect_() as conn:
            rows = (
                await conn.execute(
                    text(
                        """
                        SELECT t.id, t.kind, t.tier, t.stake_cents, t.seat_count, t.taken,
                               coalesce((SELECT array_agg(r.seat) FROM matchmaking.reservations r
                                         WHERE r.table_id = t.id
                                           AND r.status IN ('pending','seated','staked')),
                                        '{}') AS seats
                        FROM matchmaking.tables t
                        WHERE t.status = 'waiting' AND NOT t.private AND NOT t.vs_cpu
                          AND t.taken < t.seat_count
                          AND (CAST(:kind AS text) IS NULL OR t.kind = :kind)
                          AND (CAST(:tier AS text) IS NULL OR t.tier = :tier)
                        ORDER BY t.kind, t.tier, t.taken DESC, t.created_ms
                        LIMIT :limit
                        """
                    ),
                    {"kind": kind, "tier": tier, "limit": self.config.lobby_limit},
                )
            ).all()
        return c.Lobby(
            tables=[
                c.LobbyTable(
                    table_id=r.id,
                    kind=r.kind,
                    tier=r.tier,
                    stake_cents=r.stake_cents,
                    seat_count=r.seat_count,
                    taken=r.taken,
                    free_seats=[s for s in range(r.seat_count) if s not in set(r.seats)],
                )
                for r in rows
            ]
        )

    async def table_status(self, table_id: str, conn: Conn | None = None) -> c.TableStatus:
        if conn is None:
            async with self.db.connect_() as own:
                return await self.table_status(table_id, own)
        t = (
            await conn.execute(
                text("SELECT * FROM matchmaking.tables WHERE id = :id"), {"id": table_id}
            )
        ).first()
        if t is None:
            raise not_found("table_not_found", f"no table {table_id}")
        seats = (
            await conn.execute(
                text(
                    "SELECT seat, player_id, status FROM matchmaking.reservations "
                    "WHERE table_id = :id AND status IN ('pending','seated','staked') "
                    "ORDER BY seat"
                ),
                {"id": table_id},
            )
        ).all()
        by_seat = {s.seat: s for s in seats}
        views = []
        for n in range(t.seat_count):
            s = by_seat.get(n)
            if s is not None:
                views.append(c.SeatView(n, s.player_id, False, s.status))
            elif t.vs_cpu:
                views.append(c.SeatView(n, None, True, None))
            else:
                views.append(c.SeatView(n, None, False, None))
        kind = CATALOGUE[t.kind]
        return c.TableStatus(
            table_id=t.id,
            kind=t.kind,
            variant=t.variant,
            options=dict(kind.options),
            tier=t.tier,
            stake_cents=t.stake_cents,
            currency=t.currency.strip(),
            seat_count=t.seat_count,
            pairs=t.pairs,
            private=t.private,
            vs_cpu=t.vs_cpu,
            invite_code=t.invite_code,
            status=t.status,
            seats=views,
            match_id=t.match_id,
            created_at_ms=t.created_ms,
            started_at_ms=t.started_ms,
        )

    async def player_tables(self, player_id: str) -> c.PlayerTables:
        """The player's live tables: waiting, starting or with a match still in play.

        Whether a match has ended is the engine's to say; a table found over is marked
        'finished' once, so later listings skip it without asking again.
        """
        async with self.db.connect_() as conn:
            rows = (
                await conn.execute(
                    text(
                        "SELECT r.table_id, t.status, t.match_id FROM matchmaking.reservations r "
                        "JOIN matchmaking.tables t ON t.id = r.table_id "
                        "WHERE r.player_id = :p AND r.status IN ('pending','seated','staked') "
                        "AND t.status NOT IN ('finished', 'voided') "
                        "ORDER BY r.created_ms DESC LIMIT :limit"
                    ),
                    {"p": player_id, "limit": self.config.lobby_limit},
                )
            ).all()
        live: list[str] = []
        for row in rows:
            if row.status == "playing" and row.match_id and await self._match_over(row.match_id):
                async with self.db.begin() as conn:
                    await conn.execute(
                        text(
                            "UPDATE matchmaking.tables SET status = 'finished', updated_ms = :now "
                            "WHERE id = :id AND status = 'playing'"
                        ),
                        {"id": row.table_id, "now": self.clock()},
                    )
                continue
            live.append(row.table_id)
        async with self.db.connect_() as conn:
            return c.PlayerTables(tables=[await self.table_status(i, conn) for i in live])

    async def _match_over(self, match_id: str) -> bool:
        """True when the engine reports the match finished or voided; unknown stays live."""
        try:
            state = await self.engine.get(f"/internal/matches/{match_id}", PublicMatchState)
        except (RemoteError, ServiceUnavailable):
            return False
        return state.status in ("finished", "void")

    # ------------------------------------------------------------------ joining

    async def join(self, spec: JoinSpec) -> c.JoinResult:
        players = [spec.player_id] + ([spec.partner_id] if spec.partner_id else [])
        if spec.partner_id is not None and spec.partner_id == spec.player_id:
            raise bad_request("partner_is_self", "a player cannot partner with himself")
        resumed = False
        try:
            reservations = await self._retrying(lambda conn: self._reserve(conn, spec, players))
        except _Replay as replay:
            return self._replayed(replay)
        except _Resume as resume:
            reservations = await self._load_reservations(resume.reservation_ids)
            resumed = True
        table_id = reservations[0].table_id
        # Free seats are 'seated' at once; a fresh one may complete the table.
        may_start = True
        try:
            if any(r.status == "pending" for r in reservations):
                may_start = await self._place_holds(reservations)
            elif resumed:
                await self._check_still_live(reservations)
        except ServiceError as exc:
            if exc.status != 503:
                await self._store_response(spec, exc.status, _error_body(exc))
            raise
        if may_start or resumed:
            await self._try_start(table_id)
        # A success is not stored: a retry resumes from the reservation ids the first attempt
        # recorded and answers with the table as it is now (`replayed: true`).
        result = await self._join_result(table_id, reservations)
        return msgspec.structs.replace(result, replayed=True) if resumed else result

    def _replayed(self, replay: _Replay) -> c.JoinResult:
        if replay.status != 200:
            err = msgspec.json.decode(replay.body)
            raise ServiceError(replay.status, err["error"], err["detail"])
        result = msgspec.json.decode(replay.body, type=c.JoinResult)
        return msgspec.structs.replace(result, replayed=True)

    async def _retrying(self, work: Callable[[Conn], Any]) -> Any:
        last: asyncpg.PostgresError | None = None
        for attempt in range(self.config.tx_attempts):
            try:
                async with self.db.begin() as conn:
                    return await work(conn)
            except asyncpg.PostgresError as exc:
                if _sqlstate(exc) not in RETRY_SQLSTATES:
                    raise
                last = exc
                await asyncio.sleep(0.001 * (attempt + 1))
        log.warning("tx_retries_exhausted", error=str(last)[:200])
        raise ServiceError(503, "busy", "too much contention; retry with the same key")

    async def _claim(
        self,
        conn: Conn,
        player_id: str,
        key: str,
        op: str,
        digest: bytes,
        players: list[str] | None = None,
    ) -> int:
        """Record the request key, or replay/resume the request that used it before.

        Returns the most live (waiting) seats any of `players` holds, in the same round trip.
        """
        row = (
            await conn.execute(
                text(
                    "WITH ins AS (INSERT INTO matchmaking.requests "
                    "(player_id, idempotency_key, op, request_hash, created_ms) "
                    "VALUES (:p, :k, :op, :h, :now) ON CONFLICT DO NOTHING RETURNING 1) "
                    "SELECT (SELECT count(*) FROM ins) AS inserted, "
                    "(SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n "
                    "FROM matchmaking.reservations WHERE player_id = ANY(:ps) "
                    "AND status IN ('pending','seated') GROUP BY player_id) x) AS most"
                ),
                {
                    "p": player_id,
                    "k": key,
                    "op": op,
                    "h": digest,
                    "now": self.clock(),
                    "ps": players or [],
                },
            )
        ).one()
        if row.inserted:
            return int(row.most)
        prior = (
            await conn.execute(
                text(
                    "SELECT op, request_hash, response, response_status, reservation_ids "
                    "FROM matchmaking.requests WHERE player_id = :p AND idempotency_key = :k"
                ),
                {"p": player_id, "k": key},
            )
        ).one()
        if prior.op != op or bytes(prior.request_hash) != digest:
            raise conflict(
                "idempotency_key_reused", "this idempotency key was used for another request"
            )
        if prior.response is not None:
            raise _Replay(prior.response_status, bytes(prior.response))
        if prior.reservation_ids:
            raise _Resume(list(prior.reservation_ids))
        raise ServiceError(503, "request_in_progress", "the first request is still running")

    async def _store_response(self, spec: JoinSpec | c.Leave, status: int, body: bytes) -> None:
        async with self.db.begin() as conn:
            await conn.execute(
                text(
                    "UPDATE matchmaking.requests SET response = :b, response_status = :s "
                    "WHERE player_id = :p AND idempotency_key = :k"
                ),
                {"b": body, "s": status, "p": spec.player_id, "k": spec.idempotency_key},
            )

    async def _reserve(self, conn: Conn, spec: JoinSpec, players: list[str]) -> list[Res]:
        most = await self._claim(
            conn, spec.player_id, spec.idempotency_key, spec.op, spec.request_hash, players
        )
        now = self.clock()
        if most >= self.config.max_tables_per_player:
            raise conflict("too_many_tables", f"already sitting at {most} waiting tables")
        table: dict[str, Any] | None = None
        seats: list[int] | None
        if spec.op == "code":
            table = await self._table_by_code(conn, spec, players)
        elif spec.op == "quick":
            table = await self._quick_table(conn, spec, players)
        if table is None:
            table = await self._new_table(conn, spec, now)
            seats = [0, 2] if len(players) == 2 else [0]
        else:
            seats = self._choose_seats(table, players)
            if seats is None:
                raise conflict("table_full", "no free seat (or no two seats across) at this table")
        reservations = []
        status = "pending" if table["stake_cents"] > 0 else "seated"
        expires = now + self.config.reservation_ttl_ms
        for player, seat in zip(players, seats, strict=True):
            res = Res(
                id="r-" + uuid.uuid4().hex,
                table_id=table["id"],
                seat=seat,
                player_id=player,
                status=status,
                stake_cents=table["stake_cents"],
                expires_ms=expires,
            )
            reservations.append(res)
        # One round trip while the table row is locked: seats, the counter, the request record.
        await conn.execute(
            text(
                "WITH ins AS (INSERT INTO matchmaking.reservations (id, table_id, seat, "
                "player_id, status, stake_cents, created_ms, expires_ms, updated_ms) "
                "SELECT d.id, :t, d.seat, d.player, :st, :stake, :now, :exp, :now "
                "FROM unnest(CAST(:ids AS text[]), CAST(:seats AS smallint[]), "
                "CAST(:players AS text[])) AS d(id, seat, player) RETURNING 1), "
                "tab AS (UPDATE matchmaking.tables SET taken = taken + :n, updated_ms = :now "
                "WHERE id = :t RETURNING 1) "
                "UPDATE matchmaking.requests SET table_id = :t, reservation_ids = :ids "
                "WHERE player_id = :p AND idempotency_key = :k "
                "AND (SELECT count(*) FROM ins) = :n AND (SELECT count(*) FROM tab) = 1"
            ),
            {
                "t": table["id"],
                "ids": [r.id for r in reservations],
                "seats": [r.seat for r in reservations],
                "players": [r.player_id for r in reservations],
                "st": status,
                "stake": table["stake_cents"],
                "now": now,
                "exp": expires,
                "n": len(reservations),
                "p": spec.player_id,
                "k": spec.idempotency_key,
            },
        )
        return reservations

    def _choose_seats(self, table: dict[str, Any], players: list[str]) -> list[int] | None:
        occupied: set[int] = set(table["occupied"])
        free = [s for s in range(table["seat_count"]) if s not in occupied]
        if len(players) == 1:
            return free[:1] or None
        for s in free:
            partner = across(s, table["seat_count"])
            if partner in free and partner != s:
                return [s, partner]
        return None

    async def _lock_table(
        self,
        conn: Conn,
        where: str,
        params: dict[str, Any],
        tail: str = "FOR UPDATE",
    ) -> dict[str, Any] | None:
        row = (
            await conn.execute(
                text(
                    "SELECT id, kind, tier, stake_cents, seat_count, pairs, status, taken, "
                    f"private, vs_cpu FROM matchmaking.tables t WHERE {where} {tail}"
                ),
                params,
            )
        ).first()
        if row is None:
            return None
        table = dict(row._mapping)
        occupied = (
            await conn.execute(
                text(
                    "SELECT seat, player_id FROM matchmaking.reservations WHERE table_id = :t "
                    "AND status IN ('pending','seated','staked')"
                ),
                {"t": table["id"]},
            )
        ).all()
        table["occupied"] = [o.seat for o in occupied]
        table["players"] = [o.player_id for o in occupied]
        return table

    async def _table_by_code(
        self, conn: Conn, spec: JoinSpec, players: list[str]
    ) -> dict[str, Any]:
        table = await self._lock_table(conn, "invite_code = :code", {"code": spec.invite_code})
        if table is None:
            raise not_found("invite_not_found", "no table has this invite code")
        if table["status"] != "waiting":
            raise conflict("table_started", "this table's match has started")
        if any(p in table["players"] for p in players):
            raise conflict("already_seated", "the player already sits at this table")
        if len(players) == 2 and not table["pairs"]:
            raise bad_request("partner_not_pairs", "partners can only sit at a pairs table")
        if table["seat_count"] - table["taken"] < len(players):
            raise conflict("table_full", "this table has no free seat")
        return table

    async def _quick_table(
        self, conn: Conn, spec: JoinSpec, players: list[str]
    ) -> dict[str, Any] | None:
        excluded: list[str] = []
        for _ in range(self.config.quick_join_candidates):
            # SKIP LOCKED: under load, joiners spread over the fullest tables nobody else is
            # changing right now instead of queueing on one row.
            table = await self._lock_table(
                conn,
                """t.kind = :kind AND t.tier = :tier AND t.status = 'waiting'
                   AND NOT t.private AND NOT t.vs_cpu AND t.taken <= t.seat_count - :n
                   AND t.id <> ALL(:excluded)
                   AND NOT EXISTS (SELECT 1 FROM matchmaking.reservations r
                                   WHERE r.table_id = t.id AND r.player_id = ANY(:players)
                                     AND r.status IN ('pending','seated','staked'))""",
                {
                    "kind": spec.kind,
                    "tier": spec.tier,
                    "n": len(players),
                    "excluded": excluded,
                    "players": players,
                },
                tail="ORDER BY t.taken DESC, t.created_ms LIMIT 1 FOR UPDATE SKIP LOCKED",
            )
            if table is None:
                return None
            if (
                table["status"] == "waiting"
                and not any(p in table["players"] for p in players)
                and self._choose_seats(table, players) is not None
            ):
                return table
            excluded.append(table["id"])
        return None

    async def _new_table(self, conn: Conn, spec: JoinSpec, now: int) -> dict[str, Any]:
        kind_id = spec.kind or ""
        tier = spec.tier or "free"
        kind = CATALOGUE[kind_id]
        table_id = "t-" + uuid.uuid4().hex
        code = None
        if spec.op == "private":
            code = "".join(
                secrets.choice(_INVITE_ALPHABET) for _ in range(self.config.invite_code_length)
            )
        await conn.execute(
            text(
                "INSERT INTO matchmaking.tables (id, kind, tier, variant, options, stake_cents, "
                "currency, seat_count, pairs, private, vs_cpu, invite_code, status, taken, "
                "created_ms, updated_ms) VALUES (:id, :kind, :tier, :variant, CAST(:options AS "
                "jsonb), :stake, :cur, :seats, :pairs, :private, :cpu, :code, 'waiting', 0, "
                ":now, :now)"
            ),
            {
                "id": table_id,
                "kind": kind.kind,
                "tier": tier,
                "variant": kind.variant,
                "options": msgspec.json.encode(kind.options).decode(),
                "stake": TIERS[tier],
                "cur": self.currency,
                "seats": kind.seat_count,
                "pairs": kind.pairs,
                "private": spec.op == "private",
                "cpu": spec.op == "cpu",
                "code": code,
                "now": now,
            },
        )
        return {
            "id": table_id,
            "kind": kind.kind,
            "tier": tier,
            "stake_cents": TIERS[tier],
            "seat_count": kind.seat_count,
            "pairs": kind.pairs,
            "status": "waiting",
            "taken": 0,
            "occupied": [],
            "players": [],
        }

    async def _load_reservations(self, ids: Sequence[str]) -> list[Res]:
        async with self.db.connect_() as conn:
            rows = (
                await conn.execute(
                    text(
                        "SELECT id, table_id, seat, player_id, status, stake_cents, expires_ms "
                        "FROM matchmaking.reservations WHERE id = ANY(:ids) ORDER BY seat"
                    ),
                    {"ids": list(ids)},
                )
            ).all()
        return [Res(**r._mapping) for r in rows]

    # ------------------------------------------------------------------ holds

    def _hold_request(self, r: Res) -> HoldRequest:
        return HoldRequest(
            idempotency_key=f"mm-hold:{r.id}",
            player=r.player_id,
            reservation_id=r.id,
            amount=r.stake_cents,
            table_id=r.table_id,
            currency=self.currency,
        )

    async def _hold(self, r: Res) -> RemoteError | ServiceUnavailable | None:
        try:
            await self.ledger.post("/v1/holds", self._hold_request(r), EntryResult)
        except RemoteError as exc:
            if exc.status >= 500:
                return ServiceUnavailable(f"ledger {exc.status} {exc.code}")
            return exc
        except ServiceUnavailable as exc:
            return exc
        return None

    async def _place_holds(self, reservations: list[Res]) -> bool:
        """Turn 'pending' seats into 'seated' ones (holds placed), or drop them all.

        True when the table may be full (worth trying to start it)."""
        pending = [r for r in reservations if r.status == "pending"]
        if not pending:
            await self._check_still_live(reservations)
            return True
        outcomes = await asyncio.gather(*(self._hold(r) for r in pending))
        refused = [o for o in outcomes if isinstance(o, RemoteError)]
        down = [o for o in outcomes if isinstance(o, ServiceUnavailable)]
        if refused:
            held = [r for r, o in zip(pending, outcomes, strict=True) if o is None]
            await self._drop(pending, held, reason=refused[0].code)
            first = refused[0]
            raise ServiceError(422 if first.status < 500 else 503, first.code, first.detail)
        if down:
            raise ServiceError(503, "ledger_unavailable", "the ledger did not answer; retry")
        full = await self._mark_seated([r.id for r in pending], reservations[0].table_id)
        if full:
            await self._check_still_live(reservations)
        return full

    async def _check_still_live(self, reservations: list[Res]) -> None:
        fresh = await self._load_reservations([r.id for r in reservations])
        gone = [r for r in fresh if r.status not in LIVE]
        if gone:
            raise conflict("reservation_dropped", f"the seat was released ({gone[0].status})")

    async def _mark_seated(self, ids: list[str], table_id: str) -> bool:
        """Mark held seats 'seated'; True when every seat of the table is taken.

        Taken counts 'pending' seats too: when two last seats are confirmed at once, each
        confirmation tries the start after its own commit, so the later one sees both seated
        (`_try_start` re-checks under the table lock)."""

        async def work(conn: Conn) -> tuple[bool, int]:
            row = (
                await conn.execute(
                    text(
                        "WITH done AS (UPDATE matchmaking.reservations SET status = 'seated', "
                        "updated_ms = :now WHERE id = ANY(:ids) AND status = 'pending' "
                        "RETURNING id) "
                        "SELECT (SELECT count(*) FROM done) AS done, t.seat_count, t.vs_cpu, "
                        "(SELECT count(*) FROM matchmaking.reservations r WHERE r.table_id = t.id "
                        "AND r.status IN ('pending','seated')) AS taken "
                        "FROM matchmaking.tables t WHERE t.id = :t"
                    ),
                    {"ids": ids, "now": self.clock(), "t": table_id},
                )
            ).one()
            return bool(row.taken >= row.seat_count or row.vs_cpu), int(row.done)

        full, done = await self._retrying(work)
        if done < len(ids):
            # Someone else (the sweeper) settled a seat first: is it still ours?
            await self._check_still_live(await self._load_reservations(ids))
        return bool(full)

    async def _drop(self, failed: list[Res], held: list[Res], reason: str) -> None:
        """Give up seats: refused ones become 'failed', held ones are released."""
        table_id = failed[0].table_id
        now = self.clock()

        async def work(conn: Conn) -> None:
            await conn.execute(
                text("SELECT 1 FROM matchmaking.tables WHERE id = :t FOR UPDATE"), {"t": table_id}
            )
            held_ids = [r.id for r in held]
            for r in failed:
                await conn.execute(
                    text(
                        "UPDATE matchmaking.reservations SET status = :st, reason = :why, "
                        "updated_ms = :now WHERE id = :id AND status IN ('pending','seated')"
                    ),
                    {
                        "st": "releasing" if r.id in held_ids else "failed",
                        "why": reason,
                        "now": now,
                        "id": r.id,
                    },
                )
            await self._recount(conn, table_id, now)

        await self._retrying(work)
        for r in held:
            await self._release(r.id)

    async def _recount(self, conn: Conn, table_id: str, now: int) -> None:
        await conn.execute(
            text(
                "UPDATE matchmaking.tables SET updated_ms = :now, taken = (SELECT count(*) FROM "
                "matchmaking.reservations r WHERE r.table_id = :t "
                "AND r.status IN ('pending','seated','staked')) WHERE id = :t"
            ),
            {"t": table_id, "now": now},
        )

    async def _release(self, reservation_id: str) -> bool:
        """Release a 'releasing' reservation's hold; True when it is done."""
        try:
            await self.ledger.post(
                "/v1/holds/release",
                ReleaseRequest(
                    idempotency_key=f"mm-release:{reservation_id}", reservation_id=reservation_id
                ),
                EntryResult,
            )
        except RemoteError as exc:
            if exc.code not in _RELEASE_DONE:
                log.warning("release_refused", reservation=reservation_id, code=exc.code)
                return False
        except ServiceUnavailable:
            return False
        async with self.db.begin() as conn:
            await conn.execute(
                text(
                    "UPDATE matchmaking.reservations SET status = 'released', updated_ms = :now "
                    "WHERE id = :id AND status = 'releasing'"
                ),
                {"id": reservation_id, "now": self.clock()},
            )
        return True

    # ------------------------------------------------------------------ leaving and expiry

    async def leave(self, req: c.Leave) -> c.LeaveResult:
        digest = _hash(req)
        now = self.clock()

        async def work(conn: Conn) -> tuple[str, int]:
            await self._claim(conn, req.player_id, req.idempotency_key, "leave", digest)
            table = await self._lock_table(conn, "id = :t", {"t": req.table_id})
            if table is None:
                raise not_found("table_not_found", f"no table {req.table_id}")
            row = (
                await conn.execute(
                    text(
                        "SELECT id, status, stake_cents FROM matchmaking.reservations "
                        "WHERE table_id = :t AND player_id = :p "
                        "AND status IN ('pending','seated','staked')"
                    ),
                    {"t": req.table_id, "p": req.player_id},
                )
            ).first()
            if row is None:
                raise not_found("not_seated", "the player has no seat at this table")
            if table["status"] != "waiting" or row.status == "staked":
                raise conflict("table_started", "the match has started; the seat is staked")
            if row.status == "pending":
                raise conflict("reservation_pending", "the seat's hold is being placed; retry")
            new = "releasing" if row.stake_cents > 0 else "released"
            await conn.execute(
                text(
                    "UPDATE matchmaking.reservations SET status = :st, reason = 'left', "
                    "updated_ms = :now WHERE id = :id"
                ),
                {"st": new, "now": now, "id": row.id},
            )
            await self._recount(conn, req.table_id, now)
            return row.id, row.stake_cents

        try:
            reservation_id, stake = await self._retrying(work)
        except _Replay as replay:
            if replay.status != 200:
                err = msgspec.json.decode(replay.body)
                raise ServiceError(replay.status, err["error"], err["detail"]) from None
            result = msgspec.json.decode(replay.body, type=c.LeaveResult)
            return msgspec.structs.replace(result, replayed=True)
        except _Resume:
            raise conflict("idempotency_key_reused", "key used by a join") from None
        released = True
        if stake > 0:
            # If the ledger is down the seat is already free; the sweeper finishes the release.
            released = await self._release(reservation_id)
        out = c.LeaveResult(table_id=req.table_id, player_id=req.player_id, released=released)
        await self._store_response(req, 200, msgspec.json.encode(out))
        return out

    async def heartbeat(self, req: c.Heartbeat, *, disconnect: bool = False) -> c.HeartbeatResult:
        now = self.clock()
        if disconnect:
            expr = "LEAST(expires_ms, CAST(:now AS bigint) + CAST(:grace AS bigint))"
        else:
            expr = "CAST(:now AS bigint) + CAST(:ttl AS bigint)"
        async with self.db.begin() as conn:
            row = (
                await conn.execute(
                    text(
                        f"UPDATE matchmaking.reservations SET expires_ms = {expr} "
                        "WHERE table_id = :t AND player_id = :p AND status IN ('pending','seated') "
                        "RETURNING expires_ms"
                    ),
                    {
                        "t": req.table_id,
                        "p": req.player_id,
                        "now": now,
                        "ttl": self.config.reservation_ttl_ms,
                        "grace": self.config.disconnect_grace_ms,
                    },
                )
            ).first()
        if row is None:
            raise not_found("not_seated", "the player has no reservation waiting at this table")
        return c.HeartbeatResult(req.table_id, req.player_id, row.expires_ms)

    # ------------------------------------------------------------------ starting

    async def _try_start(self, table_id: str) -> None:
        now = self.clock()

        async def work(conn: Conn) -> tuple[str, str] | None:
            table = await self._lock_table(conn, "id = :t", {"t": table_id})
            if table is None or table["status"] != "waiting":
                return None
            rows = (
                (
                    await conn.execute(
                        text(
                            "SELECT status FROM matchmaking.reservations WHERE table_id = :t "
                            "AND status IN ('pending','seated','staked')"
                        ),
                        {"t": table_id},
                    )
                )
                .scalars()
                .all()
            )
            full = len(rows) == table["seat_count"] or (table["vs_cpu"] and len(rows) >= 1)
            if not full or any(s != "seated" for s in rows):
                return None
            match_id = "m-" + uuid.uuid4().hex
            new_status = "starting" if table["stake_cents"] > 0 else "started"
            await conn.execute(
                text(
                    "UPDATE matchmaking.tables SET status = :st, match_id = :m, updated_ms = :now, "
                    "started_ms = :started WHERE id = :t"
                ),
                {
                    "st": new_status,
                    "m": match_id,
                    "now": now,
                    "t": table_id,
                    "started": now if new_status == "started" else None,
                },
            )
            if new_status == "started":
                await conn.execute(
                    text(
                        "UPDATE matchmaking.reservations SET status = 'staked', updated_ms = :now "
                        "WHERE table_id = :t AND status = 'seated'"
                    ),
                    {"t": table_id, "now": now},
                )
            return match_id, new_status

        started = await self._retrying(work)
        if started is None:
            return
        match_id, status = started
        if status == "starting" and not await self._move_pot(table_id, match_id):
            return
        await self._create_match(table_id)

    async def _seats(self, table_id: str) -> list[Res]:
        async with self.db.connect_() as conn:
            rows = (
                await conn.execute(
                    text(
                        "SELECT id, table_id, seat, player_id, status, stake_cents, expires_ms "
                        "FROM matchmaking.reservations WHERE table_id = :t "
                        "AND status IN ('pending','seated','staked') ORDER BY seat"
                    ),
                    {"t": table_id},
                )
            ).all()
        return [Res(**r._mapping) for r in rows]

    async def _move_pot(self, table_id: str, match_id: str) -> bool:
        """One ledger call: every hold into the pot. True when the pot exists."""
        status = await self.table_status(table_id)
        seats = await self._seats(table_id)
        request = StartMatchRequest(
            idempotency_key=f"mm-start:{match_id}",
            match_id=match_id,
            tier=status.tier,
            variant=status.variant,
            seats=[SeatStake(seat=r.seat, player=r.player_id, reservation_id=r.id) for r in seats],
            currency=self.currency,
        )
        try:
            await self.ledger.post("/v1/matches/start", request, EntryResult)
        except ServiceUnavailable:
            log.warning("pot_move_unavailable", table=table_id, match=match_id)
            return False
        except RemoteError as exc:
            if exc.status >= 500:
                return False
            await self._pot_refused(table_id, match_id, seats, exc)
            return False
        now = self.clock()
        async with self.db.begin() as conn:
            await conn.execute(
                text(
                    "UPDATE matchmaking.tables SET status = 'started', started_ms = :now, "
                    "updated_ms = :now WHERE id = :t AND status = 'starting' AND match_id = :m"
                ),
                {"t": table_id, "m": match_id, "now": now},
            )
            await conn.execute(
                text(
                    "UPDATE matchmaking.reservations SET status = 'staked', updated_ms = :now "
                    "WHERE table_id = :t AND status = 'seated'"
                ),
                {"t": table_id, "now": now},
            )
        return True

    async def _pot_refused(
        self, table_id: str, match_id: str, seats: list[Res], exc: RemoteError
    ) -> None:
        """Nobody was charged. Drop the seat(s) the ledger named; the table waits again."""
        bad = [r for r in seats if r.id in exc.detail]
        log.warning("pot_move_refused", table=table_id, code=exc.code, dropped=len(bad))
        now = self.clock()

        async def work(conn: Conn) -> None:
            await conn.execute(
                text("SELECT 1 FROM matchmaking.tables WHERE id = :t FOR UPDATE"), {"t": table_id}
            )
            await conn.execute(
                text(
                    "UPDATE matchmaking.tables SET status = 'waiting', match_id = NULL, "
                    "updated_ms = :now WHERE id = :t AND status = 'starting' AND match_id = :m"
                ),
                {"t": table_id, "m": match_id, "now": now},
            )
            await conn.execute(
                text(
                    "UPDATE matchmaking.reservations SET status = 'releasing', reason = :why, "
                    "updated_ms = :now WHERE id = ANY(:ids) AND status = 'seated'"
                ),
                {"ids": [r.id for r in bad], "why": f"pot:{exc.code}", "now": now},
            )
            await self._recount(conn, table_id, now)

        await self._retrying(work)
        for r in bad:
            await self._release(r.id)

    async def _create_match(self, table_id: str) -> None:
        status = await self.table_status(table_id)
        if status.status != "started" or status.match_id is None:
            return
        seats = await self._seats(table_id)
        by_seat = {r.seat: r for r in seats}
        specs = []
        for n in range(status.seat_count):
            r = by_seat.get(n)
            if r is None:
                specs.append(SeatSpec(seat=n, bot=True))
            else:
                specs.append(
                    SeatSpec(seat=n, player_id=r.player_id, hold_id=r.id if r.stake_cents else None)
                )
        request = CreateMatch(
            match_id=status.match_id,
            variant=status.variant,
            options=dict(status.options),
            seats=specs,
            tier=status.tier,  # type: ignore[arg-type]
            stake_cents=status.stake_cents,
            currency=status.currency,
            table_id=table_id,
        )
        refusal: RemoteError | None = None
        for attempt in range(self.config.engine_attempts):
            try:
                await self.engine.post("/internal/matches", request, MatchCreated)
            except ServiceUnavailable:
                pass
            except RemoteError as exc:
                if exc.status < 500 and exc.status not in (408, 409, 429):
                    refusal = exc
                    break
            else:
                await self._set_status(table_id, "started", "playing")
                return
            await asyncio.sleep(self.config.engine_retry_ms / 1000 * (attempt + 1))
        if refusal is None:
            return  # the sweeper keeps trying
        log.error("engine_refused_match", table=table_id, code=refusal.code)
        if status.stake_cents > 0:
            try:
                await self.ledger.post(
                    "/v1/matches/void",
                    VoidMatchRequest(
                        idempotency_key=f"mm-void:{status.match_id}",
                        match_id=status.match_id,
                        reason=f"engine refused: {refusal.code}"[:200],
                    ),
                    EntryResult,
                )
            except (ServiceUnavailable, RemoteError) as exc:
                log.error("void_failed", table=table_id, error=str(exc)[:200])
                return
        await self._set_status(table_id, "started", "voided")

    async def _set_status(self, table_id: str, old: str, new: str) -> None:
        async with self.db.begin() as conn:
            await conn.execute(
                text(
                    "UPDATE matchmaking.tables SET status = :new, updated_ms = :now "
                    "WHERE id = :t AND status = :old"
                ),
                {"t": table_id, "old": old, "new": new, "now": self.clock()},
            )

    async def _join_result(self, table_id: str, reservations: list[Res]) -> c.JoinResult:
        return c.JoinResult(
            table=await self.table_status(table_id),
            reservations=[
                c.ReservationView(r.id, r.player_id, r.seat, r.expires_ms) for r in reservations
            ],
        )

    # ------------------------------------------------------------------ sweeper

    async def sweep_once(self) -> dict[str, int]:
        """One bounded pass: expiries, stuck pending/releasing seats, stuck starts."""
        now = self.clock()
        batch = self.config.sweep_batch_size
        counts = {
            "expired": 0,
            "pending": 0,
            "releasing": 0,
            "starting": 0,
            "started": 0,
            "full": 0,
            "purged": 0,
        }
        async with self.db.connect_() as conn:
            expired = (
                await conn.execute(
                    text(
                        "SELECT r.id, r.table_id FROM matchmaking.reservations r "
                        "JOIN matchmaking.tables t ON t.id = r.table_id "
                        "WHERE r.status = 'seated' AND r.expires_ms < :now "
                        "AND t.status = 'waiting' ORDER BY r.expires_ms LIMIT :n"
                    ),
                    {"now": now, "n": batch},
                )
            ).all()
            stale = now - self.config.repair_after_ms
            stuck = (
                await conn.execute(
                    text(
                        "SELECT id, table_id, seat, player_id, status, stake_cents, expires_ms "
                        "FROM matchmaking.reservations WHERE status IN ('pending','releasing') "
                        "AND updated_ms < :stale ORDER BY updated_ms LIMIT :n"
                    ),
                    {"stale": stale, "n": batch},
                )
            ).all()
            tables = (
                await conn.execute(
                    text(
                        "SELECT id, status, match_id FROM matchmaking.tables "
                        "WHERE (status IN ('starting','started') OR (status = 'waiting' "
                        "AND taken = seat_count)) AND updated_ms < :stale "
                        "ORDER BY updated_ms LIMIT :n"
                    ),
                    {"stale": stale, "n": batch},
                )
            ).all()
            purged = await conn.execute(
                text(
                    "DELETE FROM matchmaking.requests WHERE ctid = ANY(ARRAY(SELECT ctid FROM "
                    "matchmaking.requests WHERE created_ms < :old ORDER BY created_ms "
                    "LIMIT :n)) RETURNING 1"
                ),
                {"old": now - self.config.request_retention_ms, "n": batch},
            )
            counts["purged"] = len(purged.all())
        for row in expired:
            if await self._expire(row.id, row.table_id):
                counts["expired"] += 1
        for r in stuck:
            res = Res(**r._mapping)
            if res.status == "pending":
                counts["pending"] += 1
                await self._repair_pending(res)
            else:
                counts["releasing"] += 1
                await self._release(res.id)
        for t in tables:
            if t.status == "waiting":
                # full but not started (a refused pot move named no seat): try again
                counts["full"] += 1
                await self._try_start(t.id)
                continue
            counts[t.status] += 1
            if t.status == "starting":
                if await self._move_pot(t.id, t.match_id):
                    await self._create_match(t.id)
            else:
                await self._create_match(t.id)
        return counts

    async def _expire(self, reservation_id: str, table_id: str) -> bool:
        now = self.clock()

        async def work(conn: Conn) -> bool:
            locked = (
                await conn.execute(
                    text("SELECT status FROM matchmaking.tables WHERE id = :t FOR UPDATE"),
                    {"t": table_id},
                )
            ).scalar()
            if locked != "waiting":
                return False
            changed = (
                await conn.execute(
                    text(
                        "UPDATE matchmaking.reservations SET status = CASE WHEN stake_cents > 0 "
                        "THEN 'releasing' ELSE 'released' END, reason = 'expired', "
                        "updated_ms = :now WHERE id = :id AND status = 'seated' "
                        "AND expires_ms < :now RETURNING stake_cents"
                    ),
                    {"id": reservation_id, "now": now},
                )
            ).first()
            if changed is None:
                return False
            await self._recount(conn, table_id, now)
            return True

        if not await self._retrying(work):
            return False
        await self._release(reservation_id)
        return True

    async def _repair_pending(self, r: Res) -> None:
        outcome = await self._hold(r)
        if isinstance(outcome, ServiceUnavailable):
            return
        if isinstance(outcome, RemoteError):
            await self._drop([r], [], reason=outcome.code)
            return
        await self._mark_seated([r.id], r.table_id)
        await self._try_start(r.table_id)


def _error_body(exc: ServiceError) -> bytes:
    return msgspec.json.encode({"error": exc.code, "detail": exc.detail})
