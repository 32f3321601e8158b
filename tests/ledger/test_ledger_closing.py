"""The daily close: four eyes, days in order, no posting into a closed day, and the report
recomputed here from the ledger's tables by the test's own SQL, to the cent.

PostgreSQL dates every entry with its transaction's `now()`, which cannot be set. Two honest
ways give a closed day with real entries in it:

* `backdated`: the test posts through the real functions, then (as superuser, triggers off)
  moves its own rows one day back before anything seals them, and closes yesterday with the
  real clock; postings made afterwards are really dated today (the open day).
* `closed_today`: the close itself is given a clock one day ahead (`now`), so "today" is over
  and can be closed; every posting then made through the real functions is dated into the
  closed day and must be refused by the SQL check.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import msgspec
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from ledger_helpers import funded, key, migrate, refused, seated_match
from litestar.testing import AsyncTestClient

from ledger import cli, closing
from ledger.errors import LedgerError
from ledger.ops import Ledger, Winner
from services.common.migrate import ensure_app_role
from services.common.secret_file import write_secret_file
from services.ledger.app import CLOSE_MAX_BODY_BYTES, create_app
from services.ledger.contract import MAX_CLOSE_ALERT_KINDS, MAX_CLOSE_ALERTS, CloseAction
from tests.conftest import PgCluster, make_settings
from tests.service_auth import AS_DECLARED, CallerByRoute, ledger_caller

SIGNER = Ed25519PrivateKey.generate()


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@pytest.fixture
def fresh(pg_cluster: PgCluster) -> Iterator[str]:
    """A database of its own per test: a close is global to the books."""
    url = pg_cluster.create_database("close")
    asyncio.run(ensure_app_role(url))
    migrate(url)
    try:
        yield url
    finally:
        pg_cluster.drop_database(url)


@pytest.fixture
async def books(fresh: str) -> AsyncIterator[Ledger]:
    ledger = await Ledger.connect(fresh, min_size=1, max_size=4)
    try:
        yield ledger
    finally:
        await ledger.close()


async def day_of_activity(ledger: Ledger, tag: str) -> dict[str, Any]:
    """Deposits, withdrawals, a reversal, two settled matches, a void, a release."""
    for p, cents in ((f"{tag}a", 10_000), (f"{tag}b", 7_501), (f"{tag}c", 3_333)):
        await funded(ledger, p, cents)
    wd = await ledger.withdraw(key(), f"{tag}a", 1_250, "USD", "cash out")
    dep = await ledger.deposit(key(), f"{tag}c", 999, "USD", "typo")
    await ledger.reverse(key(), dep.entry_id, "fix typo")
    await seated_match(ledger, f"{tag}-m1", [f"{tag}a", f"{tag}b"], 1_005, tier="bronze")
    await ledger.settle_match(key(), f"{tag}-m1", [Winner(f"{tag}a")], 1000)
    await seated_match(ledger, f"{tag}-m2", [f"{tag}a", f"{tag}b", f"{tag}c"], 333, tier="silver")
    await ledger.settle_match(key(), f"{tag}-m2", [Winner(f"{tag}b"), Winner(f"{tag}c")], 1000)
    await seated_match(ledger, f"{tag}-m3", [f"{tag}a", f"{tag}b"], 200)
    await ledger.void_match(key(), f"{tag}-m3", "aborted")
    await ledger.hold(key(), f"{tag}b", f"{tag}-r9", 77, "USD", "t9")
    await ledger.release(key(), f"{tag}-r9")
    await ledger.hold(key(), f"{tag}c", f"{tag}-r10", 50, "USD", "t10")  # still held at close
    return {"withdrawal": wd.entry_id, "deposit": dep.entry_id}


async def backdate_everything(url: str) -> None:
    """Move every row the test posted one day back (nothing is sealed yet)."""
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            await conn.execute("SET LOCAL session_replication_role = replica")
            await conn.execute(
                "UPDATE ledger.entries SET created_at = created_at - interval '1 day'"
            )
            await conn.execute(
                "UPDATE ledger.pots SET started_at = started_at - interval '1 day', "
                "closed_at = closed_at - interval '1 day'"
            )
            await conn.execute(
                "UPDATE ledger.accounts SET created_at = created_at - interval '1 day', "
                "closed_at = closed_at - interval '1 day'"
            )
        assert await conn.fetchval("SELECT count(*) FROM ledger.chain_seals") == 0
    finally:
        await conn.close()


async def independent_figures(url: str, day: dt.date) -> dict[str, Any]:
    """The report's figures from the tables, with SQL and arithmetic of the test's own."""
    conn = await asyncpg.connect(url)
    try:
        start = dt.datetime.combine(day, dt.time(0), tzinfo=dt.UTC)
        end = start + dt.timedelta(days=1)
        balances = {
            (r["kind"], r["currency"]): (int(r["opening"]), int(r["closing"]))
            for r in await conn.fetch(
                """SELECT a.kind::text AS kind, a.currency::text AS currency,
                          sum(CASE WHEN e.created_at < $1 THEN p.amount ELSE 0 END) AS opening,
                          sum(CASE WHEN e.created_at < $2 THEN p.amount ELSE 0 END) AS closing
                   FROM ledger.accounts a
                   JOIN ledger.postings p ON p.account_id = a.id
                   JOIN ledger.entries e ON e.id = p.entry_id
                   GROUP BY 1, 2""",
                start,
                end,
            )
        }
        # every posting of the day, summed in Python by what the entry and account are
        rows = await conn.fetch(
            """SELECT e.id, e.kind::text AS kind, e.result ->> 'reverses_kind' AS reverses,
                      a.code, a.kind::text AS account_kind, p.amount
               FROM ledger.entries e JOIN ledger.postings p ON p.entry_id = e.id
               JOIN ledger.accounts a ON a.id = p.account_id
               WHERE e.created_at >= $1 AND e.created_at < $2""",
            start,
            end,
        )

        def line(kind: str, account_kind: str, sign: int, reverses: str | None = None) -> Any:
            picked = [
                r
                for r in rows
                if r["kind"] == kind
                and r["account_kind"] == account_kind
                and (reverses is None or r["reverses"] == reverses)
            ]
            return {
                "count": len({r["id"] for r in picked}),
                "amount": sign * sum(r["amount"] for r in picked),
            }

        commission: dict[tuple[str, str], list[int]] = {}
        for r in await conn.fetch(
            """SELECT pot.tier, pot.variant, pot.stake_total, c.amount
               FROM ledger.pots pot
               JOIN ledger.entries e ON e.id = pot.close_entry_id AND e.kind = 'settle'
               JOIN ledger.postings c ON c.entry_id = e.id
               JOIN ledger.accounts a ON a.id = c.account_id AND a.code LIKE 'house:commission:%'
               WHERE e.created_at >= $1 AND e.created_at < $2""",
            start,
            end,
        ):
            got = commission.setdefault((r["tier"], r["variant"]), [0, 0, 0])
            got[0] += 1
            got[1] += r["stake_total"]
            got[2] += r["amount"]
        return {
            "balances": balances,
            "deposits": line("deposit", "wallet", 1),
            "withdrawals": line("withdrawal", "wallet", -1),
            "deposit_reversals": line("reversal", "wallet", -1, "deposit"),
            "withdrawal_reversals": line("reversal", "wallet", 1, "withdrawal"),
            "stakes_held": line("hold", "hold", 1),
            "holds_released": line("release", "wallet", 1),
            "stakes_into_pots": line("start", "pot", 1),
            "payouts": line("settle", "wallet", 1),
            "commission": line("settle", "commission", 1),
            "voids_refunded": line("void", "wallet", 1),
            "by_tier": commission,
        }
    finally:
        await conn.close()


def activity(report: dict[str, Any], name: str) -> dict[str, int]:
    (found,) = [a for a in report["activity"] if a["line"] == name and a["currency"] == "USD"]
    return {"count": found["count"], "amount": found["amount"]}


async def test_four_eyes_close_a_day_and_the_report_matches_the_tables(
    books: Ledger, fresh: str
) -> None:
    ids = await day_of_activity(books, "fe")
    await backdate_everything(fresh)
    now = utc_now()
    yesterday = now.date() - dt.timedelta(days=1)
    pool = books.pool

    # in order: not before the books begin, not today, not after
    await refused(
        closing.propose(pool, yesterday - dt.timedelta(days=1), "u-ana", now),
        409,
        "day_out_of_order",
    )
    await refused(closing.propose(pool, now.date(), "u-ana", now), 409, "day_not_over")
    await refused(closing.approve(pool, yesterday, "u-ben", now, SIGNER), 404, "no_proposal")

    proposed = await closing.propose(pool, yesterday, "u-ana", now)
    assert proposed["status"] == "proposed" and proposed["signed"] is None
    await refused(closing.propose(pool, yesterday, "u-ben", now), 409, "already_proposed")
    # the proposer cannot approve; nothing changes
    await refused(closing.approve(pool, yesterday, "u-ana", now, SIGNER), 409, "same_approver")
    async with pool.acquire() as conn:
        assert (await closing.get(conn, yesterday))["status"] == "proposed"  # type: ignore[index]

    closed = await closing.approve(pool, yesterday, "u-ben", now, SIGNER)
    assert closed["status"] == "closed"
    assert (closed["proposed_by"], closed["approved_by"]) == ("u-ana", "u-ben")
    report = closed["report"]
    assert report == proposed["report"]
    signed = closed["signed"]
    assert signed["document"]["report"] == report
    assert closing.verify({**signed}, SIGNER.public_key().public_bytes_raw())

    # the figures, recomputed by the test's own SQL, to the cent
    mine = await independent_figures(fresh, yesterday)
    for name in (
        "deposits",
        "withdrawals",
        "deposit_reversals",
        "withdrawal_reversals",
        "stakes_held",
        "holds_released",
        "stakes_into_pots",
        "payouts",
        "commission",
        "voids_refunded",
    ):
        assert activity(report, name) == mine[name], name
    assert {
        (b["kind"], b["currency"]): (b["opening"], b["closing"]) for b in report["balances"]
    } == mine["balances"]
    assert {
        (c["tier"], c["variant"]): [c["matches"], c["pot_total"], c["commission"]]
        for c in report["commission"]
    } == mine["by_tier"]
    # and by hand: three funding deposits and the typo, one withdrawal, the typo reversed
    assert activity(report, "deposits") == {"count": 4, "amount": 10_000 + 7_501 + 3_333 + 999}
    assert activity(report, "withdrawals") == {"count": 1, "amount": 1_250}
    assert activity(report, "deposit_reversals") == {"count": 1, "amount": 999}
    assert report["commission"] == [
        {
            "tier": "bronze",
            "variant": "dominicana",
            "currency": "USD",
            "matches": 1,
            "pot_total": 2_010,
            "commission": 201,
        },
        {
            "tier": "silver",
            "variant": "dominicana",
            "currency": "USD",
            "matches": 1,
            "pot_total": 999,
            "commission": 99,
        },
    ]
    assert report["pots_settled"] == [
        {"currency": "USD", "count": 2, "pot_total": 3_009, "commission": 300}
    ]
    held = [b for b in report["balances"] if b["kind"] == "hold"]
    assert held == [
        {"kind": "hold", "currency": "USD", "opening": 0, "closing": 50, "movement": 50}
    ]
    assert report["balanced"] and report["reconciliation"]["ok"]
    async with pool.acquire() as conn:
        head = await conn.fetchval("SELECT max(id) FROM ledger.entries")
    assert report["chain_head"]["entry_id"] == head
    assert len(bytes.fromhex(report["chain_head"]["chain_hash"])) == 32

    # a closed day is never reopened, withdrawn or proposed again
    await refused(closing.withdraw(pool, yesterday), 409, "day_closed")
    await refused(closing.propose(pool, yesterday, "u-cy", now), 409, "day_closed")
    conn = await asyncpg.connect(fresh)
    try:
        with pytest.raises(asyncpg.PostgresError, match="day_closed"):
            await conn.execute("DELETE FROM ledger.day_closes")
    finally:
        await conn.close()

    # a correction of the closed day's withdrawal is a reversal dated today, the open day
    fix = await books.reverse(key(), ids["withdrawal"], "not paid out")
    assert fix.created_at.startswith(now.date().isoformat())
    # and today is the next day to close, once it is over
    async with pool.acquire() as conn:
        assert await closing.next_day(conn) == now.date()


async def test_a_posting_into_a_closed_day_is_refused_on_every_path(
    books: Ledger, fresh: str
) -> None:
    await day_of_activity(books, "cl")
    await seated_match(books, "cl-open", ["cla", "clb"], 100)
    tomorrow = utc_now() + dt.timedelta(days=1)
    today = utc_now().date()
    pool = books.pool
    await refused(
        closing.propose(
            pool, today + dt.timedelta(days=1), "u-ana", tomorrow + dt.timedelta(days=1)
        ),
        409,
        "day_out_of_order",
    )
    await closing.propose(pool, today, "u-ana", tomorrow)
    await closing.approve(pool, today, "u-ben", tomorrow, SIGNER)
    before = await _entries(fresh)
    # every write path is dated today (now()), into the closed day
    await refused(books.deposit(key(), "cla", 100, "USD", "late"), 409, "day_closed")
    await refused(books.withdraw(key(), "cla", 100, "USD", "late"), 409, "day_closed")
    await refused(books.hold(key(), "cla", "late-r", 10, "USD", "t"), 409, "day_closed")
    await refused(books.settle_match(key(), "cl-open", [Winner("cla")], 1000), 409, "day_closed")
    await refused(books.void_match(key(), "cl-open", "late"), 409, "day_closed")
    # the group commit's batch path too
    from ledger.batch import GroupCommit

    group = GroupCommit(books)
    try:
        with pytest.raises(LedgerError, match="day_closed"):
            await group.call("deposit", *books.deposit_args(key(), "cla", 5, "USD", "batched"))
    finally:
        await group.close()
    # and a plain INSERT by the service's role
    conn = await asyncpg.connect(fresh, server_settings={"role": "mesa_app"})
    try:
        with pytest.raises(asyncpg.PostgresError, match="day_closed"):
            await conn.execute(
                "INSERT INTO ledger.entries (kind, idempotency_key, request_hash, result) "
                "VALUES ('deposit', $1, '\\x00', '{}')",
                key(),
            )
    finally:
        await conn.close()
    assert await _entries(fresh) == before


async def _entries(url: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM ledger.entries"))
    finally:
        await conn.close()


async def test_approval_refuses_a_report_that_changed_and_withdraw(
    books: Ledger, fresh: str
) -> None:
    await funded(books, "chx", 1_000)
    tomorrow = utc_now() + dt.timedelta(days=1)
    today = utc_now().date()
    pool = books.pool
    await closing.propose(pool, today, "u-ana", tomorrow)
    await refused(closing.propose(pool, today, "u-ben", tomorrow), 409, "already_proposed")
    # a posting after the proposal, still dated into the day: B would not approve what A saw
    await books.deposit(key(), "chx", 1, "USD", "one more cent")
    await refused(closing.approve(pool, today, "u-ben", tomorrow, SIGNER), 409, "report_changed")
    withdrawn = await closing.withdraw(pool, today)
    assert withdrawn["status"] == "withdrawn"
    await refused(closing.withdraw(pool, today), 404, "no_proposal")
    again = await closing.propose(pool, today, "u-ben", tomorrow)
    assert activity(again["report"], "deposits") == {"count": 2, "amount": 1_001}
    closed = await closing.approve(pool, today, "u-ana", tomorrow, SIGNER)
    assert closed["status"] == "closed"


def test_signature_fails_on_a_one_cent_edit() -> None:
    document = {"format": closing.FORMAT, "day": "2026-12-01", "report": {"amount": 12_345}}
    signed = closing.sign(SIGNER, document)
    raw = SIGNER.public_key().public_bytes_raw()
    parsed = msgspec.json.decode(msgspec.json.encode(signed))
    assert closing.verify(parsed, raw)
    parsed["document"]["report"]["amount"] += 1
    assert not closing.verify(parsed, raw)
    assert not closing.verify(signed, Ed25519PrivateKey.generate().public_key().public_bytes_raw())
    assert not closing.verify({"document": document, "signature": "zz"}, raw)


# --- the service's routes and the CLI -------------------------------------------------------


@pytest.fixture
async def service(
    fresh: str, internal_secret: bytes, tmp_path: Path
) -> AsyncIterator[AsyncTestClient[Any]]:
    key_file = tmp_path / "report_signing_key"
    write_secret_file(key_file, SIGNER_SEED.hex())
    settings = make_settings(fresh, internal_secret, report_key_file=key_file)
    tomorrow = lambda: utc_now() + dt.timedelta(days=1)  # noqa: E731 (today is over)
    app = create_app(settings, pool_size=4, seal_in_background=False, clock=tomorrow)
    async with AsyncTestClient(app) as c:
        c.headers["Authorization"] = AS_DECLARED
        c.auth = CallerByRoute(internal_secret, "ledger", ledger_caller)
        yield c


SIGNER_SEED = bytes(range(32))
SERVICE_SIGNER = Ed25519PrivateKey.from_private_bytes(SIGNER_SEED)


def refusal(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["error"] == code, response.text


NO_ALERTS: dict[str, Any] = {"alerts": [], "by_kind": []}


def act(actor: str, integrity: dict[str, Any] | None = None) -> dict[str, Any]:
    """A proposal's or approval's body: the actor and the day's integrity alerts (none)."""
    return {"actor": actor, "integrity": NO_ALERTS if integrity is None else integrity}


def alert_line(alert_id: int, day: str, kind: str = "pair_flow") -> dict[str, Any]:
    return {
        "id": alert_id,
        "kind": kind,
        "player": "p1",
        "counterpart": "p2",
        "score": "1.5000",
        "raised_at": f"{day}T10:00:00.000000Z",
    }


def test_the_largest_integrity_summary_fits_a_close_request() -> None:
    longest = {
        "id": 2**63 - 1,
        "kind": "k" * 40,
        "player": "p" * 64,
        "counterpart": "c" * 64,
        "score": "-" + "9" * 20 + ".9999",
        "raised_at": "2026-12-01T23:59:59.999999Z",
    }
    kinds = [{"kind": f"k{i:039d}", "count": 10_000_000} for i in range(MAX_CLOSE_ALERT_KINDS)]
    body = act("u" * 64, {"alerts": [longest] * MAX_CLOSE_ALERTS, "by_kind": kinds})
    body["integrity"]["truncated"] = 10_000_000
    encoded = msgspec.json.encode(body)
    msgspec.json.decode(encoded, type=CloseAction)  # valid as far as the Struct goes
    assert len(encoded) < CLOSE_MAX_BODY_BYTES


async def test_the_service_refuses_a_malformed_integrity_summary(
    service: AsyncTestClient[Any], books: Ledger
) -> None:
    await funded(books, "svi", 1_000)
    today = utc_now().date().isoformat()
    yesterday = (utc_now().date() - dt.timedelta(days=1)).isoformat()
    two = [alert_line(1, today), alert_line(2, today)]
    counted = [{"kind": "pair_flow", "count": 2}]
    one = {"kind": "pair_flow", "count": 1}
    too_many = [alert_line(i, today) for i in range(1, 5_002)]
    malformed: list[tuple[dict[str, Any], str]] = [
        ({"actor": "u-1"}, "integrity_summary_required"),
        (
            act("u-1", {"alerts": too_many, "by_kind": [{"kind": "pair_flow", "count": 5_001}]}),
            "invalid_request",
        ),
        (act("u-1", {"alerts": two, "by_kind": counted, "extra": 1}), "invalid_request"),
        (
            act("u-1", {"alerts": [{**two[0], "status": "open"}], "by_kind": counted}),
            "invalid_request",
        ),
        (act("u-1", {"alerts": [{**two[0], "score": 1.5}], "by_kind": counted}), "invalid_request"),
        (act("u-1", {"alerts": two[::-1], "by_kind": counted}), "invalid_integrity_summary"),
        (act("u-1", {"alerts": [two[0], two[0]], "by_kind": counted}), "invalid_integrity_summary"),
        (
            act("u-1", {"alerts": two, "by_kind": [{"kind": "pair_flow", "count": 3}]}),
            "invalid_integrity_summary",
        ),
        (act("u-1", {"alerts": two, "by_kind": []}), "invalid_integrity_summary"),
        (
            act("u-1", {"alerts": [alert_line(1, yesterday)], "by_kind": [one]}),
            "invalid_integrity_summary",
        ),
    ]
    for body, code in malformed:
        refusal(await service.post(f"/v1/closes/{today}/propose", json=body), 400, code)
    # nothing was proposed
    assert (await service.get("/v1/closes")).json()["closes"] == []
    good = {"alerts": two, "by_kind": counted, "truncated": 0}
    proposed = await service.post(f"/v1/closes/{today}/propose", json=act("u-1", good))
    assert proposed.status_code == 200, proposed.text
    for body, code in malformed:
        body = {**body, "actor": "u-2"}
        refusal(await service.post(f"/v1/closes/{today}/approve", json=body), 400, code)
    assert (await service.get(f"/v1/closes/{today}")).json()["status"] == "proposed"
    # the same alerts with a later-listed one: the report changed
    three = {
        "alerts": [*two, alert_line(3, today, "structuring")],
        "by_kind": [*counted, {"kind": "structuring", "count": 1}],
    }
    refusal(
        await service.post(f"/v1/closes/{today}/approve", json=act("u-2", three)),
        409,
        "report_changed",
    )
    closed = await service.post(f"/v1/closes/{today}/approve", json=act("u-2", good))
    assert closed.status_code == 200, closed.text
    section = closed.json()["signed"]["document"]["report"]["integrity_alerts"]
    assert section == {**good, "total": 2}


async def test_the_close_through_the_service_and_verify_report(
    service: AsyncTestClient[Any], books: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await funded(books, "svx", 4_321)
    today = utc_now().date().isoformat()
    for bad in (
        "2026-13-01",
        "yesterday",
        "2026-1-1",
        "2026-12-01T00:00",
        "0001-01-01",
        "9999-12-31",
    ):
        refusal(await service.get(f"/v1/closes/{bad}/draft"), 400, "invalid_date")
        refusal(
            await service.post(f"/v1/closes/{bad}/propose", json={"actor": "u-1"}),
            400,
            "invalid_date",
        )
    refusal(await service.get("/v1/closes/2001-01-01"), 404, "unknown_close")
    refusal(await service.post(f"/v1/closes/{today}/propose", json={}), 400, "invalid_request")
    refusal(
        await service.post(f"/v1/closes/{today}/propose", json={"actor": "u-1", "x": 1}),
        400,
        "invalid_request",
    )
    listed = (await service.get("/v1/closes")).json()
    assert listed == {"closes": [], "next_day": today}
    draft = (await service.get(f"/v1/closes/{today}/draft")).json()
    assert activity(draft, "deposits") == {"count": 1, "amount": 4_321}

    proposed = await service.post(f"/v1/closes/{today}/propose", json=act("u-1"))
    assert proposed.status_code == 200, proposed.text
    refusal(
        await service.post(f"/v1/closes/{today}/approve", json=act("u-1")),
        409,
        "same_approver",
    )
    closed = await service.post(f"/v1/closes/{today}/approve", json=act("u-2"))
    assert closed.status_code == 200, closed.text
    signed = closed.json()["signed"]
    key = (await service.get("/v1/closes/key")).json()
    assert key["public_key"] == SERVICE_SIGNER.public_key().public_bytes_raw().hex()

    # the download, checked by `mesa finance verify-report`; a one-cent edit fails it
    served = {**signed, "public_key": key["public_key"]}
    good = tmp_path / "report.json"
    good.write_bytes(msgspec.json.encode(served))
    assert await cli.run(["verify-report", str(good), "--public-key", key["public_key"]]) == 0
    edited = msgspec.json.decode(good.read_bytes())
    for line in edited["document"]["report"]["activity"]:
        if line["line"] == "deposits":
            line["amount"] += 1
    bad_file = tmp_path / "edited.json"
    bad_file.write_bytes(msgspec.json.encode(edited))
    assert await cli.run(["verify-report", str(bad_file), "--public-key", key["public_key"]]) == 1
    # without --public-key: the key of MESA_REPORT_KEY_FILE (as on the ledger's host)
    monkeypatch.setenv("MESA_REPORT_KEY_FILE", str(tmp_path / "report_signing_key"))
    assert await cli.run(["verify-report", str(good)]) == 0
    assert await cli.run(["verify-report", str(bad_file)]) == 1
    other = Ed25519PrivateKey.generate().public_key().public_bytes_raw().hex()
    assert await cli.run(["verify-report", str(good), "--public-key", other]) == 1
    assert await cli.run(["verify-report", str(tmp_path / "missing.json")]) == 2
