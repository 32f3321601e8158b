"""The seat feed: events after a seq and the snapshot in one call, filtered per seat."""

from __future__ import annotations

from typing import Any

from tests.engine.engine_helpers import auth, create_dealt


async def test_engine_feed_is_events_and_view_of_one_seat(
    harness_factory: Any, internal_secret: bytes
) -> None:
    h = auth(internal_secret)
    async with harness_factory() as hz:
        c = hz.client
        await create_dealt(hz, h, "fd1")
        for seat in (0, 1):
            feed = (await c.get(f"/internal/matches/fd1/seats/{seat}/feed", headers=h)).json()
            view = (await c.get(f"/internal/matches/fd1/seats/{seat}/view", headers=h)).json()
            events = (await c.get(f"/internal/matches/fd1/seats/{seat}/events", headers=h)).json()
            # the same per-seat filtering as /events and /view: nothing of the other hand
            assert feed["events"] == events and feed["snapshot"] == view
            assert feed["snapshot"]["seat"] == seat and len(feed["snapshot"]["hand"]) == 7
            other = (await c.get(f"/internal/matches/fd1/seats/{1 - seat}/view", headers=h)).json()
            assert not set(other["hand"]) & set(feed["snapshot"]["hand"])
        seq = feed["events"]["seq"]
        after = (
            await c.get("/internal/matches/fd1/seats/0/feed", params={"after": seq}, headers=h)
        ).json()
        assert after["events"]["events"] == [] and after["events"]["seq"] == seq
        paged = (
            await c.get("/internal/matches/fd1/seats/0/feed", params={"limit": 1}, headers=h)
        ).json()
        assert paged["events"]["more"] is True and paged["snapshot"] is None
        assert (await c.get("/internal/matches/fd1/seats/5/feed", headers=h)).status_code == 400
        assert (await c.get("/internal/matches/fd1/seats/0/feed")).status_code == 401


async def test_engine_feeds_reads_several_seats_in_one_call(
    harness_factory: Any, internal_secret: bytes
) -> None:
    h = auth(internal_secret)
    async with harness_factory() as hz:
        c = hz.client
        await create_dealt(hz, h, "fd2")
        one = [
            (await c.get(f"/internal/matches/fd2/seats/{seat}/feed", headers=h)).json()
            for seat in (0, 1)
        ]
        seq = one[0]["events"]["seq"]
        reads = {
            "reads": [{"seat": 1, "after": 0}, {"seat": 0, "after": 0}, {"seat": 0, "after": seq}]
        }
        r = await c.post("/internal/matches/fd2/feeds", json=reads, headers=h)
        assert r.status_code == 200
        feeds = r.json()["feeds"]
        # in the order asked, each exactly the single-seat feed: no seat sees another's hand
        assert feeds[0] == one[1] and feeds[1] == one[0]
        assert feeds[2]["events"]["events"] == [] and feeds[2]["snapshot"] == one[0]["snapshot"]
        bad = [
            {"reads": []},
            {"reads": [{"seat": 0, "after": 0}] * 17},
            {"reads": [{"seat": 0, "after": -1}]},
            {"reads": [{"seat": 0, "after": 0, "x": 1}]},
        ]
        for body in bad:
            refused = await c.post("/internal/matches/fd2/feeds", json=body, headers=h)
            assert refused.status_code == 400 and refused.json()["error"] == "invalid_request"
        wrong_seat = {"reads": [{"seat": 5, "after": 0}]}
        assert (await c.post("/internal/matches/fd2/feeds", json=wrong_seat, headers=h)).json()[
            "error"
        ] == "bad_seat"
        unknown = await c.post("/internal/matches/nope/feeds", json=reads, headers=h)
        assert unknown.status_code == 404
        assert (await c.post("/internal/matches/fd2/feeds", json=reads)).status_code == 401


async def test_engine_action_answer_carries_the_asked_seats_feeds(
    harness_factory: Any, internal_secret: bytes
) -> None:
    h = auth(internal_secret)
    async with harness_factory() as hz:
        c = hz.client
        await create_dealt(hz, h, "fd3")
        view = (await c.get("/internal/matches/fd3/seats/0/view", headers=h)).json()
        seat = view["state"]["turn"]
        view = (await c.get(f"/internal/matches/fd3/seats/{seat}/view", headers=h)).json()
        play = next(a for a in view["legal"] if a["type"] == "play")
        action = {"type": "play", "tile": play["tile"], "end": play.get("end")}
        before = view["seq"]
        reads = [{"seat": 1 - seat, "after": before}, {"seat": seat, "after": before}]
        bad = {"seat": seat, "seq": before, "action": action, "reads": [{"seat": 7, "after": 0}]}
        refused = await c.post("/internal/matches/fd3/actions", json=bad, headers=h)
        assert refused.status_code == 400 and refused.json()["error"] == "bad_seat"
        body = {"seat": seat, "seq": before, "action": action, "reads": reads}
        r = await c.post("/internal/matches/fd3/actions", json=body, headers=h)
        assert r.status_code == 200, r.text  # the refused one above changed nothing
        applied = r.json()
        assert applied["seq"] > before and len(applied["feeds"]) == 2
        for read, feed in zip(reads, applied["feeds"], strict=True):
            # each read is exactly what that seat's own feed shows now: nobody else's hand
            own = (
                await c.get(
                    f"/internal/matches/fd3/seats/{read['seat']}/feed",
                    params={"after": before},
                    headers=h,
                )
            ).json()
            assert feed == own and feed["snapshot"]["seat"] == read["seat"]
            assert feed["events"]["events"] and feed["snapshot"]["seq"] == applied["seq"]
        assert not set(applied["feeds"][0]["snapshot"]["hand"]) & set(
            applied["feeds"][1]["snapshot"]["hand"]
        )
        # without reads, the answer is the plain acknowledgement
        state = (await c.get("/internal/matches/fd3", headers=h)).json()
        if state["turn"] == seat:
            return
        nxt = (await c.get(f"/internal/matches/fd3/seats/{1 - seat}/view", headers=h)).json()
        legal = [a for a in nxt["legal"] if a["type"] == "play"]
        if legal:
            act = {"type": "play", "tile": legal[0]["tile"], "end": legal[0].get("end")}
            body = {"seat": 1 - seat, "seq": nxt["seq"], "action": act}
            plain = (await c.post("/internal/matches/fd3/actions", json=body, headers=h)).json()
            assert plain["feeds"] == [] and plain["seq"] > nxt["seq"]
