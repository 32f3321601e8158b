"""Reads for the integrity scan: settled pots with each seat's stake and payout, and the
cashier's deposits and withdrawals, oldest first, a bounded page at a time."""

from __future__ import annotations

import datetime as dt
from typing import Any

import asyncpg

MAX_PAGE = 1000


async def settled_pots(
    conn: asyncpg.Connection, since: dt.datetime, after: int, limit: int
) -> list[dict[str, Any]]:
    """Pots settled at or after `since` whose settlement entry is after `after`, in settlement
    order, each with its seats: player, stake and what the settlement paid his wallet."""
    rows = await conn.fetch(
        """
        WITH page AS (
            SELECT p.match_id, p.tier, p.variant, p.currency, p.closed_at, p.close_entry_id
            FROM ledger.pots p
            WHERE p.status = 'settled' AND p.close_entry_id > $2 AND p.closed_at >= $1
            ORDER BY p.close_entry_id
            LIMIT $3
        )
        SELECT page.*, s.seat, s.player, s.amount AS stake,
               coalesce((SELECT sum(po.amount) FROM ledger.postings po
                         WHERE po.entry_id = page.close_entry_id
                           AND po.account_id = s.wallet_id AND po.amount > 0), 0) AS payout
        FROM page JOIN ledger.stakes s ON s.match_id = page.match_id
        ORDER BY page.close_entry_id, s.seat
        """,
        since,
        after,
        min(max(limit, 1), MAX_PAGE),
    )
    pots: dict[str, dict[str, Any]] = {}
    for r in rows:
        pot = pots.get(r["match_id"])
        if pot is None:
            pot = pots[r["match_id"]] = {
                "match_id": r["match_id"],
                "tier": r["tier"],
                "variant": r["variant"],
                "currency": r["currency"].strip(),
                "closed_at": r["closed_at"].astimezone(dt.UTC).isoformat(),
                "close_entry_id": r["close_entry_id"],
                "seats": [],
            }
        pot["seats"].append(
            {
                "seat": r["seat"],
                "player": r["player"],
                "stake": r["stake"],
                "payout": int(r["payout"]),
            }
        )
    return list(pots.values())


async def cashier_moves(
    conn: asyncpg.Connection, since: dt.datetime, after: int, limit: int
) -> list[dict[str, Any]]:
    """Deposits and withdrawals made at or after `since` with entry id above `after` (a
    reversed one left out: it did not happen), in entry order."""
    rows = await conn.fetch(
        """
        SELECT e.id AS entry_id, e.kind, a.player, abs(po.amount) AS amount, po.currency,
               e.created_at
        FROM ledger.entries e
        JOIN ledger.postings po ON po.entry_id = e.id
        JOIN ledger.accounts a ON a.id = po.account_id AND a.kind = 'wallet'
        WHERE e.kind IN ('deposit', 'withdrawal') AND e.id > $2 AND e.created_at >= $1
          AND NOT EXISTS (SELECT 1 FROM ledger.reversals r WHERE r.reversed_entry_id = e.id)
        ORDER BY e.id
        LIMIT $3
        """,
        since,
        after,
        min(max(limit, 1), MAX_PAGE),
    )
    return [
        {
            "entry_id": r["entry_id"],
            "kind": r["kind"],
            "player": r["player"],
            "amount": int(r["amount"]),
            "currency": r["currency"].strip(),
            "created_at": r["created_at"].astimezone(dt.UTC).isoformat(),
        }
        for r in rows
    ]
