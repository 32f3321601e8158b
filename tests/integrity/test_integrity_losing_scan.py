"""Issue 29 wired: the integrity scan runs the deliberate-losing detector over the finished
hands it reads through the engine's hands route (here a fake serving hands played with the
real rules: a planted dumper among honest players), stores one `deliberate_losing` alert per
player and month with the gifted hands as evidence, raises nothing new on a rescan, and flags
no honest player. Real PostgreSQL for the integrity store."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterable

import pytest

from integrity import scan as scan_module
from integrity import store
from integrity.config import IntegrityConfig
from integrity.losing import HandRecord, LosingReport, ScanLimits, scan_losing
from integrity.scan import scan
from services.common.db import create_engine
from services.common.migrate import upgrade
from services.engine.contract import FinishedHand, HandMove, HandPage, TimingPage
from services.ledger.contract import CashierMovePage, PotSeat, SettledPot, SettledPotPage
from tests.api.platform_stack import COMPONENTS
from tests.integrity.test_losing import history

PREFIX = "ls_"
CLOSED_MS = 1_764_000_000_000
PAGE = 40


@pytest.fixture(scope="module")
def platform_db(database_url: str) -> str:
    upgrade(database_url, COMPONENTS)
    return database_url


def _finished(h: HandRecord) -> FinishedHand:
    return FinishedHand(
        deal_id=PREFIX + h.deal_id,
        match_id=PREFIX + h.match_id,
        tier="80",
        variant=h.variant,
        options=dict(h.options),
        players=[None if p is None else PREFIX + p for p in h.players],
        hands=[list(x) for x in h.hands],
        stock=list(h.stock),
        opener=h.opener,
        first_hand=h.first_hand,
        scores=list(h.scores),
        moves=[HandMove(m.tile, m.end, m.seat) for m in h.moves],
        closed_at_ms=CLOSED_MS,
    )


class HandSources:
    """The engine's hands pages (`hands` in the order played; cursor: how many hands were
    served, from the newest end when read newest first) and the ledger's pot of each ring
    match; nothing else."""

    def __init__(self, hands: list[FinishedHand], pots: list[SettledPot]) -> None:
        self.served = hands
        self.settled = pots
        self.pages = 0

    async def pots(self, since: str, after: int) -> SettledPotPage:
        return SettledPotPage(pots=[p for p in self.settled if p.close_entry_id > after])

    async def cashier(self, since: str, after: int) -> CashierMovePage:
        return CashierMovePage(moves=[])

    async def timings(self, since: str, after: str | None) -> TimingPage:
        return TimingPage(matches=[])

    async def hands(
        self, since: str, after: str | None, limit: int = PAGE, newest_first: bool = False
    ) -> HandPage:
        self.pages += 1
        start = int(after or 0)
        served = self.served[::-1] if newest_first else self.served
        page = served[start : start + min(limit, PAGE)]
        end = start + len(page)
        return HandPage(hands=page, next=str(end) if page else after, more=end < len(self.served))


async def test_the_scan_flags_the_planted_dumper_once_with_his_hands_and_no_honest_player(
    platform_db: str,
) -> None:
    played, kinds = history(seed=7, honest=30, hands_each=100, rings=1)
    hands = [_finished(h) for h in played]
    ring = {h.deal_id for h in hands if PREFIX + "dumper0" in h.players}
    ring_match = PREFIX + "m-r0"
    closed = dt.datetime.fromtimestamp(CLOSED_MS / 1000, dt.UTC).isoformat()
    pot = SettledPot(
        match_id=ring_match,
        tier="80",
        variant="dominicana",
        currency="USD",
        closed_at=closed,
        close_entry_id=1,
        seats=[
            PotSeat(0, PREFIX + "dumper0", 8000, 0),
            PotSeat(1, PREFIX + "friend0", 8000, 14400),
        ],
    )
    sources = HandSources(hands, [pot])
    db = create_engine(platform_db, application_name="losing-scan-test", pool_size=3)
    try:
        # the gateway saw the ring's seats taken at a private table
        for seat in pot.seats:
            await store.record_seat(
                db,
                match_id=ring_match,
                player=seat.player,
                tier="80",
                private=True,
                address_hash=store.keyed_hash(b"k", seat.player),
                device_hash=None,
            )
        since = dt.datetime.fromtimestamp(CLOSED_MS / 1000 - 86400, dt.UTC)
        now = dt.datetime.now(dt.UTC)
        began = time.perf_counter()
        first = await scan(db, sources, IntegrityConfig(), since=since, now=now)
        took_s = time.perf_counter() - began
        print(f"deliberate-losing scan: {first.hands} hands in {took_s:.2f} s")
        assert first.ran and first.hands == len(hands) == 1600
        assert sources.pages >= len(hands) // PAGE  # read a page at a time, every page

        page = await store.list_alerts(db, kind="deliberate_losing", limit=200)
        mine = [a for a in page.alerts if a.player.startswith(PREFIX)]
        assert [(a.player, a.counterpart) for a in mine] == [
            (PREFIX + "dumper0", PREFIX + "friend0")
        ]
        [alert] = mine
        assert alert.dedup_key == f"deliberate_losing:{PREFIX}dumper0:{now:%Y-%m}"
        assert alert.figures["gifts"] >= 12 and alert.figures["score"] > 0.9
        assert alert.score == pytest.approx(alert.figures["chance_z"] / 4.0, abs=0.01)
        assert alert.score >= 1  # past its threshold, on the other detectors' scale
        assert alert.figures["cpu_baseline_rate"] == 0.0
        assert alert.figures["private_gifts"] == alert.figures["gifts"]
        assert alert.figures["currency"] == "USD"
        assert alert.figures["counterpart_stake_cents"] == 8000 * alert.figures["gifts"]
        _, evidence = await store.get_alert(db, alert.id)
        deals = [e for e in evidence if e.kind == "deal"]
        assert deals and {e.ref for e in deals} <= ring
        assert all(e.detail["match_id"] == ring_match for e in deals)
        assert all(e.detail["counterpart"] == PREFIX + "friend0" for e in deals)
        assert all(e.detail["stake_cents"] == 8000 and e.detail["private"] for e in deals)
        assert [(e.kind, e.ref) for e in evidence if e.kind == "match"] == [("match", ring_match)]

        # the honest players (CPU-like, random, hasty) and the friend: no such alert
        assert {kinds[a.player.removeprefix(PREFIX)] for a in mine} == {"dumper"}

        # a rescan of the same window: the same alert, nothing new, no evidence added
        again = await scan(db, sources, IntegrityConfig(), since=since, now=now)
        assert again.ran and again.new_alerts == 0
        page = await store.list_alerts(db, kind="deliberate_losing", limit=200)
        assert [a.id for a in page.alerts if a.player.startswith(PREFIX)] == [alert.id]
        _, evidence_again = await store.get_alert(db, alert.id)
        assert len(evidence_again) == len(evidence)
        # and the incremental round finds nothing newer (the cursors reached the end)
        idle = await scan(db, sources, IntegrityConfig(), now=now)
        assert (idle.ran, idle.why) == (False, "nothing new")
    finally:
        await db.dispose()


async def test_a_bounded_scan_reads_at_most_losing_max_hands(platform_db: str) -> None:
    played, _ = history(seed=8, honest=6, hands_each=20, rings=0)
    hands = [_finished(h) for h in played]
    sources = HandSources(hands, [])
    db = create_engine(platform_db, application_name="losing-scan-test", pool_size=3)
    try:
        since = dt.datetime.fromtimestamp(CLOSED_MS / 1000 - 86400, dt.UTC)
        report = await scan(db, sources, IntegrityConfig(losing_max_hands=45), since=since)
        assert report.hands == 45
        assert sources.pages == 2  # stopped reading once it had enough
    finally:
        await db.dispose()


async def test_past_the_cap_the_newest_hands_are_scored_and_a_recent_dumper_is_caught(
    platform_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More hands than `losing_max_hands`: the honest players' old hands come first, the
    dumper's 100 hands are the newest; the scan replays the newest hands, in the order they
    were played, and flags him."""
    played, kinds = history(seed=9, honest=10, hands_each=100, rings=1)
    old = [_finished(h) for h in played if "dumper0" not in h.players]
    recent = [_finished(h) for h in played if "dumper0" in h.players]
    sources = HandSources([*old, *recent], [])
    cap = 160
    scored: list[str] = []

    def spy(hands: Iterable[HandRecord], limits: ScanLimits | None = None) -> LosingReport:
        hands = list(hands)
        scored.extend(h.deal_id for h in hands)
        return scan_losing(hands, limits)

    monkeypatch.setattr(scan_module, "scan_losing", spy)
    db = create_engine(platform_db, application_name="losing-scan-test", pool_size=3)
    try:
        since = dt.datetime.fromtimestamp(CLOSED_MS / 1000 - 86400, dt.UTC)
        now = dt.datetime.now(dt.UTC)
        report = await scan(
            db, sources, IntegrityConfig(losing_max_hands=cap), since=since, now=now
        )
        assert len(old) > cap and report.hands == cap
        assert scored == [h.deal_id for h in [*old, *recent][-cap:]]
        assert sources.pages == cap // PAGE  # stopped reading once it had enough
        page = await store.list_alerts(db, kind="deliberate_losing", limit=200)
        flagged = {a.player for a in page.alerts if a.dedup_key.endswith(f"{now:%Y-%m}")}
        assert PREFIX + "dumper0" in flagged
        assert {kinds[p.removeprefix(PREFIX)] for p in flagged if p.startswith(PREFIX)} == {
            "dumper"
        }
        # a capped read leaves no cursor behind: the next round finds nothing newer
        idle = await scan(db, sources, IntegrityConfig(losing_max_hands=cap), now=now)
        assert (idle.ran, idle.why) == (False, "nothing new")
    finally:
        await db.dispose()
