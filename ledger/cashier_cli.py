"""`mesa cashier deposit|withdraw PLAYER AMOUNT --reference REF [--key KEY]`

AMOUNT is dollars (``25``, ``25.00``, ``$25.00``) or cents with a ``c`` suffix (``2500c``);
it is parsed as text into integer cents, never through a float. The idempotency key
defaults to ``cashier:<deposit|withdraw>:<REF>``, so running the same command twice
(e.g. after a timeout) posts once; a different amount under the same reference is refused.
Exit codes: 0 posted (or already posted), 1 refused by the ledger, 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from ledger.errors import LedgerError
from ledger.money import MoneyError, format_cents, parse_amount
from ledger.ops import Ledger


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mesa cashier", description="cashier movements")
    p.add_argument("action", choices=["deposit", "withdraw"])
    p.add_argument("player")
    p.add_argument("amount", help="dollars (25 or 25.00) or cents (2500c)")
    p.add_argument("--reference", required=True, help="the payment's external reference")
    p.add_argument("--key", help="idempotency key (default: cashier:<action>:<reference>)")
    p.add_argument("--currency", default="USD")
    return p


async def run(argv: list[str], url: str | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else 2
    try:
        cents = parse_amount(args.amount)
    except MoneyError as exc:
        print(f"mesa cashier: {exc.code}: {exc.detail}", file=sys.stderr)
        return 2
    if url is None:
        from ledger.cli import database_url

        url = database_url()
    key = args.key or f"cashier:{args.action}:{args.reference}"
    try:
        ledger = await Ledger.connect(url, min_size=1, max_size=1, application_name="mesa-cashier")
    except OSError as exc:
        print(f"mesa cashier: cannot reach the database ({exc})", file=sys.stderr)
        return 2
    try:
        op = ledger.deposit if args.action == "deposit" else ledger.withdraw
        result = await op(key, args.player, cents, args.currency, args.reference)
    except LedgerError as exc:
        print(f"mesa cashier: refused: {exc.code}: {exc.detail}", file=sys.stderr)
        return 1
    finally:
        await ledger.close()
    wallet = next(p for p in result.postings if p.account == f"wallet:{args.player}")
    note = " (already posted; nothing changed)" if result.replayed else ""
    print(
        f"{result.kind} {format_cents(cents)} {args.currency} for {args.player}: entry "
        f"{result.entry_id}, wallet balance after {format_cents(wallet.balance_after)}{note}"
    )
    return 0


def main(argv: list[str]) -> int:
    return asyncio.run(run(argv))
