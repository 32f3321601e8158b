"""Matchmaking money paths against the real ledger service and PostgreSQL."""

from __future__ import annotations

import pytest

from services.common.http import RemoteError, ServiceUnavailable
from services.common.migrate import upgrade
from services.ledger.contract import EntryResult, ReleaseRequest
from services.matchmaking import contract as c
from services.matchmaking.config import MatchmakingConfig
from tests.matchmaking.mm_helpers import refused, stack

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def db(database_url: str) -> str:
    upgrade(database_url, ["ledger", "matchmaking"])
    return database_url


async def test_kinds_cover_every_variant_at_every_tier(db, internal_secret):
    async with stack(db, internal_secret) as s:
        kinds = await s.mm.get("/v1/kinds", c.KindList)
    variants = {k.variant for k in kinds.kinds}
    assert variants == {"apuesta", "dominicana", "cubana", "casa"}
    for k in kinds.kinds:
        assert [t.stake_cents for t in k.tiers] == [0, 1000, 2000, 4000, 8000]
    seats = {k.kind: (k.seat_count, k.pairs) for k in kinds.kinds}
    assert seats["apuesta-parejas"] == (4, True)
    assert seats["apuesta-trios"] == (3, False)
    assert seats["apuesta-1v1"] == (2, False)
    assert seats["cubana-habana"] == (4, True)
    assert seats["casa-duelo"] == (2, False)


async def test_bad_input_is_refused_with_a_reason_and_holds_nothing(db, internal_secret):
    config = MatchmakingConfig(sweep_interval_ms=0, offered={"apuesta-1v1": ["free", "10"]})
    async with stack(db, internal_secret, config) as s:
        await s.deposit("poor", 500)
        err = await refused(s.quick("bad1", "no-such-kind", "10"))
        assert (err.status, err.code) == (404, "unknown_kind")
        err = await refused(s.quick("bad1", "apuesta-parejas", "10"))
        assert (err.status, err.code) == (404, "unknown_kind")
        err = await refused(s.quick("bad1", "apuesta-1v1", "80"))
        assert (err.status, err.code) == (400, "tier_not_offered")
        err = await refused(s.quick("bad1", "apuesta-1v1", "10", partner_id="bad2"))
        assert (err.status, err.code) == (400, "partner_not_pairs")
        err = await refused(s.quick("poor", "apuesta-1v1", "10"))
        assert (err.status, err.code) == (422, "insufficient_funds")
        # a retry with the same key gets the same answer; nothing is held
        err = await refused(s.quick("poor", "apuesta-1v1", "10"))
        assert err.code == "insufficient_funds"
        assert await s.balance("poor") == 500
        assert await s.open_holds() == {}
        tables = await s.mm.get("/v1/players/poor/tables", c.PlayerTables)
        assert tables.tables == []
        err = await refused(s.quick("nowallet", "apuesta-1v1", "10"))
        assert err.status == 422
        err = await refused(
            s.mm.post(
                "/v1/join/code",
                c.JoinByCode(idempotency_key="k", player_id="bad1", invite_code="ZZZZZZ"),
                c.JoinResult,
            )
        )
        assert (err.status, err.code) == (404, "invite_not_found")


async def test_cpu_tables_are_free_tables_of_an_offered_kind(db, internal_secret):
    config = MatchmakingConfig(sweep_interval_ms=0, offered={"apuesta-1v1": ["10"]})
    async with stack(db, internal_secret, config) as s:
        cpu = c.PlayVsCpu(idempotency_key="cpu-bad", player_id="solo", kind="apuesta-1v1")
        err = await refused(s.mm.post("/v1/tables/cpu", cpu, c.JoinResult))
        assert (err.status, err.code) == (400, "cpu_free_only")
        cpu = c.PlayVsCpu(idempotency_key="cpu-bad2", player_id="solo", kind="no-such-kind")
        err = await refused(s.mm.post("/v1/tables/cpu", cpu, c.JoinResult))
        assert (err.status, err.code) == (404, "unknown_kind")
        assert await s.open_holds() == {}
        assert (await s.mm.get("/v1/players/solo/tables", c.PlayerTables)).tables == []


async def test_paid_table_fills_moves_every_hold_into_the_pot_and_starts(db, internal_secret):
    async with stack(db, internal_secret) as s:
        players = [f"pay{i}" for i in range(4)]
        for p in players:
            await s.deposit(p, 5000)
        results = [await s.quick(p, "apuesta-parejas", "10") for p in players]
        table_id = results[0].table.table_id
        assert {r.table.table_id for r in results} == {table_id}
        assert results[0].table.status == "waiting"
        assert results[0].reservations[0].seat == 0
        status = await s.status(table_id)
        assert status.status == "playing"
        assert status.match_id is not None
        assert [seat.player_id for seat in status.seats] == players
        assert all(seat.state == "staked" for seat in status.seats)
        for p in players:
            assert await s.balance(p) == 4000
        assert await s.open_holds() == {}
        pot = await s.fetch(
            "SELECT balance, tier, variant FROM ledger.accounts a JOIN ledger.pots p "
            "ON p.account_id = a.id WHERE p.match_id = $1",
            status.match_id,
        )
        assert (pot[0]["balance"], pot[0]["tier"], pot[0]["variant"]) == (4000, "10", "apuesta")
        created = s.engine.created[status.match_id]
        assert created.variant == "apuesta" and created.options == {"mode": "parejas"}
        assert [x.player_id for x in created.seats] == players
        assert all(x.hold_id for x in created.seats)
        assert created.stake_cents == 1000 and created.tier == "10"
        # the table is no longer in the lobby, and a fifth player opens a new one
        lobby = await s.mm.get("/v1/lobby", c.Lobby, params={"kind": "apuesta-parejas"})
        assert table_id not in {t.table_id for t in lobby.tables}
        err = await refused(s.leave(players[0], table_id))
        assert (err.status, err.code) == (409, "table_started")
        # while the match plays it is among the player's tables; once the engine says it is
        # over, the table is 'finished' and leaves the list
        mine = await s.mm.get(f"/v1/players/{players[0]}/tables", c.PlayerTables)
        assert [t.table_id for t in mine.tables] == [table_id]
        s.engine.over.add(status.match_id)
        mine = await s.mm.get(f"/v1/players/{players[0]}/tables", c.PlayerTables)
        assert mine.tables == []
        assert (await s.status(table_id)).status == "finished"


async def test_join_and_leave_are_idempotent_and_leaving_releases_the_hold(db, internal_secret):
    async with stack(db, internal_secret) as s:
        await s.deposit("idem1", 3000)
        first = await s.quick("idem1", "apuesta-trios", "20", key="join-1")
        again = await s.quick("idem1", "apuesta-trios", "20", key="join-1")
        assert again.replayed and again.reservations == first.reservations
        assert await s.balance("idem1") == 1000
        assert list((await s.open_holds()).values()) == [2000]
        err = await refused(s.quick("idem1", "apuesta-1v1", "20", key="join-1"))
        assert (err.status, err.code) == (409, "idempotency_key_reused")
        table_id = first.table.table_id
        lobby = await s.mm.get("/v1/lobby", c.Lobby, params={"kind": "apuesta-trios", "tier": "20"})
        entry = next(t for t in lobby.tables if t.table_id == table_id)
        assert entry.free_seats == [1, 2] and entry.taken == 1
        left = await s.leave("idem1", table_id, key="leave-1")
        assert left.released and not left.replayed
        assert (await s.leave("idem1", table_id, key="leave-1")).replayed
        assert await s.balance("idem1") == 3000
        assert await s.open_holds() == {}
        err = await refused(s.leave("idem1", table_id, key="leave-2"))
        assert (err.status, err.code) == (404, "not_seated")


async def test_private_table_with_partners_seats_friends_across(db, internal_secret):
    async with stack(db, internal_secret) as s:
        for p in ("pa", "pb", "pc", "pd"):
            await s.deposit(p, 2000)
        created = await s.mm.post(
            "/v1/tables/private",
            c.CreatePrivate(
                idempotency_key="p1",
                player_id="pa",
                partner_id="pb",
                kind="cubana-habana",
                tier="20",
            ),
            c.JoinResult,
        )
        code = created.table.invite_code
        assert code and created.table.private
        assert {(r.player_id, r.seat) for r in created.reservations} == {("pa", 0), ("pb", 2)}
        lobby = await s.mm.get("/v1/lobby", c.Lobby)
        assert created.table.table_id not in {t.table_id for t in lobby.tables}
        joined = await s.mm.post(
            "/v1/join/code",
            c.JoinByCode(idempotency_key="p2", player_id="pc", partner_id="pd", invite_code=code),
            c.JoinResult,
        )
        assert {(r.player_id, r.seat) for r in joined.reservations} == {("pc", 1), ("pd", 3)}
        status = await s.status(created.table.table_id)
        assert status.status == "playing"
        for p in ("pa", "pb", "pc", "pd"):
            assert await s.balance(p) == 0
        err = await refused(
            s.mm.post(
                "/v1/join/code",
                c.JoinByCode(idempotency_key="p3", player_id="pe", invite_code=code),
                c.JoinResult,
            )
        )
        assert (err.status, err.code) == (409, "table_started")


async def test_partner_join_is_all_or_nothing(db, internal_secret):
    async with stack(db, internal_secret) as s:
        await s.deposit("rich", 5000)
        await s.deposit("broke", 100)
        err = await refused(s.quick("rich", "dominicana-2v2-100", "40", partner_id="broke"))
        assert err.code == "insufficient_funds"
        assert await s.balance("rich") == 5000
        assert await s.open_holds() == {}
        assert (await s.mm.get("/v1/players/rich/tables", c.PlayerTables)).tables == []


async def test_free_table_against_cpus_starts_at_once(db, internal_secret):
    async with stack(db, internal_secret) as s:
        result = await s.mm.post(
            "/v1/tables/cpu",
            c.PlayVsCpu(idempotency_key="cpu1", player_id="solo", kind="casa-parejas"),
            c.JoinResult,
        )
        table = result.table
        assert table.status == "playing" and table.tier == "free" and table.vs_cpu
        assert [x.bot for x in table.seats] == [False, True, True, True]
        created = s.engine.created[table.match_id or ""]
        assert [x.bot for x in created.seats] == [False, True, True, True]
        assert created.stake_cents == 0


async def test_free_human_table_needs_no_wallet(db, internal_secret):
    async with stack(db, internal_secret) as s:
        a = await s.quick("free1", "dominicana-1v1-100", "free")
        b = await s.quick("free2", "dominicana-1v1-100", "free")
        assert a.table.table_id == b.table.table_id
        assert (await s.status(a.table.table_id)).status == "playing"


async def test_expired_reservation_releases_its_hold(db, internal_secret):
    config = MatchmakingConfig(
        sweep_interval_ms=0, reservation_ttl_ms=10_000, disconnect_grace_ms=2_000
    )
    async with stack(db, internal_secret, config) as s:
        for p in ("exp1", "exp2"):
            await s.deposit(p, 4000)
        one = await s.quick("exp1", "casa-individual", "40")
        two = await s.quick("exp2", "casa-individual", "40")
        table_id = one.table.table_id
        assert two.table.table_id == table_id
        s.clock.advance(8_000)
        beat = await s.mm.post(
            "/v1/heartbeat", c.Heartbeat(player_id="exp1", table_id=table_id), c.HeartbeatResult
        )
        assert beat.expires_at_ms == s.clock.now_ms + 10_000
        await s.mm.post(
            "/v1/disconnect", c.Heartbeat(player_id="exp2", table_id=table_id), c.HeartbeatResult
        )
        s.clock.advance(2_500)  # exp2's grace is over, exp1 kept alive by its heartbeat
        counts = await s.matchmaker.sweep_once()
        assert counts["expired"] == 1
        assert await s.balance("exp2") == 4000
        assert await s.balance("exp1") == 0
        status = await s.status(table_id)
        assert [x.player_id for x in status.seats] == ["exp1", None, None, None]
        s.clock.advance(10_000)
        assert (await s.matchmaker.sweep_once())["expired"] == 1
        assert await s.balance("exp1") == 4000
        assert await s.open_holds() == {}


async def test_failed_pot_move_charges_no_one_and_the_table_waits_again(db, internal_secret):
    async with stack(db, internal_secret) as s:
        for p in ("pot1", "pot2", "pot3"):
            await s.deposit(p, 1000)
        first = await s.quick("pot1", "apuesta-1v1", "10")
        table_id = first.table.table_id
        rid = first.reservations[0].reservation_id
        # The hold disappears behind matchmaking's back (released with its credential, the
        # only one the ledger takes a release from): the pot move must refuse it.
        await s.matchmaker.ledger.post(
            "/v1/holds/release",
            ReleaseRequest(idempotency_key="oob", reservation_id=rid),
            EntryResult,
        )
        second = await s.quick("pot2", "apuesta-1v1", "10")
        assert second.table.table_id == table_id
        status = await s.status(table_id)
        assert status.status == "waiting" and status.match_id is None
        assert [x.player_id for x in status.seats] == [None, "pot2"]
        assert await s.balance("pot1") == 1000
        assert await s.balance("pot2") == 0
        assert list((await s.open_holds()).keys()) == [second.reservations[0].reservation_id]
        pots = await s.fetch(
            "SELECT count(*) AS n FROM ledger.pots p JOIN ledger.stakes st USING (match_id) "
            "WHERE st.player IN ('pot1','pot2')"
        )
        assert pots[0]["n"] == 0
        third = await s.quick("pot3", "apuesta-1v1", "10")
        assert third.table.table_id == table_id
        status = await s.status(table_id)
        assert status.status == "playing"
        assert await s.balance("pot3") == 0 and await s.balance("pot1") == 1000


async def test_engine_refusing_for_good_voids_the_pot(db, internal_secret):
    async with stack(db, internal_secret) as s:
        s.engine.refuse = True
        for p in ("eng1", "eng2"):
            await s.deposit(p, 2000)
        await s.quick("eng1", "casa-duelo", "20")
        result = await s.quick("eng2", "casa-duelo", "20")
        status = await s.status(result.table.table_id)
        assert status.status == "voided"
        assert await s.balance("eng1") == 2000 and await s.balance("eng2") == 2000


async def test_ledger_outage_leaves_a_pending_seat_that_the_sweeper_repairs(db, internal_secret):
    config = MatchmakingConfig(sweep_interval_ms=0, repair_after_ms=1_000)
    async with stack(db, internal_secret, config) as s:
        await s.deposit("flaky", 1000)
        s.ledger_transport.down = True
        with pytest.raises(ServiceUnavailable, match="ledger_unavailable"):
            await s.quick("flaky", "apuesta-trios", "10", key="fk")
        s.ledger_transport.down = False
        # a retry with the same key resumes the pending seat instead of taking another
        result = await s.quick("flaky", "apuesta-trios", "10", key="fk")
        assert result.reservations[0].seat == 0
        assert await s.balance("flaky") == 0
        # and a pending seat abandoned by its client is finished by the sweeper
        await s.deposit("flaky2", 1000)
        s.ledger_transport.down = True
        with pytest.raises(ServiceUnavailable):
            await s.quick("flaky2", "apuesta-trios", "10")
        s.ledger_transport.down = False
        assert (await s.matchmaker.sweep_once())["pending"] == 0  # not stale yet
        s.clock.advance(1_500)
        assert (await s.matchmaker.sweep_once())["pending"] == 1
        assert await s.balance("flaky2") == 0
        status = await s.status(result.table.table_id)
        assert [x.state for x in status.seats] == ["seated", "seated", None]
        holds = await s.open_holds()
        seated = await s.fetch(
            "SELECT id FROM matchmaking.reservations WHERE status = 'seated' AND stake_cents > 0"
        )
        assert set(holds) >= {r["id"] for r in seated}


async def test_remote_error_type_is_exported():
    assert RemoteError(409, "x", "y").code == "x"


async def test_idempotency_records_are_purged_after_their_retention(db, internal_secret):
    config = MatchmakingConfig(sweep_interval_ms=0, request_retention_ms=1_000)
    async with stack(db, internal_secret, config) as s:
        first = await s.quick("purge1", "casa-individual", "free", key="pk")
        await s.leave("purge1", first.table.table_id, key="pl")
        s.clock.advance(2_000)
        assert (await s.matchmaker.sweep_once())["purged"] >= 2
        again = await s.quick("purge1", "casa-individual", "free", key="pk")
        assert not again.replayed
        assert again.reservations[0].reservation_id != first.reservations[0].reservation_id


async def test_limits_and_credentials(db, internal_secret):
    import httpx

    config = MatchmakingConfig(sweep_interval_ms=0, max_tables_per_player=2)
    async with stack(db, internal_secret, config) as s:
        a = await s.quick("lim1", "casa-individual", "free", key="l1")
        b = await s.quick("lim1", "casa-individual", "free", key="l2")
        assert a.table.table_id != b.table.table_id  # never twice at one table
        err = await refused(s.quick("lim1", "casa-individual", "free", key="l3"))
        assert (err.status, err.code) == (409, "too_many_tables")
        mine = await s.mm.get("/v1/players/lim1/tables", c.PlayerTables)
        assert {t.table_id for t in mine.tables} == {a.table.table_id, b.table.table_id}
        transport = httpx.ASGITransport(app=s.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://mm") as anon:
            response = await anon.get("/v1/kinds")
        assert response.status_code == 401
        assert response.json()["error"] == "unauthorized"


def test_operator_config_file_narrows_the_offer(tmp_path, internal_secret):
    """The operator chooses which kinds and tiers are offered (MESA_MATCHMAKING_CONFIG)."""
    import pytest

    from services.common.config import ConfigError, load_settings
    from services.matchmaking.config import load_config

    path = tmp_path / "mm.json"
    path.write_text('{"offered": {"apuesta-parejas": ["10", "free"]}}')
    settings = load_settings({"MESA_VAR_DIR": str(tmp_path), "MESA_MATCHMAKING_CONFIG": str(path)})
    assert load_config(settings).offered == {"apuesta-parejas": ["10", "free"]}
    path.write_text('{"offered": {"no-such-kind": ["10"]}}')
    with pytest.raises(ConfigError):
        load_config(settings)
    missing = load_settings(
        {"MESA_VAR_DIR": str(tmp_path), "MESA_MATCHMAKING_CONFIG": str(tmp_path / "nope.json")}
    )
    with pytest.raises(ConfigError, match="MESA_MATCHMAKING_CONFIG"):
        load_config(missing)


async def test_quick_join_route_refuses_bad_requests_like_every_route(db, internal_secret):
    """Quick join is answered ahead of Litestar's router: the same credential check and the
    same {"error", "detail"} refusals, and nothing held."""
    import httpx

    async with stack(db, internal_secret) as s:
        count = "SELECT count(*) FROM matchmaking.reservations"
        before = (await s.fetch(count))[0][0], await s.open_holds()
        # A body that is not a QuickJoin (a heartbeat has no kind or tier).
        err = await refused(
            s.mm.post("/v1/join/quick", c.Heartbeat(table_id="t", player_id="p"), c.JoinResult)
        )
        assert (err.status, err.code) == (400, "invalid_request")
        err = await refused(s.mm.get("/v1/join/quick", c.JoinResult))
        assert (err.status, err.code) == (405, "method_not_allowed")
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=s.app), base_url="http://mm"
        ) as raw:
            answer = await raw.post("/v1/join/quick", content=b"{}")
        assert answer.status_code == 401
        assert answer.json()["error"] == "unauthorized"
        assert ((await s.fetch(count))[0][0], await s.open_holds()) == before


async def test_a_partner_join_counts_and_excludes_both_players_tables(db, internal_secret):
    """mm0013 reads both partners' waiting seats in one statement: either one at the limit
    refuses the pair, and no table either already sits at is chosen for them."""
    config = MatchmakingConfig(sweep_interval_ms=0, max_tables_per_player=1)
    async with stack(db, internal_secret, config) as s:
        mate = await s.quick("pt2", "apuesta-parejas", "free", key="m1")
        err = await refused(s.quick("pt1", "apuesta-parejas", "free", partner_id="pt2", key="j1"))
        assert (err.status, err.code) == (409, "too_many_tables")
    config = MatchmakingConfig(sweep_interval_ms=0, max_tables_per_player=2)
    async with stack(db, internal_secret, config) as s:
        pair = await s.quick("pt1", "apuesta-parejas", "free", partner_id="pt2", key="j2")
        # pt2's table has three free seats (two across), but pt2 already sits there.
        assert pair.table.table_id != mate.table.table_id
        assert sorted(r.seat for r in pair.reservations) in ([0, 2], [1, 3])


async def test_an_unlisted_quick_join_keeps_the_table_out_of_the_lobby(db, internal_secret):
    """A player who sits only with random opponents: his table is never offered in the lobby
    (whether he opened it or joined it), yet other quick joins still fill it."""
    async with stack(db, internal_secret) as s:
        own = await s.quick("rnd1", "cubana-oriente", "free", unlisted=True)
        listed = await s.quick("rnd2", "cubana-barrio", "free")
        ids = set()
        for kind in ("cubana-oriente", "cubana-barrio"):
            lobby = await s.mm.get("/v1/lobby", c.Lobby, params={"kind": kind})
            ids |= {t.table_id for t in lobby.tables}
        assert own.table.table_id not in ids and listed.table.table_id in ids
        # joining a listed table takes it out of the list too
        joined = await s.quick("rnd3", "cubana-barrio", "free", unlisted=True)
        assert joined.table.table_id == listed.table.table_id
        lobby = await s.mm.get("/v1/lobby", c.Lobby, params={"kind": "cubana-barrio"})
        assert listed.table.table_id not in {t.table_id for t in lobby.tables}
        # the quick-join queue still seats others with him
        other = await s.quick("rnd4", "cubana-oriente", "free")
        assert other.table.table_id == own.table.table_id
