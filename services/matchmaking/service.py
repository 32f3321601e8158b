"""Matchmaking core: seat reservations in PostgreSQL, stakes through the ledger, matches in the engine.

Consistency rules (see docs/explanation/matchmaking.md):
- Each step is one call of a `matchmaking.*` function (mm0004-mm0006): one round trip, one
  commit. A table row is locked (`FOR UPDATE`, quick join `SKIP LOCKED`) before any of its
  seats change, and partial unique indexes allow one live reservation per seat and per player
  at a table: never overfilled, never a player twice.
- Money calls happen outside database transactions: `join` reserves the seat 'pending', the
  ledger hold is placed with an idempotency key derived from the reservation id, `confirm`
  marks it 'seated'. Leaving marks the seat 'releasing' (free at once), releases the hold,
  then marks it 'released'. A crash between steps leaves a 'pending' or 'releasing' row that
  the sweeper repairs by repeating the idempotent ledger call.
- The confirm that fills the table marks it 'starting' with a match id; one ledger call moves
  every hold into the pot (all or nothing); the engine creates the match; `mark_started`
  makes it 'playing'. A refused pot move drops the offending seat and the table waits again.
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
from services.matchmaking.kinds import CATALOGUE, TIERS, Kind

log = get_logger()

Clock = Callable[[], int]
# Ledger refusals that mean a hold is already gone: releasing it again is done.
_RELEASE_DONE = {"hold_closed", "unknown_hold"}
_INVITE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"


# Lost races, retried: a concurrent insert of the same key, serialization, deadlock.
RETRY_SQLSTATES = frozenset({"23505", "40001", "40P01"})


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
    unlisted: bool = False  # quick join of a player who sits only with random opponents


@dataclass(frozen=True, slots=True)
class Res:
    id: str
    table_id: str
    seat: int
    player_id: str
    status: str
    stake_cents: int
    expires_ms: int


class _TableDoc(msgspec.Struct, frozen=True):
    """A table and its live seats as `matchmaking.table_json` returns them."""

    id: str
    kind: str
    tier: str
    variant: str
    stake_cents: int
    currency: str
    seat_count: int
    pairs: bool
    private: bool
    vs_cpu: bool
    invite_code: str | None
    status: str
    match_id: str | None
    created_ms: int
    started_ms: int | None
    # (seat, player, state, reservation id, expires_ms), by seat
    seats: list[tuple[int, str, str, str, int]]


class _Outcome(msgspec.Struct, frozen=True):
    """What `matchmaking.join` / `confirm` answer: the table, or an earlier request's answer."""

    table: _TableDoc | None = None
    start: bool = False
    gone: bool = False
    replay: int | None = None
    body: str | None = None
    resume: list[str] | None = None
    table_id: str | None = None
    # A paid join (mm0008): the seats it chose, in the order of its players, and the stake.
    seats: list[int] | None = None
    stake_cents: int = 0


class _LeaveOutcome(msgspec.Struct, frozen=True):
    reservation_id: str | None = None
    stake_cents: int = 0
    replay: int | None = None
    body: str | None = None
    resume: list[str] | None = None
    table_id: str | None = None


_JOIN_SQL = "SELECT matchmaking.join(" + ", ".join(f"${n}" for n in range(1, 24)) + ")"
_CONFIRM_SQL = "SELECT matchmaking.confirm($1, $2, $3, $4)"
_MARK_STARTED_SQL = "SELECT matchmaking.mark_started($1, $2, $3, $4)"
_LEAVE_SQL = "SELECT matchmaking.leave($1, $2, $3, $4, $5)"
_TABLE_SQL = "SELECT matchmaking.table_json($1)::text"


class Matchmaker:
    def __init__(
        self,
        db: asyncpg.Pool,
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
        tiers = self.config.offered_tiers(kind)
        if found is None or not tiers:
            raise not_found("unknown_kind", f"no table kind {kind!r} is offered")
        if tier not in tiers:
            raise bad_request("tier_not_offered", f"{kind} is not offered at tier {tier!r}")
        return found

    async def lobby(self, kind: str | None, tier: str | None) -> c.Lobby:
        if kind is not None and (kind not in CATALOGUE or not self.config.offered_tiers(kind)):
            raise not_found("unknown_kind", f"no table kind {kind!r} is offered")
        if tier is not None and tier not in TIERS:
            raise bad_request("tier_not_offered", f"no tier {tier!r}")
        rows = await self.db.fetch(
            """
                        SELECT t.id, t.kind, t.tier, t.stake_cents, t.seat_count, t.taken,
                               coalesce((SELECT array_agg(r.seat) FROM matchmaking.reservations r
                                         WHERE r.table_id = t.id AND r.is_live
                                           AND r.status IN ('pending','seated','staked')),
                                        '{}') AS seats
                        FROM matchmaking.tables t
                        WHERE t.status = 'waiting' AND NOT t.private AND NOT t.vs_cpu
                          AND NOT t.unlisted AND t.taken < t.seat_count
                          AND (CAST($1 AS text) IS NULL OR t.kind = $1)
                          AND (CAST($2 AS text) IS NULL OR t.tier = $2)
                        ORDER BY t.kind, t.tier, t.taken DESC, t.created_ms
                        LIMIT $3
            """,
            kind,
            tier,
            self.config.lobby_limit,
        )
        return c.Lobby(
            tables=[
                c.LobbyTable(
                    table_id=r["id"],
                    kind=r["kind"],
                    tier=r["tier"],
                    stake_cents=r["stake_cents"],
                    seat_count=r["seat_count"],
                    taken=r["taken"],
                    free_seats=[s for s in range(r["seat_count"]) if s not in r["seats"]],
                )
                for r in rows
            ]
        )

    async def table_status(self, table_id: str) -> c.TableStatus:
        return self._status(await self._load_table(table_id))

    async def _load_table(self, table_id: str) -> _TableDoc:
        raw = await self._call(_TABLE_SQL, lambda: (table_id,))
        if raw is None:
            raise not_found("table_not_found", f"no table {table_id}")
        return _decode_table(raw)

    def _status(self, t: _TableDoc) -> c.TableStatus:
        by_seat = {s[0]: s for s in t.seats}
        views = []
        for n in range(t.seat_count):
            s = by_seat.get(n)
            if s is not None:
                views.append(c.SeatView(n, s[1], False, s[2]))  # type: ignore[arg-type]
            else:
                views.append(c.SeatView(n, None, t.vs_cpu, None))
        return c.TableStatus(
            table_id=t.id,
            kind=t.kind,
            variant=t.variant,
            options=dict(CATALOGUE[t.kind].options),
            tier=t.tier,
            stake_cents=t.stake_cents,
            currency=t.currency,
            seat_count=t.seat_count,
            pairs=t.pairs,
            private=t.private,
            vs_cpu=t.vs_cpu,
            invite_code=t.invite_code,
            status=t.status,  # type: ignore[arg-type]
            seats=views,
            match_id=t.match_id,
            created_at_ms=t.created_ms,
            started_at_ms=t.started_ms,
        )

    async def _call(self, sql: str, args: Callable[[], Sequence[Any]]) -> Any:
        """One autocommit statement (a matchmaking function), retried when it lost a race.

        `args` is called per attempt so fresh ids are drawn after a unique violation. A
        refusal raised by a function (SQLSTATE 'MM<status>') becomes that ServiceError."""
        last: asyncpg.PostgresError | None = None
        for attempt in range(self.config.tx_attempts):
            try:
                return await self.db.fetchval(sql, *args())
            except asyncpg.PostgresError as exc:
                state = _sqlstate(exc)
                if state.startswith("MM"):
                    message = str(getattr(exc, "message", "") or "error")
                    raise ServiceError(
                        int(state[2:]), message, str(getattr(exc, "detail", "") or message)
                    ) from None
                if state not in RETRY_SQLSTATES:
                    raise
                last = exc
                await asyncio.sleep(0.001 * (attempt + 1))
        log.warning("tx_retries_exhausted", error=str(last)[:200])
        raise ServiceError(503, "busy", "too much contention; retry with the same key")

    async def player_tables(self, player_id: str) -> c.PlayerTables:
        """The player's live tables: waiting, starting or with a match still in play.

        Whether a match has ended is the engine's to say; a table found over is marked
        'finished' once, so later listings skip it without asking again.
        """
        rows = await self.db.fetch(
            "SELECT r.table_id, t.status, t.match_id FROM matchmaking.reservations r "
            "JOIN matchmaking.tables t ON t.id = r.table_id "
            "WHERE r.player_id = $1 AND r.is_live "
            "AND r.status IN ('pending','seated','staked') "
            "AND t.status NOT IN ('finished', 'voided') "
            "ORDER BY r.created_ms DESC LIMIT $2",
            player_id,
            self.config.lobby_limit,
        )
        live: list[str] = []
        for row in rows:
            match_id = row["match_id"]
            if row["status"] == "playing" and match_id and await self._match_over(match_id):
                await self.db.execute(
                    "UPDATE matchmaking.tables SET status = 'finished', updated_ms = $2 "
                    "WHERE id = $1 AND status = 'playing'",
                    row["table_id"],
                    self.clock(),
                )
                continue
            live.append(row["table_id"])
        return c.PlayerTables(tables=[await self.table_status(i) for i in live])

    async def _match_over(self, match_id: str) -> bool:
        """True when the engine reports the match finished or voided; unknown stays live."""
        try:
            state = await self.engine.get(f"/internal/matches/{match_id}", PublicMatchState)
        except (RemoteError, ServiceUnavailable):
            return False
        return state.status in ("finished", "void")

    # ------------------------------------------------------------------ joining

    async def join(self, spec: JoinSpec) -> c.JoinResult:
        """Reserve seats (one function call), place the holds, confirm (one more), start.

        A paid seat is 'pending' until its hold is placed and 'seated' after; the seat that
        fills the table starts it (pot move, engine create) before answering, outside any
        database transaction, so other joiners never wait on it."""
        players = [spec.player_id] + ([spec.partner_id] if spec.partner_id else [])
        if spec.partner_id is not None and spec.partner_id == spec.player_id:
            raise bad_request("partner_is_self", "a player cannot partner with himself")
        kind = CATALOGUE.get(spec.kind or "")
        tier = spec.tier or "free"
        now = self.clock()
        ids: list[str] = []
        match_id = "m-" + uuid.uuid4().hex

        def args() -> tuple[Any, ...]:
            ids[:] = ["r-" + uuid.uuid4().hex for _ in players]
            code = None
            if spec.op == "private":
                code = "".join(
                    secrets.choice(_INVITE_ALPHABET) for _ in range(self.config.invite_code_length)
                )
            return (
                spec.player_id,
                spec.idempotency_key,
                spec.op,
                spec.request_hash,
                players,
                spec.kind,
                tier,
                spec.invite_code,
                "t-" + uuid.uuid4().hex,
                kind.variant if kind else None,
                _options_json(kind) if kind else None,
                TIERS.get(tier, 0),
                self.currency,
                kind.seat_count if kind else None,
                kind.pairs if kind else None,
                code,
                list(ids),
                match_id,
                now,
                self.config.reservation_ttl_ms,
                self.config.max_tables_per_player,
                self.config.quick_join_candidates,
                spec.unlisted,
            )

        out = _decode_outcome(await self._call(_JOIN_SQL, args))
        if out.replay is not None:
            return self._replayed(out.replay, (out.body or "").encode())
        resumed = out.resume is not None
        try:
            if out.resume is not None:
                reservations = await self._load_reservations(out.resume)
                out = await self._settle(reservations, match_id)
            elif out.seats is not None:
                reservations = self._reserved(out, ids, players, now)
                out = await self._settle(reservations, match_id)
            else:
                reservations = _mine(_table_of(out), ids)
        except ServiceError as exc:
            if exc.status != 503:
                await self._store_response(spec, exc.status, _error_body(exc))
            raise
        table = _table_of(out)
        if out.start:
            table = await self._start(table)
        # A success is not stored: a retry resumes from the reservation ids the first attempt
        # recorded and answers with the table as it is now (`replayed: true`).
        return c.JoinResult(
            table=self._status(table),
            reservations=[
                c.ReservationView(r.id, r.player_id, r.seat, r.expires_ms) for r in reservations
            ],
            replayed=resumed,
        )

    def _reserved(self, out: _Outcome, ids: list[str], players: list[str], now: int) -> list[Res]:
        """A paid join's pending seats, from its own ids and the seats the function chose."""
        seats = out.seats or []
        if out.table_id is None or len(seats) != len(ids) or len(ids) != len(players):
            raise ServiceError(500, "internal", "matchmaking.join answered no seat per player")
        expires_ms = now + self.config.reservation_ttl_ms  # as the function set it
        return [
            Res(rid, out.table_id, seat, player, "pending", out.stake_cents, expires_ms)
            for rid, seat, player in zip(ids, seats, players, strict=True)
        ]

    async def _settle(self, reservations: list[Res], match_id: str) -> _Outcome:
        """Place the holds of the pending seats, then confirm every seat of the join."""
        pending = [r for r in reservations if r.status == "pending"]
        if pending:
            await self._place_holds(pending)
        out = await self._confirm(reservations[0].table_id, [r.id for r in reservations], match_id)
        if out.gone:
            raise conflict("reservation_dropped", "the seat was released before it was held")
        return out

    async def _confirm(self, table_id: str, ids: list[str], match_id: str) -> _Outcome:
        now = self.clock()
        raw = await self._call(_CONFIRM_SQL, lambda: (table_id, ids, match_id, now))
        return _decode_outcome(raw)

    def _replayed(self, status: int, body: bytes) -> c.JoinResult:
        if status != 200:
            err = msgspec.json.decode(body)
            raise ServiceError(status, err["error"], err["detail"])
        result = msgspec.json.decode(body, type=c.JoinResult)
        return msgspec.structs.replace(result, replayed=True)

    async def _retrying(self, work: Callable[[asyncpg.Connection], Any]) -> Any:
        """A multi-statement transaction (rare paths: refusals, repairs, expiry), retried."""
        last: asyncpg.PostgresError | None = None
        for attempt in range(self.config.tx_attempts):
            try:
                async with self.db.acquire() as conn, conn.transaction():
                    return await work(conn)
            except asyncpg.PostgresError as exc:
                if _sqlstate(exc) not in RETRY_SQLSTATES:
                    raise
                last = exc
                await asyncio.sleep(0.001 * (attempt + 1))
        log.warning("tx_retries_exhausted", error=str(last)[:200])
        raise ServiceError(503, "busy", "too much contention; retry with the same key")

    async def _store_response(self, spec: JoinSpec | c.Leave, status: int, body: bytes) -> None:
        await self.db.execute(
            "UPDATE matchmaking.requests SET response = $1, response_status = $2 "
            "WHERE player_id = $3 AND idempotency_key = $4",
            body,
            status,
            spec.player_id,
            spec.idempotency_key,
        )

    async def _load_reservations(self, ids: Sequence[str]) -> list[Res]:
        rows = await self.db.fetch(
            "SELECT id, table_id, seat, player_id, status, stake_cents, expires_ms "
            "FROM matchmaking.reservations WHERE id = ANY($1) ORDER BY seat",
            list(ids),
        )
        return [Res(**r) for r in rows]

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

    async def _place_holds(self, pending: list[Res]) -> None:
        """Place the holds of 'pending' seats, or give every seat of the join up.

        A refusal drops the join's seats (held ones released) and is answered with the
        ledger's code; an unreachable ledger leaves the seats pending (a retry with the same
        key, or the sweeper, places the same holds under the same keys)."""
        if len(pending) == 1:
            outcomes = [await self._hold(pending[0])]
        else:
            outcomes = list(await asyncio.gather(*(self._hold(r) for r in pending)))
        refused = [o for o in outcomes if isinstance(o, RemoteError)]
        if refused:
            held = [r for r, o in zip(pending, outcomes, strict=True) if o is None]
            await self._drop(pending, held, reason=refused[0].code)
            first = refused[0]
            raise ServiceError(422 if first.status < 500 else 503, first.code, first.detail)
        if any(isinstance(o, ServiceUnavailable) for o in outcomes):
            raise ServiceError(503, "ledger_unavailable", "the ledger did not answer; retry")

    async def _drop(self, failed: list[Res], held: list[Res], reason: str) -> None:
        """Give up seats: refused ones become 'failed', held ones are released."""
        table_id = failed[0].table_id
        now = self.clock()

        async def work(conn: asyncpg.Connection) -> None:
            await conn.execute(
                "SELECT 1 FROM matchmaking.tables WHERE id = $1 FOR UPDATE", table_id
            )
            held_ids = [r.id for r in held]
            for r in failed:
                await conn.execute(
                    "UPDATE matchmaking.reservations SET status = $1, reason = $2, "
                    "updated_ms = $3 WHERE id = $4 AND status IN ('pending','seated')",
                    "releasing" if r.id in held_ids else "failed",
                    reason,
                    now,
                    r.id,
                )
            await self._recount(conn, table_id, now)

        await self._retrying(work)
        for r in held:
            await self._release(r.id)

    async def _recount(self, conn: asyncpg.Connection, table_id: str, now: int) -> None:
        await conn.execute(
            "UPDATE matchmaking.tables SET updated_ms = $1, taken = (SELECT count(*) FROM "
            "matchmaking.reservations r WHERE r.table_id = $2 AND r.is_live "
            "AND r.status IN ('pending','seated','staked')) WHERE id = $2",
            now,
            table_id,
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
        await self.db.execute(
            "UPDATE matchmaking.reservations SET status = 'released', updated_ms = $1 "
            "WHERE id = $2 AND status = 'releasing'",
            self.clock(),
            reservation_id,
        )
        return True

    # ------------------------------------------------------------------ leaving and expiry

    async def leave(self, req: c.Leave) -> c.LeaveResult:
        """One function call frees the seat; then the hold is released through the ledger."""
        digest = _hash(req)
        now = self.clock()
        raw = await self._call(
            _LEAVE_SQL, lambda: (req.player_id, req.idempotency_key, digest, req.table_id, now)
        )
        out = msgspec.json.decode(raw, type=_LeaveOutcome)
        if out.replay is not None:
            body = (out.body or "").encode()
            if out.replay != 200:
                err = msgspec.json.decode(body)
                raise ServiceError(out.replay, err["error"], err["detail"])
            result = msgspec.json.decode(body, type=c.LeaveResult)
            return msgspec.structs.replace(result, replayed=True)
        if out.resume is not None:
            # A retry of a leave that stopped before its answer: finish the same release.
            if out.table_id != req.table_id or len(out.resume) != 1:
                raise conflict("idempotency_key_reused", "key used by another request")
            reservation_id = out.resume[0]
            found = await self._load_reservations([reservation_id])
            stake = found[0].stake_cents if found else 0
        else:
            reservation_id, stake = out.reservation_id or "", out.stake_cents
        released = True
        if stake > 0:
            # If the ledger is down the seat is already free; the sweeper finishes the release.
            released = await self._release(reservation_id)
        result = c.LeaveResult(table_id=req.table_id, player_id=req.player_id, released=released)
        await self._store_response(req, 200, msgspec.json.encode(result))
        if out.resume is not None:
            return msgspec.structs.replace(result, replayed=True)
        return result

    async def heartbeat(self, req: c.Heartbeat, *, disconnect: bool = False) -> c.HeartbeatResult:
        now = self.clock()
        if disconnect:
            expr = "LEAST(expires_ms, CAST($3 AS bigint) + CAST($4 AS bigint))"
            extra_ms = self.config.disconnect_grace_ms
        else:
            expr = "CAST($3 AS bigint) + CAST($4 AS bigint)"
            extra_ms = self.config.reservation_ttl_ms
        expires_ms = await self.db.fetchval(
            f"UPDATE matchmaking.reservations SET expires_ms = {expr} "  # noqa: S608 (`expr` is one of two fixed SQL expressions; values are bound)
            "WHERE table_id = $1 AND player_id = $2 AND is_live "
            "AND status IN ('pending','seated') "
            "RETURNING expires_ms",
            req.table_id,
            req.player_id,
            now,
            extra_ms,
        )
        if expires_ms is None:
            raise not_found("not_seated", "the player has no reservation waiting at this table")
        return c.HeartbeatResult(req.table_id, req.player_id, expires_ms)

    # ------------------------------------------------------------------ starting

    async def _try_start(self, table_id: str) -> None:
        """Start a waiting table if it is full of held seats (the sweeper's retry)."""
        out = await self._confirm(table_id, [], "m-" + uuid.uuid4().hex)
        if out.start and out.table is not None:
            await self._start(out.table)

    async def _start(self, table: _TableDoc) -> _TableDoc:
        """Pot move (paid tables), then the engine; returns the table as it ends up."""
        if table.status == "starting" and not await self._move_pot(table):
            return await self._load_table(table.id)
        return await self._create_match(table)

    async def _move_pot(self, table: _TableDoc) -> bool:
        """One ledger call: every hold into the pot. True when the pot exists.

        The table stays 'starting' until the engine has the match (`mark_started`): a crash
        in between repeats this call under the same key, which the ledger answers again."""
        match_id = table.match_id or ""
        request = StartMatchRequest(
            idempotency_key=f"mm-start:{match_id}",
            match_id=match_id,
            tier=table.tier,
            variant=table.variant,
            seats=[SeatStake(seat=s[0], player=s[1], reservation_id=s[3]) for s in table.seats],
            currency=self.currency,
        )
        try:
            await self.ledger.post("/v1/matches/start", request, EntryResult)
        except ServiceUnavailable:
            log.warning("pot_move_unavailable", table=table.id, match=match_id)
            return False
        except RemoteError as exc:
            if exc.status >= 500:
                return False
            await self._pot_refused(table, exc)
            return False
        return True

    async def _pot_refused(self, table: _TableDoc, exc: RemoteError) -> None:
        """Nobody was charged. Drop the seat(s) the ledger named; the table waits again."""
        named = set(exc.refs.get("reservations", ()))
        bad = [s[3] for s in table.seats if s[3] in named]
        log.warning("pot_move_refused", table=table.id, code=exc.code, dropped=len(bad))
        now = self.clock()

        async def work(conn: asyncpg.Connection) -> None:
            await conn.execute(
                "SELECT 1 FROM matchmaking.tables WHERE id = $1 FOR UPDATE", table.id
            )
            await conn.execute(
                "UPDATE matchmaking.tables SET status = 'waiting', match_id = NULL, "
                "updated_ms = $1 WHERE id = $2 AND status = 'starting' AND match_id = $3",
                now,
                table.id,
                table.match_id,
            )
            await conn.execute(
                "UPDATE matchmaking.reservations SET status = 'releasing', reason = $1, "
                "updated_ms = $2 WHERE id = ANY($3) AND status = 'seated'",
                f"pot:{exc.code}",
                now,
                bad,
            )
            await self._recount(conn, table.id, now)

        await self._retrying(work)
        for reservation_id in bad:
            await self._release(reservation_id)

    async def _mark_started(self, table: _TableDoc, status: str) -> _TableDoc:
        now = self.clock()
        raw = await self._call(_MARK_STARTED_SQL, lambda: (table.id, table.match_id, status, now))
        return _decode_table(raw) if raw is not None else await self._load_table(table.id)

    async def _create_match(self, table: _TableDoc) -> _TableDoc:
        """Hand a started (or starting, pot moved) table to the engine; 'playing' once it has it."""
        if table.status not in ("starting", "started") or table.match_id is None:
            return table
        by_seat = {s[0]: s for s in table.seats}
        specs = []
        for n in range(table.seat_count):
            s = by_seat.get(n)
            if s is None:
                specs.append(SeatSpec(seat=n, bot=True))
            else:
                hold = s[3] if table.stake_cents else None
                specs.append(SeatSpec(seat=n, player_id=s[1], hold_id=hold))
        request = CreateMatch(
            match_id=table.match_id,
            variant=table.variant,
            options=dict(CATALOGUE[table.kind].options),
            seats=specs,
            tier=table.tier,  # type: ignore[arg-type]
            stake_cents=table.stake_cents,
            currency=table.currency,
            table_id=table.id,
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
                return await self._mark_started(table, "playing")
            await asyncio.sleep(self.config.engine_retry_ms / 1000 * (attempt + 1))
        # The pot exists: record it ('started', seats staked) before anything else.
        table = await self._mark_started(table, "started")
        if refusal is None:
            return table  # the sweeper keeps trying
        log.error("engine_refused_match", table=table.id, code=refusal.code)
        if table.stake_cents > 0:
            try:
                await self.ledger.post(
                    "/v1/matches/void",
                    VoidMatchRequest(
                        idempotency_key=f"mm-void:{table.match_id}",
                        match_id=table.match_id or "",
                        reason=f"engine refused: {refusal.code}"[:200],
                    ),
                    EntryResult,
                )
            except (ServiceUnavailable, RemoteError) as exc:
                log.error("void_failed", table=table.id, error=str(exc)[:200])
                return table
        await self._set_status(table.id, "started", "voided")
        return await self._load_table(table.id)

    async def _set_status(self, table_id: str, old: str, new: str) -> None:
        await self.db.execute(
            "UPDATE matchmaking.tables SET status = $1, updated_ms = $2 "
            "WHERE id = $3 AND status = $4",
            new,
            self.clock(),
            table_id,
            old,
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
        stale = now - self.config.repair_after_ms
        async with self.db.acquire() as conn:
            expired = await conn.fetch(
                "SELECT r.id, r.table_id FROM matchmaking.reservations r "
                "JOIN matchmaking.tables t ON t.id = r.table_id "
                "WHERE r.is_open AND r.status = 'seated' AND r.expires_ms < $1 "
                "AND t.status = 'waiting' ORDER BY r.expires_ms LIMIT $2",
                now,
                batch,
            )
            stuck = await conn.fetch(
                "SELECT id, table_id, seat, player_id, status, stake_cents, expires_ms "
                "FROM matchmaking.reservations WHERE is_open "
                "AND status IN ('pending','releasing') "
                "AND updated_ms < $1 ORDER BY updated_ms LIMIT $2",
                stale,
                batch,
            )
            tables = await conn.fetch(
                "SELECT id, status, match_id FROM matchmaking.tables "
                "WHERE (status IN ('starting','started') OR (status = 'waiting' "
                "AND taken = seat_count)) AND updated_ms < $1 "
                "ORDER BY updated_ms LIMIT $2",
                stale,
                batch,
            )
            purged = await conn.fetch(
                "DELETE FROM matchmaking.requests WHERE ctid = ANY(ARRAY(SELECT ctid FROM "
                "matchmaking.requests WHERE created_ms < $1 ORDER BY created_ms "
                "LIMIT $2)) RETURNING 1",
                now - self.config.request_retention_ms,
                batch,
            )
            counts["purged"] = len(purged)
        for row in expired:
            if await self._expire(row["id"], row["table_id"]):
                counts["expired"] += 1
        for r in stuck:
            res = Res(**r)
            if res.status == "pending":
                counts["pending"] += 1
                await self._repair_pending(res)
            else:
                counts["releasing"] += 1
                await self._release(res.id)
        for t in tables:
            if t["status"] == "waiting":
                # full but not started (a refused pot move named no seat): try again
                counts["full"] += 1
                await self._try_start(t["id"])
                continue
            counts[t["status"]] += 1
            await self._start(await self._load_table(t["id"]))
        return counts

    async def _expire(self, reservation_id: str, table_id: str) -> bool:
        now = self.clock()

        async def work(conn: asyncpg.Connection) -> bool:
            locked = await conn.fetchval(
                "SELECT status FROM matchmaking.tables WHERE id = $1 FOR UPDATE", table_id
            )
            if locked != "waiting":
                return False
            changed = await conn.fetchrow(
                "UPDATE matchmaking.reservations SET status = CASE WHEN stake_cents > 0 "
                "THEN 'releasing' ELSE 'released' END, reason = 'expired', "
                "updated_ms = $1 WHERE id = $2 AND status = 'seated' "
                "AND expires_ms < $1 RETURNING stake_cents",
                now,
                reservation_id,
            )
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
        out = await self._confirm(r.table_id, [r.id], "m-" + uuid.uuid4().hex)
        if out.start and out.table is not None:
            await self._start(out.table)


def _error_body(exc: ServiceError) -> bytes:
    return msgspec.json.encode({"error": exc.code, "detail": exc.detail})


_table_decoder = msgspec.json.Decoder(_TableDoc)
_outcome_decoder = msgspec.json.Decoder(_Outcome)


def _decode_table(raw: str) -> _TableDoc:
    return _table_decoder.decode(raw)


def _decode_outcome(raw: str) -> _Outcome:
    return _outcome_decoder.decode(raw)


def _table_of(out: _Outcome) -> _TableDoc:
    if out.table is None:
        raise ServiceError(500, "internal", "matchmaking function returned no table")
    return out.table


def _mine(table: _TableDoc, ids: list[str]) -> list[Res]:
    """The join's own reservations, read from the table document the function returned."""
    mine = [
        Res(s[3], table.id, s[0], s[1], s[2], table.stake_cents, s[4])
        for s in table.seats
        if s[3] in ids
    ]
    if len(mine) != len(ids):
        raise ServiceError(500, "internal", "a reserved seat is missing from its table")
    return mine


def _options_json(kind: Kind) -> str:
    return msgspec.json.encode(kind.options).decode()
