"""`mesa cashier open PLAYER [--currency USD]`

``open`` opens a player's wallet (the gateway does it when a player registers); it is
idempotent. The ledger takes no deposit for a wallet that was never opened (``unknown_account``).

There is no deposit or withdrawal here: money enters and leaves a wallet only through the
gateway's cashier (``POST /api/finance/deposits|withdrawals``, the finance screen), which
checks identity and region, cool-off, deposit limits and compliance holds, and writes the staff
audit line under the finance user's own session (api/cashier.py).

There is no reversal here either: a cashier mistake is corrected by a refund proposal that
another finance user approves (``POST /api/finance/refunds``, api/refunds.py), with a line in
the staff audit log for each step (docs/howto/reverse-an-entry.md).
Exit codes: 0 opened (or already open), 1 refused by the ledger, 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from ledger.errors import LedgerError
from ledger.ops import Ledger


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mesa cashier",
        description="open wallets; deposits, withdrawals and their corrections are the "
        "finance screen's (POST /api/finance/deposits|withdrawals|refunds)",
    )
    sub = p.add_subparsers(dest="action", required=True)
    opening = sub.add_parser("open", help="open a player's wallet (idempotent)")
    opening.add_argument("player")
    opening.add_argument("--currency", default="USD")
    return p


async def run(argv: list[str], url: str | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else 2
    return await _open(args, url)


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
