"""Hash chain and reconciliation through `mesa finance`: clean books pass, tampering and
planted discrepancies are named."""

from __future__ import annotations

import asyncio
import datetime as dt

import asyncpg
import msgspec
import pytest
from ledger_helpers import funded, key, seated_match, superuser

from ledger import cashier_cli, chain, cli
from ledger.ops import Ledger, Winner
from ledger.schema import CHAIN_LOCK_KEY


async def _book_some_activity(ledger: Ledger) -> None:
    for p in ("cr_a", "cr_b", "cr_c", "cr_d"):
        await funded(ledger, p, 5_000)
    await seated_match(ledger, "cr-m1", ["cr_a", "cr_b", "cr_c", "cr_d"], 250, tier="silver")
    await ledger.settle_match(key(), "cr-m1", [Winner("cr_a"), Winner("cr_c")], 1000)
    await seated_match(ledger, "cr-m2", ["cr_a", "cr_b"], 1000, tier="gold")
    await ledger.void_match(key(), "cr-m2", "no hand played")
    await seated_match(ledger, "cr-m3", ["cr_c", "cr_d"], 77, tier="bronze")  # stays open


async def test_clean_books_pass_every_command(
    ledger: Ledger, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    await _book_some_activity(ledger)
    assert await cashier_cli.run(["open", "cr_e"], url) == 0
    assert await cashier_cli.run(["open", "cr_e"], url) == 0
    assert "already open" in capsys.readouterr().out
    # Money moves only through the gateway's checked cashier: the CLI posts none (bad usage).
    assert await cashier_cli.run(["deposit", "cr_e", "12.34", "--reference", "cr-pay"], url) == 2
    assert await cashier_cli.run(["withdraw", "cr_e", "1", "--reference", "cr-w"], url) == 2
    capsys.readouterr()
    await ledger.deposit(key(), "cr_e", 1234, "USD", "cr-pay")

    today = dt.datetime.now(dt.UTC).date().isoformat()
    assert await cli.run(["reconcile"], url) == 0
    assert await cli.run(["reconcile", "--date", today], url) == 0
    assert "all checks hold" in capsys.readouterr().out
    assert await cli.run(["trial-balance", "--format", "json"], url) == 0
    assert '"balanced": true' in capsys.readouterr().out
    assert await cli.run(["pots", "--status", "settled", "--format", "csv"], url) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("match_id,tier,variant") and "cr-m1" in out
    assert await cli.run(["commission", "--by", "tier", "--format", "json"], url) == 0
    assert '"commission": 100' in capsys.readouterr().out
    assert await cli.run(["statement", "cr_a", "--format", "csv"], url) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("entry_id,created_at,kind") and len(lines) == 1 + 5
    future = (dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)).isoformat()
    assert await cli.run(["balance", "wallet:cr_e", "--at", future], url) == 0
    assert "1234 cents" in capsys.readouterr().out
    assert await cli.run(["balance", "wallet:cr_e", "--at", "2000-01-01T00:00:00Z"], url) == 0
    assert ": 0 cents" in capsys.readouterr().out
    assert await cli.run(["export", "--format", "csv"], url) == 0
    assert "house:commission:" in capsys.readouterr().out
    assert await cli.run(["verify-chain"], url) == 0
    assert "hash chain ok" in capsys.readouterr().out


async def test_tampered_amount_breaks_the_chain_at_that_entry(
    ledger: Ledger, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    await funded(ledger, "cr_t", 500)
    admin = await superuser(url)
    try:
        await chain.seal(admin)
        target = await admin.fetchval(
            "SELECT e.id FROM ledger.entries e WHERE e.kind = 'settle' AND e.match_id = 'cr-m1'"
        )
        await funded(ledger, "cr_t", 1)  # one more entry after the target
        await chain.seal(admin)
        assert (await chain.verify(admin)).ok
        await _shift_leg_3(admin, target, 1)
        assert await cli.run(["verify-chain"], url) == 1
        out = capsys.readouterr().out
        assert f"BROKEN at entry {target}" in out
        report = await chain.verify(admin)
        assert report.first_bad_entry == target
        # reconciliation sees the same row from the money side
        assert await cli.run(["reconcile"], url) == 1
        out = capsys.readouterr().out
        assert f"entry {target}" in out and "DISCREPANCY" in out
        await _shift_leg_3(admin, target, -1)  # put it back: later tests share these books
        assert (await chain.verify(admin)).ok
    finally:
        await admin.close()


async def _shift_leg_3(admin: asyncpg.Connection, entry_id: int, cents: int) -> None:
    await admin.execute("ALTER TABLE ledger.postings DISABLE TRIGGER postings_append_only")
    await admin.execute(
        "UPDATE ledger.postings SET amount = amount + $2, balance_after = balance_after + $2 "
        "WHERE entry_id = $1 AND leg = 3",
        entry_id,
        cents,
    )
    await admin.execute("ALTER TABLE ledger.postings ENABLE TRIGGER postings_append_only")


async def test_verify_names_a_deleted_entry_an_inserted_one_and_an_altered_seal(
    ledger: Ledger, url: str
) -> None:
    """Each change is made by a superuser inside a transaction that is then rolled back, so
    the books stay as they were for the tests after this one."""
    admin = await superuser(url)
    try:
        await funded(ledger, "cr_v", 10)
        gap = await admin.fetchval("SELECT nextval('ledger.entries_id_seq')")  # never posted
        await funded(ledger, "cr_v", 20)
        await chain.seal(admin)
        report = await chain.verify(admin)
        assert report.ok and report.unsealed == 0, report.problem
        victim = await admin.fetchval("SELECT max(id) FROM ledger.entries WHERE id < $1", gap)
        last_seal, last_entry = await admin.fetchrow(
            "SELECT id, last_entry_id FROM ledger.chain_seals ORDER BY id DESC LIMIT 1"
        )
        cases = [
            (
                "postings",
                "DELETE FROM ledger.postings WHERE entry_id = $1",
                victim,
                f"entry {victim} is in the chain but missing",
            ),
            (
                "entries",
                "INSERT INTO ledger.entries SELECT (jsonb_populate_record(e, jsonb_build_object("
                "'id', $1::bigint, 'idempotency_key', 'forged'))).* "
                "FROM ledger.entries e WHERE e.id = (SELECT max(id) FROM ledger.entries)",
                gap,
                f"entry {gap} is not in the chain (inserted after sealing?)",
            ),
            (
                "chain_seals",
                "UPDATE ledger.chain_seals SET chain_hash = sha256(chain_hash) WHERE id = $1",
                last_seal,
                f"seal {last_seal} does not match the chain at entry {last_entry}",
            ),
        ]
        for table, change, arg, problem in cases:
            undo = admin.transaction()
            await undo.start()
            try:
                await admin.execute(f"ALTER TABLE ledger.{table} DISABLE TRIGGER USER")
                await admin.execute(change, arg)
                if table == "postings":  # then the entry itself
                    await admin.execute("ALTER TABLE ledger.entries DISABLE TRIGGER USER")
                    await admin.execute("DELETE FROM ledger.entries WHERE id = $1", victim)
                report = await chain.verify(admin)
                assert not report.ok and report.problem == problem
            finally:
                await undo.rollback()
        assert (await chain.verify(admin)).ok
    finally:
        await admin.close()


async def test_the_sealer_writes_small_seals_paced_and_larger_ones_for_a_backlog(
    ledger: Ledger, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each seal is one statement: paced, at most CHUNK entries; past PACE_BACKLOG_MAX, at most
    BACKLOG_CHUNK. The seals follow one another and the chain verifies either way."""
    admin = await superuser(url)

    async def new_seal_sizes(entries: int) -> list[int]:
        for _ in range(entries):
            await funded(ledger, "cr_many", 1)
        before = await admin.fetchval("SELECT coalesce(max(id), 0) FROM ledger.chain_seals")
        assert await chain.seal(admin) == entries
        return [
            int(n)
            for (n,) in await admin.fetch(
                "SELECT entry_count FROM ledger.chain_seals WHERE id > $1 ORDER BY id", before
            )
        ]

    try:
        await chain.seal(admin)
        monkeypatch.setattr(chain, "PACE_S", 0.0)
        monkeypatch.setattr(chain, "CHUNK", 7)
        assert await new_seal_sizes(20) == [7, 7, 6]
        monkeypatch.setattr(chain, "PACE_BACKLOG_MAX", 5)
        monkeypatch.setattr(chain, "BACKLOG_CHUNK", 9)
        assert await new_seal_sizes(20) == [9, 9, 2]
        report = await chain.verify(admin)
        assert report.ok and report.unsealed == 0, report.problem
    finally:
        await admin.close()


async def test_reconcile_names_a_planted_balance(
    ledger: Ledger, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    admin = await superuser(url)
    try:
        await admin.execute(
            "UPDATE ledger.accounts SET balance = balance + 5 WHERE code = 'wallet:cr_b'"
        )
        await admin.execute(
            "UPDATE ledger.accounts SET balance = balance - 5 WHERE code = 'external:cashier'"
        )
        assert await cli.run(["reconcile", "--format", "json"], url) == 1
        out = capsys.readouterr().out
        assert "account wallet:cr_b: balance" in out
        assert "account external:cashier: balance" in out
    finally:
        await admin.close()


async def test_sealer_canonical_form_is_the_documented_one(ledger: Ledger, url: str) -> None:
    """The sealer hashes rows whose postings PostgreSQL already wrote as JSON; its bytes must
    be exactly `canonical_entry` of the stored row (awkward strings included)."""
    await funded(ledger, "cr_json", 5_000)
    await funded(ledger, "cr_json2", 5_000)
    await ledger.open_wallet("cr_json")
    await ledger.deposit(key('q"\\é\u2028'), "cr_json", 7, "USD", 'ref "quoted" \\ ñ \n\t')
    await seated_match(ledger, "cr-json-m", ["cr_json", "cr_json2"], 33)
    admin = await superuser(url)
    try:
        rows = await admin.fetch(chain._ENTRIES_SQL, 0, 1 << 62, 10_000)
        assert rows
        for row in rows:
            entry = dict(
                await admin.fetchrow("SELECT * FROM ledger.entries WHERE id = $1", row["id"])
            )
            postings = [
                tuple(p)
                for p in await admin.fetch(
                    "SELECT leg, account_id, amount, currency, balance_after, version_after "
                    "FROM ledger.postings WHERE entry_id = $1",
                    row["id"],
                )
            ]
            assert chain.row_canonical(row) == chain.canonical_entry(entry, postings)
        # the hashes the sealer wrote, built by PostgreSQL, are those of the same bytes
        await chain.seal(admin)
        sealed: list[tuple[int, bytes]] = []
        for ids, hashes in await admin.fetch(
            "SELECT entry_ids, entry_hashes FROM ledger.chain_seals ORDER BY id"
        ):
            sealed += [(i, bytes(hashes[n * 32 : n * 32 + 32])) for n, i in enumerate(ids)]
        assert sealed == [(row["id"], chain.row_hash(row)) for row in rows]
    finally:
        await admin.close()


async def test_postgres_escapes_every_character_as_msgspec_does(url: str) -> None:
    """The sealer's SQL writes strings with `to_json`; the canonical form is msgspec's. Every
    code point PostgreSQL text can hold (all but NUL and the surrogates) must come out the same."""
    admin = await superuser(url)
    try:
        rows = await admin.fetch(
            "SELECT i, to_json(chr(i))::text AS j FROM generate_series(1, 1114111) AS i "
            "WHERE i NOT BETWEEN 55296 AND 57343"
        )
    finally:
        await admin.close()
    assert len(rows) == 1114111 - 2048
    encode = msgspec.json.encode
    different = [i for i, text in rows if text.encode() != encode(chr(i))]
    assert different == []


async def test_the_horizon_waits_for_posters_and_never_holds_them(ledger: Ledger, url: str) -> None:
    """`ledger.chain_horizon`: NULL while a poster holds the chain lock (or, asked to wait,
    the sequence's value once it commits); it keeps no lock after its call; the sealer refuses
    to run inside a transaction block, where the lock would outlive the call."""
    await funded(ledger, "hz_a", 100)
    poster = await superuser(url)
    sealer = await superuser(url)
    try:
        last = await sealer.fetchval("SELECT last_value FROM ledger.entries_id_seq")
        assert await sealer.fetchval("SELECT ledger.chain_horizon(false)") == last
        # it let go: a poster takes the lock shared at once, and then the horizon must wait
        tx = poster.transaction()
        await tx.start()
        await poster.execute("SELECT pg_advisory_xact_lock_shared($1)", CHAIN_LOCK_KEY)
        assert await sealer.fetchval("SELECT ledger.chain_horizon(false)") is None
        sealer_pid = await sealer.fetchval("SELECT pg_backend_pid()")
        waiting = asyncio.ensure_future(sealer.fetchval("SELECT ledger.chain_horizon(true)"))
        for _ in range(400):
            blocked = await poster.fetchval(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                "AND pid = $1",
                sealer_pid,
            )
            if blocked:
                break
            await asyncio.sleep(0.01)  # polling another session's state: nothing to await
        assert blocked == 1 and not waiting.done()
        await tx.commit()
        assert await waiting == last
        async with sealer.transaction():
            with pytest.raises(RuntimeError, match="outside a transaction"):
                await chain.seal(sealer)
    finally:
        await poster.close()
        await sealer.close()
