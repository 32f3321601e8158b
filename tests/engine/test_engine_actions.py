"""Sequence numbers, bad input, timers on an injected clock, bots, void and settlement."""

from __future__ import annotations

import asyncio
from typing import Any

from services.engine import rules as R
from services.engine import runtime as RT
from services.engine.ports import MemoryLedger
from tests.engine.engine_helpers import auth, commitment, create_dealt, drive, seed_of, spec

APUESTA_TURN_MS = R.make_ruleset("apuesta").turn_timeout_ms
DOMINICANA_CLAIM_MS = R.make_ruleset("dominicana").claim_after_ms


async def _seed_all(client: Any, mid: str, h: dict[str, str], seats: list[int]) -> None:
    for kind in ("seed_commit", "seed_reveal"):
        for s in seats:
            snap = (await client.get(f"/internal/matches/{mid}/seats/{s}/view", headers=h)).json()
            if kind == "seed_commit":
                action = {"type": kind, "commitment": commitment(seed_of(s, 1))}
            else:
                action = {"type": kind, "seed": seed_of(s, 1)}
            body = {"seat": s, "seq": snap["seq"], "action": action}
            r = await client.post(f"/internal/matches/{mid}/actions", json=body, headers=h)
            assert r.status_code == 200, r.text


async def _state(client: Any, mid: str, h: dict[str, str]) -> dict[str, Any]:
    r = await client.get(f"/internal/matches/{mid}", headers=h)
    assert r.status_code == 200, r.text
    return dict(r.json())


async def test_engine_stale_and_replayed_actions_change_nothing(
    harness_factory: Any, internal_secret: bytes
) -> None:
    h = auth(internal_secret)
    async with harness_factory() as hz:
        c = hz.client
        r = await c.post(
            "/internal/matches", json=spec("seq1", "apuesta", {"mode": "1v1"}, 2), headers=h
        )
        assert r.status_code == 200
        # creating again with the same spec is idempotent
        r2 = await c.post(
            "/internal/matches", json=spec("seq1", "apuesta", {"mode": "1v1"}, 2), headers=h
        )
        assert r2.status_code == 200 and r2.json()["match_id"] == "seq1"
        other = spec("seq1", "apuesta", {"mode": "parejas"}, 4)
        assert (await c.post("/internal/matches", json=other, headers=h)).json()[
            "error"
        ] == "match_exists"
        await _seed_all(c, "seq1", h, [0, 1])
        st = await _state(c, "seq1", h)
        seat = st["turn"]
        snap = (await c.get(f"/internal/matches/seq1/seats/{seat}/view", headers=h)).json()
        play = next(a for a in snap["legal"] if a["type"] == "play")
        body = {"seat": seat, "seq": snap["seq"], "action": {"type": "play", "tile": play["tile"]}}
        ok = await c.post("/internal/matches/seq1/actions", json=body, headers=h)
        assert ok.status_code == 200, ok.text
        before = await _state(c, "seq1", h)
        again = await c.post("/internal/matches/seq1/actions", json=body, headers=h)
        assert again.status_code == 409 and again.json()["error"] == "stale_seq"
        stale = dict(body, seq=snap["seq"] - 1)
        assert (
            await c.post("/internal/matches/seq1/actions", json=stale, headers=h)
        ).status_code == 409
        assert await _state(c, "seq1", h) == before
        # bad input: 4xx with a reason, nothing changed
        cur = before["seq"]
        cases = [
            ("/internal/matches/nope/actions", body, 404, "unknown_match"),
            (
                "/internal/matches/seq1/actions",
                {"seat": 9, "seq": cur, "action": {"type": "leave"}},
                400,
                "bad_seat",
            ),
            (
                "/internal/matches/seq1/actions",
                {"seat": seat, "seq": cur, "action": {"type": "play", "tile": "x"}},
                400,
                "bad_tile",
            ),
            (
                "/internal/matches/seq1/actions",
                {"seat": seat, "seq": cur, "action": {"type": "fly"}},
                400,
                "invalid_request",
            ),
            (
                "/internal/matches/seq1/actions",
                {"seat": seat, "seq": cur, "bogus": 1, "action": {"type": "leave"}},
                400,
                "invalid_request",
            ),
        ]
        for path, b, status, code in cases:
            r = await c.post(path, json=b, headers=h)
            assert r.status_code == status, (b, r.text)
            assert r.json()["error"] == code
        on_turn = before["turn"]
        r = await c.post(
            "/internal/matches/seq1/actions",
            json={"seat": 1 - on_turn, "seq": cur, "action": {"type": "play", "tile": "0-0"}},
            headers=h,
        )
        assert r.status_code == 409 and r.json()["error"] in ("not_your_turn", "illegal_action")
        assert await _state(c, "seq1", h) == before
        assert (await c.get("/internal/matches/seq1", headers={})).status_code == 401


async def test_engine_timers_fire_on_injected_clock(
    harness_factory: Any, internal_secret: bytes
) -> None:
    h = auth(internal_secret)
    async with harness_factory() as hz:
        c = hz.client
        await c.post(
            "/internal/matches", json=spec("tm1", "apuesta", {"mode": "1v1"}, 2), headers=h
        )
        st = await _state(c, "tm1", h)
        assert st["phase"] == "seed_commit" and st["deadline"]["kind"] == "seed_commit"
        # nobody commits: the commit deadline deals with empty seeds
        hz.clock.advance(RT.SEED_COMMIT_TIMEOUT_MS)
        st = await _state(c, "tm1", h)
        assert st["phase"] == "play", st
        events = (await c.get("/internal/matches/tm1/seats/0/events", headers=h)).json()["events"]
        started = next(e for e in events if e["kind"] == "hand_started")
        assert all(s["status"] == "no_commitment" for s in started["data"]["seeds"])
        turn, seq = st["turn"], st["seq"]
        hz.clock.advance(APUESTA_TURN_MS - 1)
        assert (await _state(c, "tm1", h))["seq"] == seq
        hz.clock.advance(1)
        st2 = await _state(c, "tm1", h)
        assert st2["seq"] > seq and st2["table"] and st2["table"][0]["seat"] == turn
        ev = (
            await c.get("/internal/matches/tm1/seats/0/events", params={"after": seq}, headers=h)
        ).json()
        assert any(e["kind"] == "play" and e["data"]["by"] == "timeout" for e in ev["events"])
        # a disconnected player's clock keeps running: the match plays itself out by timeouts
        for _ in range(400):
            st = await _state(c, "tm1", h)
            if st["status"] == "finished":
                break
            hz.clock.advance(APUESTA_TURN_MS)
        assert st["status"] == "finished"


async def test_engine_dominicana_claim(harness_factory: Any, internal_secret: bytes) -> None:
    h = auth(internal_secret)
    async with harness_factory() as hz:
        c = hz.client
        await create_dealt(hz, h, "cl1", "dominicana")
        st = await _state(c, "cl1", h)
        other = 1 - st["turn"]
        claim = {"seat": other, "seq": st["seq"], "action": {"type": "claim"}}
        r = await c.post("/internal/matches/cl1/actions", json=claim, headers=h)
        assert r.status_code == 409 and r.json()["error"] == "claim_not_allowed"
        hz.clock.advance(DOMINICANA_CLAIM_MS)
        st = await _state(c, "cl1", h)
        claim["seq"] = st["seq"]
        r = await c.post("/internal/matches/cl1/actions", json=claim, headers=h)
        assert r.status_code == 200, r.text
        res = (await c.get("/internal/matches/cl1/result", headers=h)).json()
        assert res["reason"] == "claim" and res["winner_seats"] == [other]
        # turn-by-turn games cannot be claimed
        await create_dealt(hz, h, "cl2", "dominicana", turn_by_turn=True)
        hz.clock.advance(DOMINICANA_CLAIM_MS)
        st = await _state(c, "cl2", h)
        r = await c.post(
            "/internal/matches/cl2/actions",
            json={"seat": 1 - st["turn"], "seq": st["seq"], "action": {"type": "claim"}},
            headers=h,
        )
        assert r.status_code == 409


async def test_engine_bots_take_departed_seats_and_paid_settlement(
    harness_factory: Any, internal_secret: bytes
) -> None:
    h = auth(internal_secret)
    ledger = MemoryLedger(fail_times=2)
    async with harness_factory(ledger=ledger) as hz:
        c = hz.client
        # Oriente plays to 20, and its doble sin respuesta is worth 20: an opening double that
        # the next seat cannot answer ended the match before seat 1 or 3 ever played (about 1
        # run in 30). A longer match gives the departing seats their first play.
        options = {"preset": "oriente", "target": 100}
        body = spec("paid1", "cubana", options, 4, tier="10", stake_cents=1000)
        assert (await c.post("/internal/matches", json=body, headers=h)).status_code == 200
        st = await drive(c, hz.engine, "paid1", h, leave={1: 0, 3: 0})
        assert st["status"] == "finished"
        # Seats 1 and 3 leave at their first play (the deal decides whether each gets one
        # before the match ends); every seat that left is played by a bot, and only those.
        seats = st["seats"]
        assert all(s["bot"] == s["left"] for s in seats), seats
        assert any(s["left"] for s in seats[1::2]) and not seats[0]["left"], seats
        # settlement is retried until acknowledged (bounded: 60 s even on a loaded machine)
        for _ in range(1200):
            res = (await c.get("/internal/matches/paid1/result", headers=h)).json()
            if res["settled"]:
                break
            import asyncio

            await asyncio.sleep(0.05)
        assert res["settled"] and ledger.settled["paid1"] == res["winners"]
        # bots from the start at free tables, marked as bots
        free = spec("free1", "casa", {"players": 4}, 4, bots=(1, 2, 3))
        assert (await c.post("/internal/matches", json=free, headers=h)).status_code == 200
        st = await drive(c, hz.engine, "free1", h)
        assert st["status"] == "finished" and [s["bot"] for s in st["seats"]] == [
            False,
            True,
            True,
            True,
        ]


async def test_engine_void_when_all_players_leave(
    harness_factory: Any, internal_secret: bytes
) -> None:
    h = auth(internal_secret)
    ledger = MemoryLedger()
    async with harness_factory(ledger=ledger) as hz:
        c = hz.client
        body = spec("void1", "apuesta", {"mode": "1v1"}, 2, tier="20", stake_cents=2000)
        await c.post("/internal/matches", json=body, headers=h)
        for seat in (0, 1):
            st = await _state(c, "void1", h)
            r = await c.post(
                "/internal/matches/void1/actions",
                json={"seat": seat, "seq": st["seq"], "action": {"type": "leave"}},
                headers=h,
            )
            assert r.status_code == 200, r.text
        st = await _state(c, "void1", h)
        assert st["status"] == "void"
        import asyncio

        for _ in range(100):
            if "void1" in ledger.voided:
                break
            await asyncio.sleep(0.02)
        assert "void1" in ledger.voided


async def test_engine_long_poll_events(harness_factory: Any, internal_secret: bytes) -> None:
    import threading
    import time

    h = auth(internal_secret)
    async with harness_factory() as hz:
        c = hz.client
        await c.post(
            "/internal/matches", json=spec("lp1", "apuesta", {"mode": "1v1"}, 2), headers=h
        )
        st = await _state(c, "lp1", h)
        # the test client blocks while the request waits: a thread moves the clock meanwhile
        timer = threading.Timer(0.3, hz.clock.advance, (RT.SEED_COMMIT_TIMEOUT_MS,))
        timer.start()
        started = time.monotonic()
        page = (
            await c.get(
                "/internal/matches/lp1/seats/0/events",
                params={"after": st["seq"], "wait_ms": 20000},
                headers=h,
            )
        ).json()
        assert 0.25 < time.monotonic() - started < 10
        assert page["events"] and page["events"][0]["seq"] == st["seq"] + 1


async def test_engine_evicts_finished_matches_and_reloads_them_on_demand(
    harness_factory: Any, internal_secret: bytes
) -> None:
    """Memory is bounded: a finished match leaves memory after EVICT_AFTER_MS, and a late
    reader still gets its final state from PostgreSQL."""
    from services.engine.service import EVICT_AFTER_MS

    h = auth(internal_secret)
    async with harness_factory() as hz:
        c = hz.client
        await c.post("/internal/matches", json=spec("evict1", "casa", {}, 4), headers=h)
        for seat in range(4):
            st = await _state(c, "evict1", h)
            r = await c.post(
                "/internal/matches/evict1/actions",
                json={"seat": seat, "seq": st["seq"], "action": {"type": "leave"}},
                headers=h,
            )
            assert r.status_code == 200, r.text
        final = await _state(c, "evict1", h)
        assert final["status"] == "void"
        # The engine lives on the test client's own event loop (another thread): run it there,
        # never on this one (its asyncpg connections belong to that loop).
        portal = c.blocking_portal
        assert await asyncio.to_thread(portal.call, hz.engine.evict_finished) == 0
        hz.clock.advance(EVICT_AFTER_MS)
        assert await asyncio.to_thread(portal.call, hz.engine.evict_finished) == 1
        assert "evict1" not in hz.engine.actors
        reloaded = await _state(c, "evict1", h)
        assert (reloaded["status"], reloaded["seq"]) == (final["status"], final["seq"])


async def test_engine_exports_log_health_metrics(
    harness_factory: Any, internal_secret: bytes, engine_db: str, key_file: Any
) -> None:
    """Checkpoint age and orphaned commitments are measured from the real log tables."""
    from fairness.keys import load_operator_key
    from services.common.db import create_pool
    from services.common.metrics import CHECKPOINT_AGE_SECONDS, ORPHAN_COMMITMENTS
    from services.engine.ports import PgFairnessLog

    h = auth(internal_secret)
    async with harness_factory() as hz:
        await hz.client.post("/internal/matches", json=spec("metrics1", "casa", {}, 4), headers=h)
    db = await create_pool(engine_db, application_name="fairness-metrics-test", max_size=2)
    try:
        log = PgFairnessLog(db, load_operator_key(key_file, env={}))
        await log.checkpoint()
    finally:
        await db.close()
    assert CHECKPOINT_AGE_SECONDS._value.get() >= 0
    assert ORPHAN_COMMITMENTS._value.get() == 0


async def test_engine_stops_waiting_for_the_seed_of_a_seat_that_left(
    harness_factory: Any, internal_secret: bytes
) -> None:
    """A seat that leaves during the seed rounds gets the empty seed at once: the table does
    not wait for its deadline (the clock never moves in this test)."""
    h = auth(internal_secret)
    async with harness_factory() as hz:
        c = hz.client
        await c.post("/internal/matches", json=spec("gone1", "casa", {}, 4), headers=h)

        async def act(seat: int, action: dict[str, Any]) -> None:
            st = await _state(c, "gone1", h)
            body = {"seat": seat, "seq": st["seq"], "action": action}
            r = await c.post("/internal/matches/gone1/actions", json=body, headers=h)
            assert r.status_code == 200, r.text

        for seat in (0, 1, 2):
            await act(seat, {"type": "seed_commit", "commitment": commitment(seed_of(seat, 1))})
        assert (await _state(c, "gone1", h))["deadline"]["kind"] == "seed_commit"
        await act(3, {"type": "leave"})
        st = await _state(c, "gone1", h)
        assert st["deadline"]["kind"] == "seed_reveal"
        assert sorted(st["deadline"]["seats"]) == [0, 1, 2]
        for seat in (0, 1):
            await act(seat, {"type": "seed_reveal", "seed": seed_of(seat, 1)})
        # seat 2 committed, then leaves before revealing: the deal goes ahead without it
        await act(2, {"type": "leave"})
        st = await _state(c, "gone1", h)
        assert st["hand_no"] >= 1 and st["phase"] in ("play", "choose"), st
