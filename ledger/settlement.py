"""A payment processor's settlement file, checked and matched against the cashier's entries.

The file is CSV with the header ``reference,amount,currency,date``: the processor's reference
(the one the cashier typed when recording the movement), the amount as decimal text in the
currency's units (``10.00``; a payout to the player is negative), an ISO 4217 code and the
ISO day (``YYYY-MM-DD``). Amounts become integer cents by exact text parsing, never a float.

A file is refused whole when any line is wrong (every wrong line is named, up to
`MAX_ERRORS`), and nothing is written. An accepted file is written once, with its match, in
one transaction; the same bytes again (same SHA-256) answer the first import's result.

The match pairs each line with the cashier entry (a deposit or withdrawal not reversed) that
carries the same reference: equal amount and currency is matched, anything else is an amount
difference. Lines with no entry are unmatched on the processor's side; cashier entries from
the file's first to its last day with no line are unmatched on ours.
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
import re
from dataclasses import dataclass
from typing import Any

import asyncpg
import msgspec

from ledger.reports import day_bounds

MAX_FILE_BYTES = 1024 * 1024
MAX_LINES = 50_000
MAX_ERRORS = 200
MAX_FILENAME = 200
MAX_REFERENCE = 120
# A file covering more cashier entries than this (its days' entries, plus those its
# references name) is refused rather than matched in one go.
MAX_LEDGER_ENTRIES = 200_000
HEADER = ("reference", "amount", "currency", "date")

# Up to 11 integer digits (under a billion in units) and at most two decimals, no exponent.
AMOUNT_RE = re.compile(r"^(-?)(0|[1-9][0-9]{0,10})(?:\.([0-9]{1,2}))?$")
CURRENCY_RE = re.compile(r"^[A-Z]{3}$")
DATE_RE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")
REFERENCE_RE = re.compile(r"^[\x20-\x7e]+$")


@dataclass(frozen=True, slots=True)
class Line:
    line: int
    reference: str
    amount: int
    currency: str
    day: dt.date


class LineError(msgspec.Struct, frozen=True):
    line: int
    error: str


class Refused(Exception):
    """The file is not a settlement file; nothing was written."""

    def __init__(self, errors: list[LineError]) -> None:
        super().__init__(f"{len(errors)} errors, first on line {errors[0].line}")
        self.errors = errors


def parse_amount(text: str) -> int | None:
    """``"10.5"`` -> 1050 cents, exactly; None when the text is not such an amount."""
    found = AMOUNT_RE.match(text)
    if found is None:
        return None
    sign, units, decimals = found.groups()
    cents = int(units) * 100 + int((decimals or "").ljust(2, "0"))
    return -cents if sign else cents


def _check_line(number: int, cells: list[str]) -> tuple[Line | None, str | None]:
    if len(cells) != len(HEADER):
        return None, f"expected 4 fields (reference,amount,currency,date), found {len(cells)}"
    reference, amount_text, currency, day_text = (c.strip() for c in cells)
    if not reference:
        return None, "reference is empty"
    if len(reference) > MAX_REFERENCE or REFERENCE_RE.match(reference) is None:
        return None, f"reference: 1 to {MAX_REFERENCE} printable ASCII characters"
    amount = parse_amount(amount_text)
    if amount is None:
        return None, f"amount {amount_text[:40]!r} is not a decimal like 10.00"
    if amount == 0:
        return None, "amount is zero"
    if CURRENCY_RE.match(currency) is None:
        return None, f"currency {currency[:10]!r} is not an ISO 4217 code like USD"
    try:
        if DATE_RE.match(day_text) is None:
            raise ValueError
        day = dt.date.fromisoformat(day_text)
    except ValueError:
        return None, f"date {day_text[:20]!r} is not a day like 2026-12-01"
    return Line(number, reference, amount, currency, day), None


def parse(content: bytes) -> list[Line]:
    """Every line of the file, or `Refused` naming each wrong line (the header is line 1)."""
    if len(content) > MAX_FILE_BYTES:
        raise Refused([LineError(0, f"the file is over {MAX_FILE_BYTES} bytes")])
    try:
        text = content.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        where = content[: exc.start].count(b"\n") + 1
        raise Refused([LineError(where, "not UTF-8 text")]) from None
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    errors: list[LineError] = []
    lines: list[Line] = []
    first_seen: dict[str, int] = {}
    seen = 0
    try:
        header = next(reader, None)
        if header is None or tuple(c.strip().lower() for c in header) != HEADER:
            errors.append(LineError(1, "the header must be reference,amount,currency,date"))
        for cells in reader:
            number = reader.line_num
            if not cells or all(not c.strip() for c in cells):
                continue
            seen += 1
            if seen > MAX_LINES:
                errors.append(LineError(number, f"more than {MAX_LINES} lines"))
                break
            line, error = _check_line(number, cells)
            if line is not None and line.reference in first_seen:
                error = f"reference repeated (first on line {first_seen[line.reference]})"
            if error is not None:
                errors.append(LineError(number, error))
                if len(errors) >= MAX_ERRORS:
                    break
            elif line is not None:
                first_seen[line.reference] = number
                lines.append(line)
    except csv.Error as exc:
        errors.append(LineError(reader.line_num, f"not CSV: {exc}"))
    if not errors and not lines:
        errors.append(LineError(2, "the file has no lines"))
    if errors:
        raise Refused(errors)
    return lines


def digest(content: bytes) -> bytes:
    return hashlib.sha256(content).digest()


_CASHIER_ENTRIES = """
    SELECT e.id AS entry_id, e.kind, e.reference, e.created_at, -c.amount AS amount, c.currency
    FROM ledger.entries e
    JOIN ledger.postings c ON c.entry_id = e.id
    JOIN ledger.accounts a ON a.id = c.account_id AND a.kind = 'cashier'
    WHERE e.kind IN ('deposit', 'withdrawal')
      AND NOT EXISTS (SELECT 1 FROM ledger.reversals r WHERE r.reversed_entry_id = e.id)
      AND (e.reference = ANY($1::text[]) OR (e.created_at >= $2 AND e.created_at < $3))
    ORDER BY e.id
    LIMIT $4
"""


def _stamp(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


async def _match(
    conn: asyncpg.Connection, lines: list[Line]
) -> tuple[dict[str, Any], dict[int, int]]:
    """The match's report, and each matched line's entry id."""
    first, last = min(x.day for x in lines), max(x.day for x in lines)
    since, until = day_bounds(first)[0], day_bounds(last)[1]
    rows = await conn.fetch(
        _CASHIER_ENTRIES, [x.reference for x in lines], since, until, MAX_LEDGER_ENTRIES + 1
    )
    if len(rows) > MAX_LEDGER_ENTRIES:
        raise Refused([LineError(0, f"the file covers over {MAX_LEDGER_ENTRIES} cashier entries")])
    ours: dict[str, list[asyncpg.Record]] = {}
    for row in rows:
        ours.setdefault(row["reference"], []).append(row)
    used: set[int] = set()
    linked: dict[int, int] = {}
    matched = 0
    differences: list[dict[str, Any]] = []
    unmatched_file: list[dict[str, Any]] = []
    for line in lines:
        candidates = [r for r in ours.get(line.reference, []) if r["entry_id"] not in used]
        if not candidates:
            unmatched_file.append(
                {
                    "line": line.line,
                    "reference": line.reference,
                    "amount": line.amount,
                    "currency": line.currency,
                    "date": line.day.isoformat(),
                }
            )
            continue
        same = [
            r for r in candidates if (r["amount"], r["currency"]) == (line.amount, line.currency)
        ]
        row = (same or candidates)[0]
        used.add(row["entry_id"])
        linked[line.line] = row["entry_id"]
        if same:
            matched += 1
            continue
        differences.append(
            {
                "line": line.line,
                "reference": line.reference,
                "entry_id": row["entry_id"],
                "file_amount": line.amount,
                "file_currency": line.currency,
                "ledger_amount": row["amount"],
                "ledger_currency": row["currency"],
                "difference": line.amount - row["amount"]
                if line.currency == row["currency"]
                else None,
            }
        )
    unmatched_ledger = [
        {
            "entry_id": r["entry_id"],
            "kind": r["kind"],
            "reference": r["reference"],
            "amount": r["amount"],
            "currency": r["currency"],
            "created_at": _stamp(r["created_at"]),
        }
        for r in rows
        if r["entry_id"] not in used and since <= r["created_at"] < until
    ]
    report = {
        "lines": len(lines),
        "first_day": first.isoformat(),
        "last_day": last.isoformat(),
        "matched": matched,
        "amount_differences": differences,
        "unmatched_file": unmatched_file,
        "unmatched_ledger": unmatched_ledger,
    }
    return report, linked


_EXISTING = """
    SELECT id, filename, imported_at, result FROM ledger.settlement_imports WHERE sha256 = $1
"""


def _answer(row: asyncpg.Record, replayed: bool) -> dict[str, Any]:
    result = row["result"]
    if isinstance(result, str):
        result = msgspec.json.decode(result)
    return {
        "import_id": row["id"],
        "filename": row["filename"],
        "imported_at": _stamp(row["imported_at"]),
        "replayed": replayed,
        **result,
    }


async def import_file(conn: asyncpg.Connection, content: bytes, filename: str) -> dict[str, Any]:
    """Check, match and record a settlement file; its result (the first import's, for the
    same bytes again). `Refused` (nothing written) for a malformed file."""
    sha = digest(content)
    found = await conn.fetchrow(_EXISTING, sha)
    if found is not None:
        return _answer(found, True)
    lines = parse(content)
    async with conn.transaction():
        report, linked = await _match(conn, lines)
        row = await conn.fetchrow(
            """
            INSERT INTO ledger.settlement_imports
                (sha256, filename, line_count, first_day, last_day, result)
            VALUES ($1, $2, $3, $4, $5, $6::jsonb)
            ON CONFLICT (sha256) DO NOTHING
            RETURNING id, filename, imported_at, result
            """,
            sha,
            filename[:MAX_FILENAME] or "settlement.csv",
            len(lines),
            dt.date.fromisoformat(report["first_day"]),
            dt.date.fromisoformat(report["last_day"]),
            msgspec.json.encode(report).decode(),
        )
        if row is None:  # the same file imported at the same moment: that one stands
            found = await conn.fetchrow(_EXISTING, sha)
            if found is None:
                raise RuntimeError("a settlement import vanished while being read")
            return _answer(found, True)
        await conn.copy_records_to_table(
            "settlement_lines",
            schema_name="ledger",
            columns=["import_id", "line", "reference", "amount", "currency", "day", "entry_id"],
            records=[
                (row["id"], x.line, x.reference, x.amount, x.currency, x.day, linked.get(x.line))
                for x in lines
            ],
        )
    return _answer(row, False)


async def get_import(conn: asyncpg.Connection, import_id: int) -> dict[str, Any] | None:
    row = await conn.fetchrow(
        "SELECT id, filename, imported_at, result FROM ledger.settlement_imports WHERE id = $1",
        import_id,
    )
    return None if row is None else _answer(row, False)


async def list_imports(conn: asyncpg.Connection, limit: int = 50) -> list[dict[str, Any]]:
    """The latest imports, newest first, with their counts (not their lists)."""
    rows = await conn.fetch(
        """
        SELECT id AS import_id, filename, imported_at, line_count AS lines, first_day, last_day,
               (result->>'matched')::int AS matched,
               jsonb_array_length(result->'amount_differences') AS amount_differences,
               jsonb_array_length(result->'unmatched_file') AS unmatched_file,
               jsonb_array_length(result->'unmatched_ledger') AS unmatched_ledger
        FROM ledger.settlement_imports ORDER BY id DESC LIMIT $1
        """,
        limit,
    )
    out = []
    for r in rows:
        item = dict(r)
        item["imported_at"] = _stamp(item["imported_at"])
        item["first_day"] = item["first_day"].isoformat()
        item["last_day"] = item["last_day"].isoformat()
        out.append(item)
    return out
