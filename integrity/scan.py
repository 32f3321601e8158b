"""The integrity scan: read the histories through the ledger's and engine's contracts and the
gateway's seat observations, run every detector, store the alerts.

- Single runner: the scan holds a PostgreSQL advisory lock (`SCAN_LOCK_KEY`) while it runs;
  a second gateway (or `mesa integrity scan`) that finds it taken skips that round.
- Incremental: cursors (`integrity.scan_cursors`) remember the newest settlement, cashier
  entry, finished match and seat observation seen; a round that finds nothing newer does
  nothing. A round that does find something reads the detectors' whole window
  (`lookback_h`) again, at most `MAX_ROWS_PER_SOURCE` rows of each history, because the
  detectors' figures (a pair's net flow, a player's timing spread) are over the window.
- Idempotent: every alert has a dedup key; a rescan updates the open alert.
- Deliberate losing: the played hands of the window's finished matches come from the
  engine's hands route (true deal and moves), the newest `losing_max_hands` of them, with each
  match's stake and currency from the ledger's pots and its private flag from the seat
  observations; `integrity.losing.scan_losing` replays them in a worker thread (it is pure
  CPU) and each outlier becomes a `deliberate_losing` alert, one per player and month, with
  the gifted hands (deal and match) as evidence.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Protocol

import msgspec
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from integrity import store
from integrity.config import IntegrityConfig
from integrity.detectors import detect
from integrity.losing import HandRecord, LosingReport, MoveRecord, ScanLimits, scan_losing
from integrity.models import (
    ActionTiming,
    CashierMove,
    EvidenceRef,
    History,
    NewAlert,
    PotRecord,
    SeatResult,
    SeatSighting,
)
from integrity.schema import SCAN_LOCK_KEY
from services.common.http import InternalClient
from services.engine.contract import MAX_HANDS_PAGE, MAX_TIMINGS_PAGE, HandPage, TimingPage
from services.ledger.contract import MAX_INTEGRITY_PAGE, CashierMovePage, SettledPotPage

MAX_ROWS_PER_SOURCE = 200_000


class Sources(Protocol):
    """Where the histories come from (the services' contracts; a fake in tests)."""

    async def pots(self, since: str, after: int) -> SettledPotPage: ...

    async def cashier(self, since: str, after: int) -> CashierMovePage: ...

    async def timings(self, since: str, after: str | None) -> TimingPage: ...

    async def hands(
        self, since: str, after: str | None, limit: int = MAX_HANDS_PAGE, newest_first: bool = False
    ) -> HandPage: ...


class ContractSources:
    """The ledger's and engine's integrity routes over their internal clients."""

    def __init__(self, ledger: InternalClient, engine: InternalClient) -> None:
        self.ledger = ledger
        self.engine = engine

    async def pots(self, since: str, after: int) -> SettledPotPage:
        params = {"since": since, "after": after, "limit": MAX_INTEGRITY_PAGE}
        return await self.ledger.get("/v1/integrity/pots", SettledPotPage, params)

    async def cashier(self, since: str, after: int) -> CashierMovePage:
        params = {"since": since, "after": after, "limit": MAX_INTEGRITY_PAGE}
        return await self.ledger.get("/v1/integrity/cashier", CashierMovePage, params)

    async def timings(self, since: str, after: str | None) -> TimingPage:
        params: dict[str, str | int] = {"since": since, "limit": MAX_TIMINGS_PAGE}
        if after:
            params["after"] = after
        return await self.engine.get("/internal/integrity/timings", TimingPage, params)

    async def hands(
        self, since: str, after: str | None, limit: int = MAX_HANDS_PAGE, newest_first: bool = False
    ) -> HandPage:
        params: dict[str, str | int] = {"since": since, "limit": limit}
        if after:
            params["after"] = after
        if newest_first:
            params["newest_first"] = "true"
        return await self.engine.get("/internal/integrity/hands", HandPage, params)


class ScanReport(msgspec.Struct, frozen=True):
    ran: bool
    why: str  # "scanned", "nothing new", "another scan is running"
    pots: int = 0
    moves: int = 0
    matches_timed: int = 0
    sightings: int = 0
    hands: int = 0  # hands replayed by the deliberate-losing detector
    alerts: int = 0
    new_alerts: int = 0


def _ms(iso: str) -> int:
    return int(dt.datetime.fromisoformat(iso).timestamp() * 1000)


async def _nothing_new(db: AsyncEngine, sources: Sources, since: str) -> bool:
    pots_at = int(await store.get_cursor(db, "pots") or 0)
    cashier_at = int(await store.get_cursor(db, "cashier") or 0)
    timings_at = await store.get_cursor(db, "timings")
    seats_at = int(await store.get_cursor(db, "seats") or 0)
    far_past = dt.datetime.fromtimestamp(0, dt.UTC)
    return (
        not (await sources.pots(since, pots_at)).pots
        and not (await sources.cashier(since, cashier_at)).moves
        and not (await sources.timings(since, timings_at)).matches
        and not await store.sightings(db, since=far_past, after_id=seats_at, limit=1)
    )


async def read_history(
    db: AsyncEngine, sources: Sources, since: dt.datetime
) -> tuple[History, dict[str, str]]:
    """Every history since `since` (bounded), and the cursors it reached."""
    iso = since.isoformat()
    cursors: dict[str, str] = {}
    sighted: list[tuple[int, SeatSighting]] = []
    after_id = 0
    while len(sighted) < MAX_ROWS_PER_SOURCE:
        page = await store.sightings(db, since=since, after_id=after_id)
        if not page:
            break
        sighted.extend(page)
        after_id = page[-1][0]
    if sighted:
        cursors["seats"] = str(sighted[-1][0])
    private = {s.match_id: s.private for _, s in sighted}

    pots: list[PotRecord] = []
    after = 0
    while len(pots) < MAX_ROWS_PER_SOURCE:
        pot_page = await sources.pots(iso, after)
        for p in pot_page.pots:
            pots.append(
                PotRecord(
                    match_id=p.match_id,
                    tier=p.tier,
                    variant=p.variant,
                    currency=p.currency,
                    closed_at_ms=_ms(p.closed_at),
                    seats=[SeatResult(s.player, s.stake, s.payout) for s in p.seats],
                    private=private.get(p.match_id),
                )
            )
            cursors["pots"] = str(p.close_entry_id)
        if pot_page.next is None:
            break
        after = pot_page.next

    moves: list[CashierMove] = []
    after = 0
    while len(moves) < MAX_ROWS_PER_SOURCE:
        move_page = await sources.cashier(iso, after)
        for m in move_page.moves:
            if m.kind in ("deposit", "withdrawal"):
                moves.append(
                    CashierMove(
                        m.entry_id,
                        m.kind,  # type: ignore[arg-type]
                        m.player,
                        m.amount,
                        m.currency,
                        _ms(m.created_at),
                    )
                )
            cursors["cashier"] = str(m.entry_id)
        if move_page.next is None:
            break
        after = move_page.next

    timings: list[ActionTiming] = []
    cursor: str | None = None
    matches = 0
    while len(timings) < MAX_ROWS_PER_SOURCE:
        timing_page = await sources.timings(iso, cursor)
        for match in timing_page.matches:
            matches += 1
            timings.extend(
                ActionTiming(match.match_id, t.player, t.delta_ms, t.at_ms) for t in match.timings
            )
        if timing_page.next is not None:
            cursor = cursors["timings"] = timing_page.next
        if not timing_page.more:
            break
    history = History(pots=pots, moves=moves, timings=timings, sightings=[s for _, s in sighted])
    return history, cursors


async def read_hands(
    sources: Sources, since: dt.datetime, pots: list[PotRecord], max_hands: int
) -> list[HandRecord]:
    """The newest `max_hands` played hands of the window's finished matches, in the order
    they were played, as the deliberate-losing detector reads them. They are read newest
    first, so past the cap the oldest are left out, never a recent dumper's."""
    money: dict[str, tuple[int, str, bool | None]] = {
        p.match_id: (max((s.stake for s in p.seats), default=0), p.currency, p.private)
        for p in pots
    }
    out: list[HandRecord] = []
    cursor: str | None = None
    iso = since.isoformat()
    while len(out) < max_hands:
        page = await sources.hands(iso, cursor, newest_first=True)
        for h in page.hands[: max_hands - len(out)]:
            stake, currency, private = money.get(h.match_id, (0, "USD", None))
            out.append(
                HandRecord(
                    deal_id=h.deal_id,
                    match_id=h.match_id,
                    variant=h.variant,
                    options=h.options,
                    players=tuple(h.players),
                    hands=tuple(tuple(x) for x in h.hands),
                    stock=tuple(h.stock),
                    opener=h.opener,
                    first_hand=h.first_hand,
                    scores=tuple(h.scores),
                    moves=tuple(MoveRecord(m.tile, m.end, m.seat) for m in h.moves),
                    stake_cents=stake,
                    currency=currency,
                    private=bool(private),
                )
            )
        if page.next is not None:
            cursor = page.next
        if not page.more:
            break
    out.reverse()
    return out


def losing_alerts(report: LosingReport, month: str, z_alert: float = 4.0) -> list[NewAlert]:
    """A `deliberate_losing` alert per outlier, keyed by player and month: the gifts as
    `deal` evidence (with their match) and the gifted hands' matches as `match` evidence, so
    the compliance screen links to the hands. Its score is `chance_z` over its threshold, as
    the other detectors' scores are their figure over their threshold."""
    out = []
    for f in report.outliers:
        evidence = [
            EvidenceRef(
                kind="deal",
                ref=e.deal_id,
                detail={
                    "match_id": e.match_id,
                    "move_index": e.move_index,
                    "tile": e.tile,
                    "counterpart": e.counterpart,
                    "stake_cents": e.stake_cents,
                    "currency": e.currency,
                    "private": e.private,
                },
            )
            for e in f.evidence
        ]
        matches: dict[str, EvidenceRef] = {}
        for e in f.evidence:
            matches.setdefault(
                e.match_id,
                EvidenceRef(kind="match", ref=e.match_id, detail={"private": e.private}),
            )
        figures: dict[str, int | float | str | bool | None] = {
            "score": round(f.score, 4),
            "gifts": f.gifts,
            "opportunities": f.opportunities,
            "hands": f.hands,
            "chance_rate": round(f.chance_rate, 4),
            "chance_z": round(f.chance_z, 2),
            "population_rate": round(f.population_rate, 4),
            "cpu_baseline_rate": f.cpu_baseline_rate,
            "z_score": None if f.z_score is None else round(f.z_score, 2),
            "percentile": None if f.percentile is None else round(f.percentile, 4),
            "wilson_low": round(f.wilson_low, 4),
            "paid_gifts": f.paid_gifts,
            "private_gifts": f.private_gifts,
            "counterpart_gifts": f.counterpart_gifts,
        }
        # One currency shown as money; several (rare) as a count of gifts only.
        if len(f.counterpart_stakes) == 1:
            [(currency, cents)] = f.counterpart_stakes.items()
            figures["currency"] = currency
            figures["counterpart_stake_cents"] = cents
        out.append(
            NewAlert(
                kind="deliberate_losing",
                player=f.player,
                counterpart=f.top_counterpart,
                dedup_key=f"{f.dedup_key}:{month}",
                score=round(f.chance_z / z_alert, 3),
                figures=figures,
                evidence=[*evidence, *matches.values()],
            )
        )
    return out


async def scan(
    db: AsyncEngine,
    sources: Sources,
    cfg: IntegrityConfig,
    *,
    now: dt.datetime | None = None,
    since: dt.datetime | None = None,
) -> ScanReport:
    """One round: under the advisory lock, read the window, detect, store. `since` overrides
    the window's start (and forces a round even when nothing is new)."""
    now = now or dt.datetime.now(dt.UTC)
    start = since or now - dt.timedelta(hours=cfg.lookback_h)
    async with db.connect() as lock_conn:
        got = (
            await lock_conn.execute(
                sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": SCAN_LOCK_KEY}
            )
        ).scalar_one()
        await lock_conn.commit()
        if not got:
            return ScanReport(ran=False, why="another scan is running")
        try:
            if since is None and await _nothing_new(db, sources, start.isoformat()):
                return ScanReport(ran=False, why="nothing new")
            history, cursors = await read_history(db, sources, start)
            alerts = detect(history, cfg)
            hands = await read_hands(sources, start, history.pots, cfg.losing_max_hands)
            if hands:
                limits = ScanLimits(
                    max_hands=cfg.losing_max_hands,
                    min_opportunities=cfg.losing_min_opportunities,
                    z_alert=cfg.losing_z_alert,
                )
                losing = await asyncio.to_thread(scan_losing, hands, limits)
                alerts.extend(losing_alerts(losing, now.strftime("%Y-%m"), cfg.losing_z_alert))
            raised: list[store.Raised] = []
            for i in range(0, len(alerts), store.MAX_RAISE_BATCH):
                raised.extend(await store.raise_alerts(db, alerts[i : i + store.MAX_RAISE_BATCH]))
            for name, position in cursors.items():
                await store.set_cursor(db, name, position)
            return ScanReport(
                ran=True,
                why="scanned",
                pots=len(history.pots),
                moves=len(history.moves),
                matches_timed=len({t.match_id for t in history.timings}),
                sightings=len(history.sightings),
                hands=len(hands),
                alerts=len(raised),
                new_alerts=sum(1 for r in raised if r.created),
            )
        finally:
            await lock_conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": SCAN_LOCK_KEY})
            await lock_conn.commit()
