"""`mesa cashier open PLAYER [--currency USD]`
`mesa cashier deposit|withdraw PLAYER AMOUNT --reference REF [--key KEY]`
`mesa cashier reverse ENTRY_ID --reference REF [--key KEY]`

``open`` opens a player's wallet (the gateway does it when a player registers); it is
idempotent. The ledger takes no deposit for a wallet that was never opened (``unknown_account``).

AMOUNT is dollars (``25``, ``25.00``, ``$25.00``) or cents with a ``c`` suffix (``2500c``);
it is parsed as text into integer cents, never through a float. The idempotency key
defaults to ``cashier:<deposit|withdraw>:<REF>``, so running the same command twice
(e.g. after a timeout) posts once; a different amount under the same reference is refused.

``reverse`` corrects a cashier mistake: it posts one reversing entry for the deposit or
withdrawal ENTRY_ID (its postings negated; the entry itself is never changed). An entry is
reversed at most once; the key defaults to ``cashier:reverse:<ENTRY_ID>:<REF>``.
Exit codes: 0 posted (or already posted), 1 refused by the ledger, 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from ledger.errors import LedgerError
from ledger.models import EntryResult
from ledger.money import MoneyError, format_cents, parse_amount
from ledger.ops import Ledger


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--reference", required=True, help="the payment's external reference")
    common.add_argument("--key", help="idempotency key (default: derived from the command)")
    p = argparse.ArgumentParser(prog="mesa cashier", description="cashier movements")
    sub = p.add_subparsers(dest="action", required=True)
    opening = sub.add_parser("open", help="open a player's wallet (idempotent)")
    opening.add_argument("player")
    opening.add_argument("--currency", default="USD")
    for action in ("deposit", "withdraw"):
        move = sub.add_parser(action, parents=[common], help=f"{action} for a player")
        move.add_argument("player")
        move.add_argument("amount", help="dollars (25 or 25.00) or cents (2500c)")
        move.add_argument("--currency", default="USD")
    reverse = sub.add_parser(
        "reverse", parents=[common], help="reverse a cashier deposit or withdrawal entry"
    )
    reverse.add_argument("entry_id", type=int, help="the journal entry to reverse")
    return p


def _report(result: EntryResult, player: str, cents: int, currency: str) -> None:
    wallet = next(p for p in result.postings if p.account == f"wallet:{player}")
    note = " (already posted; nothing changed)" if result.replayed else ""
    print(
        f"{result.kind} {format_cents(cents)} {currency} for {player}: entry "
        f"{result.entry_id}, wallet balance after {format_cents(wallet.balance_after)}{note}"
    )


async def run(argv: list[str], url: str | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else 2
    cents = 0
    if args.action == "open":
        return await _open(args, url)
    if args.action != "reverse":
        try:
            cents = parse_amount(args.amount)
        except MoneyError as exc:
            print(f"mesa cashier: {exc.code}: {exc.detail}", file=sys.stderr)
            return 2
    elif args.entry_id <= 0:
        print("mesa cashier: invalid_entry: ENTRY_ID is a positive entry id", file=sys.stderr)
        return 2
    if url is None:
        from ledger.cli import database_url

        url = database_url()
    if args.action == "reverse":
        key = args.key or f"cashier:reverse:{args.entry_id}:{args.reference}"
    else:
        key = args.key or f"cashier:{args.action}:{args.reference}"
    try:
        ledger = await Ledger.connect(url, min_size=1, max_size=1, application_name="mesa-cashier")
    except OSError as exc:
        print(f"mesa cashier: cannot reach the database ({exc})", file=sys.stderr)
        return 2
    try:
        if args.action == "reverse":
            result = await ledger.reverse(key, args.entry_id, args.reference)
        else:
            op = ledger.deposit if args.action == "deposit" else ledger.withdraw
            result = await op(key, args.player, cents, args.currency, args.reference)
    except LedgerError as exc:
        print(f"mesa cashier: refused: {exc.code}: {exc.detail}", file=sys.stderr)
        return 1
    finally:
        await ledger.close()
    if args.action == "reverse":
        player = result.player or ""
        wallet = next(p for p in result.postings if p.account == f"wallet:{player}")
        note = " (already posted; nothing changed)" if result.replayed else ""
        print(
            f"reversal of entry {result.reverses_entry_id} ({result.reverses_kind}, "
            f"{format_cents(abs(wallet.amount))}) for {player}: entry {result.entry_id}, "
            f"wallet balance after {format_cents(wallet.balance_after)}{note}"
        )
        return 0
    _report(result, args.player, cents, args.currency)
    return 0


async def _open(args: argparse.Namespace, url: str | None) -> int:
    if url is None:
        from ledger.cli import database_url

        url = database_url()
    try:
        ledger = await Ledger.connect(url, min_size=1, max_size=1, application_name="mesa-cashier")
    except OSError as exc:
        print(f"mesa cashier: cannot reach the database ({exc})", file=sys.stderr)
        return 2
    try:
        opened = await ledger.open_wallet(args.player, args.currency)
    except LedgerError as exc:
        print(f"mesa cashier: refused: {exc.code}: {exc.detail}", file=sys.stderr)
        return 1
    finally:
        await ledger.close()
    note = "opened" if opened.opened else "already open; nothing changed"
    print(f"{opened.account} ({opened.currency}): {note}")
    return 0


def main(argv: list[str]) -> int:
    return asyncio.run(run(argv))
