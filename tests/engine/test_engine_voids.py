"""Voids: a void names a cause from a closed list and, once the seeds are known, logs the
revealed deal; counts by day and cause are public. No code path voids a deal because of what
it contains on the house's initiative: every shuffled deal starts a hand, and the house's CPU
seats never ask for a redeal (only a human seat's request under the rules does)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairness import flow
from fairness.commitments import VOID_CAUSES, RecordError, cpu_seed, void_record
from fairness.shuffle import deal as shuffle_deal
from services.engine import bots
from services.engine import rules as R
from services.engine import runtime as RT
from tests.engine.engine_helpers import auth, spec

VARIANTS = [
    ("dominicana", {}),
    ("cubana", {"preset": "habana"}),
    ("cubana", {"preset": "miami"}),
    ("cubana", {"preset": "oriente"}),
    ("cubana", {"preset": "barrio"}),
    ("casa", {}),
    ("apuesta", {"mode": "1v1"}),
    ("apuesta", {"mode": "trios"}),
]


@settings(max_examples=150, deadline=None)
@given(seed=st.binary(min_size=32, max_size=32), which=st.integers(0, len(VARIANTS) - 1))
def test_every_shuffled_deal_starts_a_hand(seed: bytes, which: int) -> None:
    """`engine_error` (a deal that cannot start a hand) is unreachable from a deal's content."""
    variant, options = VARIANTS[which]
    rules = R.make_ruleset(variant, options)
    n = rules.seats
    d = shuffle_deal(seed, "void-test/1.d", [""] * n, rules.max_pip, rules.hand_size)
    hands = [[R.tile(a, b) for a, b in h] for h in d.hands]
    stock = [R.tile(a, b) for a, b in d.stock]
    state = R.new_match(rules)
    side = 0 if R.needs_opening_side(state) else None
    R.start_hand(state, hands, stock, opening_side=side)


def test_cpu_seats_never_ask_for_a_redeal() -> None:
    rules = R.make_ruleset("cubana", {"preset": "habana"})
    doubles = [R.tile(i, i) for i in range(5)]
    others = [R.tile(0, 9), R.tile(1, 9), R.tile(2, 9), R.tile(3, 9), R.tile(4, 9)]
    hands = [doubles + others]
    rest = _rest(hands[0])
    hands += [[R.tile(a, b) for a, b in pairs] for pairs in rest[:3]]
    state = R.new_match(rules)
    hand = R.start_hand(state, hands, [R.tile(a, b) for a, b in rest[3]], opener=0)
    legal = R.legal_actions(hand, 0)
    assert any(isinstance(a, R.RequestRedeal) for a in legal)  # the rules allow it
    assert not isinstance(bots.choose_action(R.view(hand, 0), rules, legal), R.RequestRedeal)


def _rest(first: list[int]) -> list[list[tuple[int, int]]]:
    taken = set(first)
    free = [(a, b) for a in range(10) for b in range(a, 10) if R.tile(a, b) not in taken]
    return [free[0:10], free[10:20], free[20:30], free[30:]]


def test_void_causes_are_a_closed_list() -> None:
    assert set(VOID_CAUSES) == {"redeal", "match_void", "engine_error"}
    from datetime import UTC, datetime

    with pytest.raises(RecordError):
        void_record(
            deal_id="m/1.d",
            commitment="0" * 64,
            reason="bad_for_the_house",
            server_seed=bytes(32),
            time=datetime(2026, 1, 1, tzinfo=UTC),
            signing_key_id="0" * 64,
        )


def _draw_won_by_side_0(match_id: str) -> bytes:
    """A server seed whose Cuban draw gives seat 0's side the opening choice."""
    deal_id = f"{match_id}/1.draw"
    for i in range(1000):
        s = hashlib.sha256(f"draw-{i}".encode()).digest()
        seeds = ["", *(cpu_seed(s, deal_id, k) for k in (1, 2, 3))]
        if flow.draw_outcome("cuban_draw", s, deal_id, seeds)["opening_side"] == 0:
            return s
    raise AssertionError("no such seed")


def _five_doubles_seed(match_id: str) -> bytes:
    """A server seed whose deal gives seat 0 (no seed) five doubles or more in double nine."""
    deal_id = f"{match_id}/2.d"
    for i in range(100_000):
        s = hashlib.sha256(f"five-doubles-{i}".encode()).digest()
        seeds = ["", *(cpu_seed(s, deal_id, k) for k in (1, 2, 3))]
        hand = shuffle_deal(s, deal_id, seeds, 9, 10).hands[0]
        if sum(1 for a, b in hand if a == b) >= 5:
            return s
    raise AssertionError("no such seed")


async def test_a_players_redeal_logs_its_cause_and_deal(
    harness_factory: Any, internal_secret: bytes, key_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    match_id = "void-redeal"
    seeds = iter([_draw_won_by_side_0(match_id), _five_doubles_seed(match_id)])
    monkeypatch.setattr(flow, "new_server_seed", lambda: next(seeds, bytes(32)))
    h = auth(internal_secret)
    body = spec(match_id, "cubana", {"preset": "habana"}, 4, bots=(1, 2, 3))
    async with harness_factory() as hz:
        c = hz.client
        assert (await c.post("/internal/matches", json=body, headers=h)).status_code == 200
        for _ in range(2):  # seat 0 sends no seed for the draw, nor for the deal
            hz.clock.advance(RT.SEED_COMMIT_TIMEOUT_MS)
            await c.get(f"/internal/matches/{match_id}", headers=h)
        view = (await c.get(f"/internal/matches/{match_id}/seats/0/view", headers=h)).json()
        assert view["state"]["deal_id"] == f"{match_id}/2.d"
        assert any(a["type"] == "redeal" for a in view["legal"]), view["legal"]
        r = await c.post(
            f"/internal/matches/{match_id}/actions",
            json={"seat": 0, "seq": view["seq"], "action": {"type": "redeal"}},
            headers=h,
        )
        assert r.status_code == 200, r.text
        # the store's pool belongs to the app's event loop (the test client's portal)
        store = hz.engine.fairness.store  # type: ignore[attr-defined]
        portal = c.blocking_portal
        idx = await asyncio.to_thread(portal.call, store.record_index, f"{match_id}/2.d", "void")
        record = json.loads(await asyncio.to_thread(portal.call, store.leaf, idx))["record"]
        assert record["reason"] == "redeal"
        hands = record["deal"]["hands"]
        assert sum(1 for t in hands[0] if t.split("-")[0] == t.split("-")[1]) >= 5
        recomputed = shuffle_deal(record["server_seed"], record["deal_id"], record["seeds"], 9, 10)
        assert record["deal"]["hands"] == recomputed.as_strings()[0]
        counts = (await c.get("/internal/audit/voids", headers=h)).json()["voids"]
        assert any(v["cause"] == "redeal" and v["count"] >= 1 for v in counts)
        assert {v["cause"] for v in counts} <= set(VOID_CAUSES)
