"""Settlement files (ledger/settlement.py): exact parsing to cents, a malformed file refused
whole with its lines named and nothing written, the same file twice a no-op, and the match
against the cashier's entries (matched, amount differences, unmatched on either side). And the
reconcile checks' `refs`, naming the rows behind a planted discrepancy."""

from __future__ import annotations

import datetime as dt

import pytest
from ledger_helpers import key, seated_match, superuser

from ledger import reports, settlement
from ledger.ops import Ledger, Winner


@pytest.mark.parametrize(
    ("text", "cents"),
    [
        ("10.00", 1000),
        ("10", 1000),
        ("10.5", 1050),
        ("0.01", 1),
        ("-25.10", -2510),
        ("99999999999.99", 9_999_999_999_999),
        ("1e3", None),
        ("10.001", None),
        ("1,000.00", None),
        ("+10.00", None),
        ("010.00", None),
        (".50", None),
        ("", None),
        ("NaN", None),
        ("0.1" + "0" * 40, None),
    ],
)
def test_amounts_are_parsed_exactly_to_cents(text: str, cents: int | None) -> None:
    assert settlement.parse_amount(text) == cents


def _refusal(content: bytes) -> list[tuple[int, str]]:
    with pytest.raises(settlement.Refused) as refused:
        settlement.parse(content)
    return [(e.line, e.error) for e in refused.value.errors]


def test_a_malformed_file_is_refused_naming_every_wrong_line() -> None:
    content = (
        b"reference,amount,currency,date\n"
        b"ok-1,10.00,USD,2026-12-01\n"
        b"bad-amount,10.0.0,USD,2026-12-01\n"
        b"bad-currency,1.00,usd,2026-12-01\n"
        b"bad-date,1.00,USD,01/12/2026\n"
        b"ok-1,2.00,USD,2026-12-01\n"
        b"short,1.00,USD\n"
        b",1.00,USD,2026-12-01\n"
        b"zero,0.00,USD,2026-12-01\n"
        b"no-day,1.00,USD,2026-02-30\n"
    )
    errors = _refusal(content)
    assert [line for line, _ in errors] == [3, 4, 5, 6, 7, 8, 9, 10]
    assert "amount" in errors[0][1] and "currency" in errors[1][1] and "date" in errors[2][1]
    assert errors[3][1] == "reference repeated (first on line 2)"
    assert _refusal(b"ref,amt\nx,1\n")[0] == (
        1,
        "the header must be reference,amount,currency,date",
    )
    assert _refusal(b"reference,amount,currency,date\n") == [(2, "the file has no lines")]
    assert _refusal(b"reference,amount,currency,date\nr\xff,1.00,USD,2026-12-01\n")[0][0] == 2
    assert _refusal(b"x" * (settlement.MAX_FILE_BYTES + 1))[0][0] == 0


def test_a_file_over_the_line_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # 50,000 lines of a real file are about a megabyte: the limit is checked on a small one
    monkeypatch.setattr(settlement, "MAX_LINES", 5)
    lines = b"".join(b"r%d,1.00,USD,2026-12-01\n" % i for i in range(5))
    assert len(settlement.parse(b"reference,amount,currency,date\n" + lines)) == 5
    over = b"reference,amount,currency,date\n" + lines + b"r5,1.00,USD,2026-12-01\n"
    assert _refusal(over) == [(7, "more than 5 lines")]


async def _imports(url: str) -> tuple[int, int]:
    conn = await superuser(url)
    try:
        return (
            int(await conn.fetchval("SELECT count(*) FROM ledger.settlement_imports")),
            int(await conn.fetchval("SELECT count(*) FROM ledger.settlement_lines")),
        )
    finally:
        await conn.close()


async def test_a_file_is_matched_against_the_cashier_entries_once(url: str, ledger: Ledger) -> None:
    await ledger.open_wallet("st_a")
    dep1 = await ledger.deposit(key(), "st_a", 1000, "USD", "PSP-1")
    dep2 = await ledger.deposit(key(), "st_a", 2500, "USD", "PSP-2")
    wd = await ledger.withdraw(key(), "st_a", 700, "USD", "PSP-3")
    ours_only = await ledger.deposit(key(), "st_a", 300, "USD", "PSP-4")
    reversed_dep = await ledger.deposit(key(), "st_a", 400, "USD", "PSP-5")
    await ledger.reverse(key(), reversed_dep.entry_id, "typed twice")
    today = dt.datetime.now(dt.UTC).date().isoformat()
    content = (
        "reference,amount,currency,date\n"
        f"PSP-1,10.00,USD,{today}\n"
        f"PSP-2,25.01,USD,{today}\n"
        f"PSP-3,-7,USD,{today}\n"
        f"PSP-9,1.00,USD,{today}\n"
    ).encode()
    before = await _imports(url)
    conn = await superuser(url)
    try:
        with pytest.raises(settlement.Refused):
            await settlement.import_file(conn, content + b"broken line\n", "bad.csv")
        assert await _imports(url) == before  # refused: nothing written

        first = await settlement.import_file(conn, content, "psp-2026-12-01.csv")
        assert not first["replayed"] and first["lines"] == 4 and first["matched"] == 2
        assert first["amount_differences"] == [
            {
                "line": 3,
                "reference": "PSP-2",
                "entry_id": dep2.entry_id,
                "file_amount": 2501,
                "file_currency": "USD",
                "ledger_amount": 2500,
                "ledger_currency": "USD",
                "difference": 1,
            }
        ]
        assert [(x["line"], x["reference"], x["amount"]) for x in first["unmatched_file"]] == [
            (5, "PSP-9", 100)
        ]
        # ours: the deposit the file does not have; not the reversed one (it nets to nothing)
        assert [x["entry_id"] for x in first["unmatched_ledger"]] == [ours_only.entry_id]
        lines = await conn.fetch(
            "SELECT line, entry_id FROM ledger.settlement_lines WHERE import_id = $1 ORDER BY line",
            first["import_id"],
        )
        assert [(r["line"], r["entry_id"]) for r in lines] == [
            (2, dep1.entry_id),
            (3, dep2.entry_id),
            (4, wd.entry_id),
            (5, None),
        ]
        after_first = await _imports(url)
        assert after_first == (before[0] + 1, before[1] + 4)

        again = await settlement.import_file(conn, content, "renamed.csv")
        assert again == {**first, "replayed": True}
        assert await _imports(url) == after_first
        assert await settlement.get_import(conn, first["import_id"]) == first
        listed = await settlement.list_imports(conn)
        assert listed[0]["import_id"] == first["import_id"]
        assert (listed[0]["matched"], listed[0]["unmatched_ledger"]) == (2, 1)
    finally:
        await conn.close()


async def test_reconcile_refs_name_the_rows_behind_a_planted_discrepancy(
    url: str, ledger: Ledger
) -> None:
    await ledger.open_wallet("rf_a")
    await ledger.open_wallet("rf_b")
    for player in ("rf_a", "rf_b"):
        await ledger.deposit(key(), player, 5000, "USD", "seed")
    await seated_match(ledger, "rf-match-1", ["rf_a", "rf_b"], 1000)
    await ledger.settle_match(key(), "rf-match-1", [Winner("rf_a", 1)], 500)
    conn = await superuser(url)
    try:
        assert (await reports.reconcile(conn))["ok"]
        # a superuser books the pot's commission as 7 cents more than the settlement posted
        await conn.execute(
            "UPDATE ledger.pots SET commission = commission + 7 WHERE match_id = 'rf-match-1'"
        )
        report = await reports.reconcile(conn)
        close_id = await conn.fetchval(
            "SELECT close_entry_id FROM ledger.pots WHERE match_id = 'rf-match-1'"
        )
        checks = {c["check"]: c for c in report["checks"]}
        failed = checks["commission_rate"]
        assert not failed["ok"]
        assert failed["refs"] == [{"match_id": "rf-match-1", "entry_id": close_id}]
        assert len(failed["refs"]) == len(failed["discrepancies"])
        assert checks["commission_accounts"]["refs"] == [{"account_kind": "commission"}]
        assert all(c["refs"] == [] for c in report["checks"] if c["ok"])
        # the drill-down: the pots behind the commission line, the match and its entries
        day = dt.datetime.now(dt.UTC).date()
        pots = await reports.pots(conn, day=day, tier="bronze", variant="dominicana")
        assert "rf-match-1" in [p["match_id"] for p in pots]
        assert await reports.pots(conn, day=day - dt.timedelta(days=1)) == []
        assert await reports.pots(conn, tier="no-such-tier") == []
        match = await reports.match(conn, "rf-match-1")
        assert match is not None
        assert match["pot"]["commission"] == 107 and match["pot"]["status"] == "settled"
        assert [s["player"] for s in match["stakes"]] == ["rf_a", "rf_b"]
        assert [e["kind"] for e in match["entries"]] == ["start", "settle"]
        settle = match["entries"][1]
        assert settle["entry_id"] == close_id
        assert sum(p["amount"] for p in settle["postings"]) == 0
        assert await reports.match(conn, "no-such-match") is None
        await conn.execute(
            "UPDATE ledger.pots SET commission = commission - 7 WHERE match_id = 'rf-match-1'"
        )
        assert (await reports.reconcile(conn))["ok"]
    finally:
        await conn.close()
