""" "Play again" with the same people, an invitation to everyone of a finished match: any of its
players proposes it; every other player accepts in his own session; nobody is seated or held
anything until all have accepted, and then all are seated at once (partners across again). A
decline ends it for all, so does its time passing; an ineligible player is refused (his own
reason, or `partner_unavailable` for the others) and it stays open. The real services run
in-process (platform_stack) and play real matches.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from api.backends import get_backends
from api.identity import IdentityStatus, InMemoryIdentity
from api.invitations import Invitation, Member
from api.routes_invitations import rematch_seats
from services.common.migrate import upgrade
from tests.api.platform_stack import COMPONENTS, play_turns
from tests.api.test_api_invitations import DEPOSIT, STAKE, Players, _finance, _sql, players

DUEL = {"kind": "casa-duelo", "tier": "10"}
PAIRS = {"kind": "casa-parejas", "tier": "10"}


@pytest.fixture(scope="module")
def platform_db(database_url: str) -> str:
    upgrade(database_url, COMPONENTS)
    return database_url


async def _match_of(ps: Players, name: str) -> str:
    """The match the player's table started (awaited: it starts when the last seat is taken,
    which the join that took it has already done)."""
    for _ in range(200):
        mine = await ps.seats(name)
        found = next((t["match_id"] for t in mine if t["match_id"]), None)
        if found:
            return str(found)
        await asyncio.sleep(0)
    raise AssertionError(f"no match for {name}")


async def _played(ps: Players, names: list[str], table: dict[str, str]) -> str:
    """Everyone quick-joins the same kind and tier; the match is played to its end."""
    for name in names:
        r = await ps[name].post("/api/lobby/quick-join", json=table)
        assert r.status_code == 200, r.text
    match_id = await _match_of(ps, names[0])
    final = await play_turns({n: ps[n] for n in names}, match_id)
    assert final["state"]["status"] == "finished", final["state"]["status"]
    return match_id


async def _settled(ps: Players, names: list[str]) -> dict[str, int]:
    """Balances once the pot is paid out: all deposits but the house's 10% of the pot."""
    expected = len(names) * DEPOSIT - len(names) * STAKE // 10
    balances: dict[str, int] = {}
    for _ in range(200):
        balances = {n: await ps.balance(n) for n in names}
        if sum(balances.values()) == expected:
            return balances
        await asyncio.sleep(0.05)
    raise AssertionError(f"the pot was not settled: {balances}")


async def _forget(platform_db: str, match_id: str) -> None:
    """Drop a decided rematch so the same match can be proposed again (a new scenario)."""
    await _sql(
        platform_db,
        "DELETE FROM gateway.invitation_players WHERE invitation_id IN "
        "(SELECT id FROM gateway.invitations WHERE match_id = :m)",
        m=match_id,
    )
    await _sql(platform_db, "DELETE FROM gateway.invitations WHERE match_id = :m", m=match_id)


def _seats(table: dict[str, Any]) -> dict[str, int]:
    return {s["player"]: s["seat"] for s in table["seats"] if s["player"]}


async def test_one_on_one_decline_expiry_ineligible_then_both_accept(
    platform_db: str, internal_secret: bytes, tmp_path: Path
) -> None:
    await _finance(platform_db)
    ana, ben = "r1_ana", "r1_ben"
    async with players(platform_db, internal_secret, tmp_path, identity_cache_ttl_s=0) as ps:
        for name in (ana, ben):
            await ps.add(name)
        match_id = await _played(ps, [ana, ben], DUEL)
        before = await _settled(ps, [ana, ben])
        # A match still played, or one he did not play, cannot be proposed.
        r = await ps[ana].post("/api/invitations/rematch", json={"match_id": "nope-1"})
        assert r.status_code == 404, r.text

        # --- declined: over for everyone
        r = await ps[ana].post("/api/invitations/rematch", json={"match_id": match_id})
        assert r.status_code == 201, r.text
        rm = r.json()
        assert (rm["status"], rm["waiting_for"], rm["my_answer"]) == ("pending", 1, "accepted")
        assert rm["kind"] == DUEL["kind"] and rm["tier"] == DUEL["tier"]
        seen = (await ps[ben].get(f"/api/invitations/by-match/{match_id}")).json()
        assert seen["invitation_id"] == rm["invitation_id"] and seen["my_answer"] == "pending"
        assert await _settled(ps, [ana, ben]) == before  # nothing held on a proposal
        assert await ps.seats(ana) == [] and await ps.seats(ben) == []
        r = await ps[ben].post(f"/api/invitations/{rm['invitation_id']}/decline")
        assert r.status_code == 200 and r.json()["status"] == "declined", r.text
        r = await ps[ana].post(f"/api/invitations/{rm['invitation_id']}/accept")
        assert r.status_code == 409 and r.json()["error"] == "invitation_closed", r.text
        assert (await ps[ana].get(f"/api/invitations/{rm['invitation_id']}")).json()[
            "status"
        ] == "declined"

        # --- expired: its time passes (moved back in the database, not waited for)
        await _forget(platform_db, match_id)
        rm = (await ps[ana].post("/api/invitations/rematch", json={"match_id": match_id})).json()
        await _sql(
            platform_db,
            "UPDATE gateway.invitations SET created_at = now() - interval '1 hour', "
            "expires_at = now() - interval '1 second' WHERE id = :id",
            id=rm["invitation_id"],
        )
        r = await ps[ben].post(f"/api/invitations/{rm['invitation_id']}/accept")
        assert r.status_code == 409 and r.json()["error"] == "invitation_expired", r.text
        assert (await ps[ana].get(f"/api/invitations/{rm['invitation_id']}")).json()[
            "status"
        ] == "expired"
        assert await ps.seats(ana) == [] and await ps.seats(ben) == []

        # --- an ineligible player: refused with his own reason when he accepts; when the
        # proposer turns ineligible, the last acceptance is refused as partner_unavailable.
        # Either way nothing was decided: the invitation stays open for a later acceptance.
        await _forget(platform_db, match_id)
        rm = (await ps[ana].post("/api/invitations/rematch", json={"match_id": match_id})).json()
        ident = get_backends(ps.p.gateway.state).place.identity
        assert isinstance(ident, InMemoryIdentity)
        young = InMemoryIdentity.verified_adult(ben, "kid-ben")
        ident.script[ben] = IdentityStatus(
            verified=True,
            adult=False,
            person_id=young.person_id,
            checked_at=young.checked_at,
            provider_ref="test",
        )
        r = await ps[ben].post(f"/api/invitations/{rm['invitation_id']}/accept")
        assert r.status_code == 403 and r.json()["error"] == "underage", r.text
        assert (await ps[ana].get(f"/api/invitations/{rm['invitation_id']}")).json()[
            "waiting_for"
        ] == 1
        del ident.script[ben]
        await _sql(platform_db, "UPDATE gateway.users SET status = 'locked' WHERE id = :u", u=ana)
        r = await ps[ben].post(f"/api/invitations/{rm['invitation_id']}/accept")
        assert r.status_code == 403 and r.json()["error"] == "partner_unavailable", r.text
        await _sql(platform_db, "UPDATE gateway.users SET status = 'active' WHERE id = :u", u=ana)
        still = (await ps[ana].get(f"/api/invitations/{rm['invitation_id']}")).json()
        assert (still["status"], still["waiting_for"]) == ("pending", 1), still
        assert await _settled(ps, [ana, ben]) == before
        assert await ps.seats(ana) == [] and await ps.seats(ben) == []

        # --- both accept: seated together, each held his stake, once
        await _forget(platform_db, match_id)
        r = await ps[ben].post("/api/invitations/rematch", json={"match_id": match_id})
        assert r.status_code == 201, r.text
        rm = r.json()
        # The other player proposing too is his acceptance: the last one seats both.
        r = await ps[ana].post("/api/invitations/rematch", json={"match_id": match_id})
        assert r.status_code == 200, r.text
        done = r.json()
        assert done["status"] == "accepted" and done["waiting_for"] == 0, done
        table = done["table"]
        assert set(_seats(table)) == {ana, ben} and table["kind"] == DUEL["kind"]
        assert await ps.balance(ana) == before[ana] - STAKE
        assert await ps.balance(ben) == before[ben] - STAKE
        seen = (await ps[ben].get(f"/api/invitations/{rm['invitation_id']}")).json()
        assert seen["status"] == "accepted" and seen["table_id"] == table["table_id"]
        # Accepting again changes nothing.
        r = await ps[ben].post(f"/api/invitations/{rm['invitation_id']}/accept")
        assert r.status_code == 200 and r.json()["table_id"] == table["table_id"], r.text
        assert await ps.balance(ben) == before[ben] - STAKE
        assert DEPOSIT > STAKE


async def test_two_pairs_of_four_humans_are_seated_with_the_same_partners(
    platform_db: str, internal_secret: bytes, tmp_path: Path
) -> None:
    await _finance(platform_db)
    names = ["r4_ana", "r4_ben", "r4_cris", "r4_dani"]
    async with players(platform_db, internal_secret, tmp_path) as ps:
        for name in names:
            await ps.add(name)
        match_id = await _played(ps, names, PAIRS)
        view = (await ps[names[0]].get(f"/api/matches/{match_id}")).json()
        seat = {s["player_id"]: s["seat"] for s in view["state"]["seats"]}
        partner = {n: next(m for m in names if seat[m] == (seat[n] + 2) % 4) for n in names}
        before = await _settled(ps, names)
        proposer, *others = names
        rm = (
            await ps[proposer].post("/api/invitations/rematch", json={"match_id": match_id})
        ).json()
        assert rm["waiting_for"] == 3
        for n, name in enumerate(others):
            r = await ps[name].post(f"/api/invitations/{rm['invitation_id']}/accept")
            assert r.status_code == 200, r.text
            if n < len(others) - 1:
                # Nobody seated or held while anyone has still to answer.
                assert r.json()["status"] == "pending" and r.json()["waiting_for"] == 2 - n
                assert await _settled(ps, names) == before
                assert all([await ps.seats(m) == [] for m in names])
        done = r.json()
        assert done["status"] == "accepted" and done["table_id"], done
        now = _seats(done["table"])
        assert set(now) == set(names)
        for name in names:
            assert now[partner[name]] == (now[name] + 2) % 4, (now, partner)
            assert await ps.balance(name) == before[name] - STAKE


def test_play_again_teams_keep_partners_together_and_the_proposer_first() -> None:
    """The seating order of a rematch: partners (half the table apart) join as one team, and
    the proposer's team opens the table, wherever he sat; one on one, everyone alone."""

    def teams(seats: dict[int, str], proposer: str, pairs: bool) -> list[list[str]]:
        now = datetime.now(UTC)
        inv = Invitation(
            id=1,
            inviter=proposer,
            op="private",
            kind="casa-parejas",
            tier="10",
            invite_code=None,
            match_id="m-1",
            status="accepted",
            failure=None,
            table_id=None,
            created_at=now,
            expires_at=now,
            decided_at=now,
            expired=False,
            players=[
                Member(s.player, s.seat, s.team, "accepted")
                for s in rematch_seats(seats, proposer, pairs)
            ],
        )
        return inv.teams()

    four = {0: "ana", 1: "ben", 2: "cris", 3: "dani"}
    assert teams(four, "ana", True) == [["ana", "cris"], ["ben", "dani"]]
    assert teams(four, "dani", True) == [["ben", "dani"], ["ana", "cris"]]
    assert teams({0: "ana", 1: "ben"}, "ben", False) == [["ben"], ["ana"]]
    assert teams({0: "ana", 1: "ben", 2: "cris"}, "cris", False) == [
        ["cris"],
        ["ben"],
        ["ana"],
    ]
