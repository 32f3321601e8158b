"""`mesa cashier open PLAYER [--currency USD]`
`mesa cashier reverse ENTRY_ID --reference REF [--key KEY]`

``open`` opens a player's wallet (the gateway does it when a player registers); it is
idempotent. The ledger takes no deposit for a wallet that was never opened (``unknown_account``).

There is no deposit or withdrawal here: money enters and leaves a wallet only through the
gateway's cashier (``POST /api/finance/deposits|withdrawals``, the finance screen), which
checks identity and region, cool-off, deposit limits and compliance holds, and writes the staff
audit line under the finance user's own session (api/cashier.py).

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
from ledger.money import format_cents
from ledger.ops import Ledger


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mesa cashier",
        description="open wallets and reverse cashier entries; deposits and withdrawals are "
        "the finance screen's (POST /api/finance/deposits|withdrawals)",
    )
    sub = p.add_subparsers(dest="action", required=True)
    opening = sub.add_parser("open", help="open a player's wallet (idempotent)")
    opening.add_argument("player")
    opening.add_argument("--currency", default="USD")
    reverse = sub.add_parser("reverse", help="reverse a cashier deposit or withdrawal entry")
    reverse.add_argument("entry_id", type=int, help="the journal entry to reverse")
    reverse.add_argument("--reference", required=True, help="your reference for the correction")
    reverse.add_argument("--key", help="idempotency key (default: derived from the command)")
    return p


async def run(argv: list[str], url: str | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else 2
    if args.action == "open":
        return await _open(args, url)
    if args.entry_id <= 0:
        print("mesa cashier: invalid_entry: ENTRY_ID is a positive entry id", file=sys.stderr)
        return 2
    if url is None:
        from ledger.cli import database_url

        url = database_url()
    key = args.key or f"cashier:reverse:{args.entry_id}:{args.reference}"
    try:
        ledger = await Ledger.connect(url, min_size=1, max_size=1, application_name="mesa-cashier")
    except OSError as exc:
        print(f"mesa cashier: cannot reach the database ({exc})", file=sys.stderr)
        return 2
    try:
        result = await ledger.reverse(key, args.entry_id, args.reference)
    except LedgerError as exc:
        print(f"mesa cashier: refused: {exc.code}: {exc.detail}", file=sys.stderr)
        return 1
    finally:
        await ledger.close()
    player = result.player or ""
    wallet = next(p for p in result.postings if p.account == f"wallet:{player}")
    note = " (already posted; nothing changed)" if result.replayed else ""
    print(
        f"reversal of entry {result.reverses_entry_id} ({result.reverses_kind}, "
        f"{format_cents(abs(wallet.amount))}) for {player}: entry {result.entry_id}, "
        f"wallet balance after {format_cents(wallet.balance_after)}{note}"
    )
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
