"""`mesa finance ...`: finance staff's view of the ledger.

    mesa finance trial-balance [--at ISO] [--format table|json|csv]
    mesa finance pots [--status open|settled|voided] [--format ...]
    mesa finance commission [--by day,tier,variant] [--since D] [--until D] [--format ...]
    mesa finance statement PLAYER [--since ISO] [--until ISO] [--format ...]
    mesa finance balance ACCOUNT --at ISO
    mesa finance export [--since ISO] [--until ISO] [--format csv|json] [--output FILE]
    mesa finance reconcile [--date YYYY-MM-DD] [--format table|json]
    mesa finance seal-chain
    mesa finance verify-chain [--no-seal]
    mesa finance verify-report FILE [--public-key HEX]

`verify-report` checks a closed day's signed report (the JSON download) against the report
key's public half (`--public-key`, as the finance page shows it; by default the one of
MESA_REPORT_KEY_FILE); it needs no database.

The database is MESA_DATABASE_URL, or the embedded one `mesa up` runs (see config).
Exit codes: 0 ok, 1 a check failed (reconcile, verify-chain), 2 bad usage or no database.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import msgspec

from ledger import chain, closing, reports
from ledger.money import format_cents
from ledger.ops import APP_ROLE, plain_dsn


def _time(raw: str) -> dt.datetime:
    try:
        value = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {raw!r}") from None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def _date(raw: str) -> dt.date:
    try:
        return dt.date.fromisoformat(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date (YYYY-MM-DD): {raw!r}") from None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mesa finance", description="ledger reports and checks")
    sub = p.add_subparsers(dest="command", required=True)
    fmt = {"choices": ["table", "json", "csv"], "default": "table"}
    tb = sub.add_parser("trial-balance", help="every account; totals must be zero")
    tb.add_argument("--at", type=_time)
    tb.add_argument("--all", action="store_true", help="include zero-balance accounts")
    tb.add_argument("--format", **fmt)  # type: ignore[arg-type]
    po = sub.add_parser("pots", help="open and settled pots")
    po.add_argument("--status", choices=["open", "settled", "voided"])
    po.add_argument("--format", **fmt)  # type: ignore[arg-type]
    co = sub.add_parser("commission", help="commission by day, tier and variant")
    co.add_argument("--by", default="day,tier,variant")
    co.add_argument("--since", type=_date)
    co.add_argument("--until", type=_date)
    co.add_argument("--format", **fmt)  # type: ignore[arg-type]
    st = sub.add_parser("statement", help="a player's wallet with running balances")
    st.add_argument("player")
    st.add_argument("--since", type=_time)
    st.add_argument("--until", type=_time)
    st.add_argument("--format", **fmt)  # type: ignore[arg-type]
    ba = sub.add_parser("balance", help="one account's balance at a point in time")
    ba.add_argument("account")
    ba.add_argument("--at", type=_time, required=True)
    ex = sub.add_parser("export", help="the journal, one row per posting")
    ex.add_argument("--since", type=_time)
    ex.add_argument("--until", type=_time)
    ex.add_argument("--format", choices=["csv", "json"], default="csv")
    ex.add_argument("--output", type=Path)
    rc = sub.add_parser("reconcile", help="check every invariant; exit 1 naming discrepancies")
    rc.add_argument("--date", type=_date)
    rc.add_argument("--format", choices=["table", "json"], default="table")
    sub.add_parser("seal-chain", help="link new entries into the hash chain")
    vr = sub.add_parser("verify-report", help="check a closed day's signed report; exit 1 if bad")
    vr.add_argument("file", type=Path)
    vr.add_argument("--public-key", help="the report key's public half, 64 hex digits")
    vc = sub.add_parser("verify-chain", help="recompute the hash chain; exit 1 at a mismatch")
    vc.add_argument("--no-seal", action="store_true", help="do not seal new entries first")
    return p


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "(none)"
    cleaned = reports.clean(rows)
    cols = list(cleaned[0])
    text = [[("" if r[c] is None else str(r[c])) for c in cols] for r in cleaned]
    widths = [max(len(c), *(len(t[i]) for t in text)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(v.ljust(w) for v, w in zip(t, widths, strict=True)) for t in text)
    return "\n".join(lines)


def _emit(rows: list[dict[str, Any]], fmt: str, document: Any = None) -> None:
    if fmt == "json":
        print(reports.to_json(document if document is not None else rows))
    elif fmt == "csv":
        sys.stdout.write(reports.to_csv(rows))
    else:
        print(_table(rows))


async def _trial_balance(conn: asyncpg.Connection, args: argparse.Namespace) -> int:
    report = await reports.trial_balance(conn, args.at, include_zero=args.all)
    _emit(report["accounts"], args.format, report)
    if args.format == "table":
        for total in report["totals"]:
            print(f"total {total['currency']}: {format_cents(total['total'])}")
        for cur, amount in report["house_commission"].items():
            print(f"house commission {cur}: {format_cents(amount)}")
        print("balanced" if report["balanced"] else "NOT BALANCED")
    return 0 if report["balanced"] else 1


async def _pots(conn: asyncpg.Connection, args: argparse.Namespace) -> int:
    _emit(await reports.pots(conn, args.status), args.format)
    return 0


async def _commission(conn: asyncpg.Connection, args: argparse.Namespace) -> int:
    dims = tuple(d for d in args.by.split(",") if d)
    try:
        rows = await reports.commission(conn, dims, args.since, args.until)
    except ValueError as exc:
        print(f"mesa finance: {exc}", file=sys.stderr)
        return 2
    _emit(rows, args.format)
    return 0


async def _statement(conn: asyncpg.Connection, args: argparse.Namespace) -> int:
    report = await reports.statement(conn, args.player, args.since, args.until)
    if report is None:
        print(f"mesa finance: no wallet for player {args.player}", file=sys.stderr)
        return 2
    if args.format == "table":
        print(f"{report['account']} ({report['currency']})")
        print(f"opening balance: {format_cents(report['opening_balance'])}")
    _emit(report["lines"], args.format, report)
    if args.format == "table":
        print(f"closing balance: {format_cents(report['closing_balance'])}")
    return 0


async def _balance(conn: asyncpg.Connection, args: argparse.Namespace) -> int:
    value = await reports.balance_at(conn, args.account, args.at)
    if value is None:
        print(f"mesa finance: no account {args.account}", file=sys.stderr)
        return 2
    print(f"{args.account} at {args.at.isoformat()}: {value} cents ({format_cents(value)})")
    return 0


async def _export(conn: asyncpg.Connection, args: argparse.Namespace) -> int:
    rows = await reports.journal(conn, args.since, args.until)
    text = reports.to_csv(rows) if args.format == "csv" else reports.to_json(rows) + "\n"
    if args.output:
        args.output.write_text(text)
        print(f"wrote {len(rows)} postings to {args.output}")
    else:
        sys.stdout.write(text)
    return 0


async def _reconcile(conn: asyncpg.Connection, args: argparse.Namespace) -> int:
    report = await reports.reconcile(conn, args.date)
    if args.format == "json":
        print(reports.to_json(report))
    else:
        scope = f"for {report['date']}" if report["date"] else "of the whole ledger"
        print(f"reconciliation {scope}")
        for check in report["checks"]:
            print(f"  {'ok  ' if check['ok'] else 'FAIL'} {check['check']}")
        if report["movements"]:
            print(_table(report["movements"]))
        for item in report["discrepancies"]:
            print(f"DISCREPANCY {item}")
        print(
            "all checks hold" if report["ok"] else f"{len(report['discrepancies'])} discrepancies"
        )
    return 0 if report["ok"] else 1


async def _seal(conn: asyncpg.Connection, args: argparse.Namespace) -> int:
    print(f"sealed {await chain.seal(conn)} entries")
    return 0


async def _verify(conn: asyncpg.Connection, args: argparse.Namespace) -> int:
    if not args.no_seal:
        await chain.seal(conn)
    report = await chain.verify(conn)
    if report.ok:
        print(
            f"hash chain ok: {report.verified} entries verified up to entry "
            f"{report.last_sealed_entry}; {report.unsealed} not sealed yet"
        )
        return 0
    print(f"hash chain BROKEN at entry {report.first_bad_entry}: {report.problem}")
    return 1


COMMANDS: dict[str, Callable[[asyncpg.Connection, argparse.Namespace], Awaitable[int]]] = {
    "trial-balance": _trial_balance,
    "pots": _pots,
    "commission": _commission,
    "statement": _statement,
    "balance": _balance,
    "export": _export,
    "reconcile": _reconcile,
    "seal-chain": _seal,
    "verify-chain": _verify,
}


MAX_REPORT_BYTES = 50_000_000


def _report_public_key(given: str | None) -> bytes:
    if given:
        raw = bytes.fromhex(given.strip())
        if len(raw) != 32:
            raise ValueError("a public key is 64 hex digits")
        return raw
    from services.common.config import load_settings
    from services.common.secret_file import read_secret

    path = load_settings().report_key_file
    if path is None or not path.exists():
        raise ValueError("no --public-key given and no MESA_REPORT_KEY_FILE to derive it from")
    key = closing.load_signing_key(read_secret(path))
    return bytes.fromhex(closing.public_key_hex(key.public_key()))


def verify_report(args: argparse.Namespace) -> int:
    try:
        public = _report_public_key(args.public_key)
    except (ValueError, OSError) as exc:
        print(f"mesa finance: {exc}", file=sys.stderr)
        return 2
    try:
        if args.file.stat().st_size > MAX_REPORT_BYTES:
            raise ValueError(f"larger than {MAX_REPORT_BYTES} bytes")
        signed = msgspec.json.decode(args.file.read_bytes())
    except (OSError, ValueError) as exc:
        print(f"mesa finance: cannot read {args.file}: {exc}", file=sys.stderr)
        return 2
    if not closing.verify(signed, public):
        print(f"report signature BAD: {args.file} was not signed by key {public.hex()}")
        return 1
    document = signed["document"]
    print(
        f"report signature ok: day {document.get('day')} closed by {document.get('approved_by')} "
        f"(proposed by {document.get('proposed_by')}), key {public.hex()}"
    )
    return 0


def database_url() -> str:
    from services.common.config import load_settings

    return load_settings().database_url


async def connect(url: str) -> asyncpg.Connection:
    return await asyncpg.connect(
        plain_dsn(url), server_settings={"role": APP_ROLE, "application_name": "mesa-finance"}
    )


async def run(argv: list[str], url: str | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "verify-report":
        return verify_report(args)
    try:
        conn = await connect(url or database_url())
    except (OSError, asyncpg.PostgresError) as exc:
        print(
            f"mesa finance: cannot reach the database ({exc}); is `mesa up` running?",
            file=sys.stderr,
        )
        return 2
    try:
        return await COMMANDS[args.command](conn, args)
    finally:
        await conn.close()


def main(argv: list[str]) -> int:
    try:
        return asyncio.run(run(argv))
    except SystemExit as exc:  # argparse usage errors
        return int(exc.code or 0) if isinstance(exc.code, int) else 2
