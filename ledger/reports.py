"""Finance reads: trial balance, pots, commission, statements, point-in-time balances,
journal export and reconciliation. All amounts are integer cents; nothing here writes.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from typing import Any

import asyncpg
import msgspec

Row = dict[str, Any]

COMMISSION_KIND = "commission"


def _jsonable(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return value


def clean(rows: list[Row]) -> list[Row]:
    return [{k: _jsonable(v) for k, v in row.items()} for row in rows]


def to_csv(rows: list[Row], columns: list[str] | None = None) -> str:
    out = io.StringIO()
    cols = columns or (list(rows[0]) if rows else [])
    writer = csv.DictWriter(out, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in clean(rows):
        writer.writerow(row)
    return out.getvalue()


def to_json(data: Any) -> str:
    return msgspec.json.format(msgspec.json.encode(data, enc_hook=_jsonable).decode(), indent=2)


def day_bounds(day: dt.date) -> tuple[dt.datetime, dt.datetime]:
    start = dt.datetime.combine(day, dt.time(0), tzinfo=dt.UTC)
    return start, start + dt.timedelta(days=1)


async def trial_balance(
    conn: asyncpg.Connection, at: dt.datetime | None = None, include_zero: bool = False
) -> Row:
    """Every account's balance (now, or as of ``at``); per currency the total must be zero.

    The commission shards are also added up into one ``house:commission`` line.
    """
    if at is None:
        rows = await conn.fetch(
            "SELECT code, kind, currency, balance FROM ledger.accounts ORDER BY id"
        )
    else:
        rows = await conn.fetch(
            """
            SELECT a.code, a.kind, a.currency, coalesce(sum(p.amount), 0)::bigint AS balance
            FROM ledger.accounts a
            LEFT JOIN ledger.postings p ON p.account_id = a.id
              AND p.entry_id IN (SELECT id FROM ledger.entries WHERE created_at <= $1)
            GROUP BY a.id ORDER BY a.id
            """,
            at,
        )
    accounts = [dict(r) for r in rows]
    totals: dict[str, int] = {}
    by_kind: dict[tuple[str, str], int] = {}
    for acc in accounts:
        totals[acc["currency"]] = totals.get(acc["currency"], 0) + acc["balance"]
        key = (acc["kind"], acc["currency"])
        by_kind[key] = by_kind.get(key, 0) + acc["balance"]
    listed = [a for a in accounts if include_zero or a["balance"] != 0]
    return {
        "at": _jsonable(at) if at else None,
        "balanced": all(v == 0 for v in totals.values()),
        "totals": [{"currency": c, "total": t} for c, t in sorted(totals.items())],
        "by_kind": [
            {"kind": k, "currency": c, "balance": b} for (k, c), b in sorted(by_kind.items())
        ],
        "house_commission": {c: b for (k, c), b in by_kind.items() if k == COMMISSION_KIND},
        "accounts": listed,
    }


async def pots(
    conn: asyncpg.Connection,
    status: str | None = None,
    after: str | None = None,
    limit: int | None = None,
    *,
    day: dt.date | None = None,
    tier: str | None = None,
    variant: str | None = None,
    match_id: str | None = None,
) -> list[Row]:
    """Pots with their state, oldest first; ``ok`` is false for a closed pot not at zero (or an
    open pot short). A page: the pots started after the pot of match ``after`` (its start and
    match id), at most ``limit`` of them. ``day``, ``tier`` and ``variant`` narrow it to the
    pots behind one line of the commission report (``day``: the UTC day the pot closed)."""
    rows = await conn.fetch(
        """
        SELECT p.match_id, p.tier, p.variant, p.currency, p.status, p.stake_total, a.balance,
               p.commission_rate_bp, p.commission, p.start_entry_id, p.close_entry_id,
               p.started_at, p.closed_at,
               CASE WHEN p.status = 'open' THEN a.balance = p.stake_total AND a.closed_at IS NULL
                    ELSE a.balance = 0 AND a.closed_at IS NOT NULL END AS ok
        FROM ledger.pots p JOIN ledger.accounts a ON a.id = p.account_id
        WHERE ($1::text IS NULL OR p.status = $1)
          AND ($2::text IS NULL OR (p.started_at, p.match_id) >
               (SELECT c.started_at, c.match_id FROM ledger.pots c WHERE c.match_id = $2))
          AND ($4::date IS NULL OR (p.closed_at >= $4::date::timestamp AT TIME ZONE 'UTC'
                                    AND p.closed_at < ($4::date + 1)::timestamp AT TIME ZONE 'UTC'))
          AND ($5::text IS NULL OR p.tier = $5)
          AND ($6::text IS NULL OR p.variant = $6)
          AND ($7::text IS NULL OR p.match_id = $7)
        ORDER BY p.started_at, p.match_id
        LIMIT $3
        """,
        status,
        after,
        limit,
        day,
        tier,
        variant,
        match_id,
    )
    return clean([dict(r) for r in rows])


async def entry(conn: asyncpg.Connection, entry_id: int) -> Row | None:
    """One journal entry with its postings (the account codes and running balances)."""
    found = await conn.fetchrow(
        "SELECT id AS entry_id, kind, idempotency_key, match_id, reference, created_at "
        "FROM ledger.entries WHERE id = $1",
        entry_id,
    )
    if found is None:
        return None
    postings = await conn.fetch(
        """
        SELECT p.leg, a.code AS account, a.kind AS account_kind, p.amount, p.currency,
               p.balance_after, p.version_after
        FROM ledger.postings p JOIN ledger.accounts a ON a.id = p.account_id
        WHERE p.entry_id = $1 ORDER BY p.leg
        """,
        entry_id,
    )
    return {**clean([dict(found)])[0], "postings": clean([dict(r) for r in postings])}


# A match has one start and at most one settlement or void, but a forged ledger may hold more.
MAX_MATCH_ENTRIES = 50


async def match(conn: asyncpg.Connection, match_id: str) -> Row | None:
    """A match's money: its pot, the stakes seated and the entries that moved it (start,
    settlement or void) with their postings."""
    pot = await pots(conn, after=None, limit=None, match_id=match_id)
    if not pot:
        return None
    stakes = await conn.fetch(
        """
        SELECT s.seat, s.player, s.amount, w.code AS wallet, h.code AS hold
        FROM ledger.stakes s JOIN ledger.accounts w ON w.id = s.wallet_id
        JOIN ledger.accounts h ON h.id = s.hold_id
        WHERE s.match_id = $1 ORDER BY s.seat
        """,
        match_id,
    )
    ids = await conn.fetch(
        "SELECT id FROM ledger.entries WHERE match_id = $1 ORDER BY id LIMIT $2",
        match_id,
        MAX_MATCH_ENTRIES,
    )
    entries = [await entry(conn, int(r["id"])) for r in ids]
    return {
        "match_id": match_id,
        "pot": pot[0],
        "stakes": clean([dict(r) for r in stakes]),
        "entries": [e for e in entries if e is not None],
    }


async def commission(
    conn: asyncpg.Connection,
    by: tuple[str, ...] = ("day", "tier", "variant"),
    since: dt.date | None = None,
    until: dt.date | None = None,
) -> list[Row]:
    """Commission of settled pots grouped by any of day (UTC, of settlement), tier, variant."""
    for dim in by:
        if dim not in ("day", "tier", "variant"):
            raise ValueError(f"unknown grouping {dim!r}")
    exprs = {
        "day": "(p.closed_at AT TIME ZONE 'UTC')::date",
        "tier": "p.tier",
        "variant": "p.variant",
    }
    select = ", ".join(f"{exprs[d]} AS {d}" for d in by)
    group = ", ".join(str(i + 1) for i in range(len(by)))
    sql = f"""
        SELECT {select + "," if select else ""} p.currency, count(*) AS matches,
               sum(p.stake_total)::bigint AS pot_total, sum(p.commission)::bigint AS commission
        FROM ledger.pots p
        WHERE p.status = 'settled'
          AND ($1::date IS NULL OR (p.closed_at AT TIME ZONE 'UTC')::date >= $1)
          AND ($2::date IS NULL OR (p.closed_at AT TIME ZONE 'UTC')::date <= $2)
        GROUP BY {group + "," if group else ""} p.currency
        ORDER BY {group + "," if group else ""} p.currency
    """  # noqa: S608 (the grouping expressions come from the fixed table above)
    rows = await conn.fetch(sql, since, until)
    return clean([dict(r) for r in rows])


async def statement(
    conn: asyncpg.Connection,
    player: str,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    *,
    after: int = 0,
    limit: int | None = None,
) -> Row | None:
    """A player's wallet movements with the running balance the ledger recorded.

    With `limit`, one page of the lines: those after the wallet version `after`, at most
    `limit` of them, and `next` the version to continue after (None on the last page). The
    opening and closing balances are those of the whole period either way."""
    account = await conn.fetchrow(
        "SELECT id, code, currency, balance FROM ledger.accounts WHERE code = $1",
        "wallet:" + player,
    )
    if account is None:
        return None
    rows = await conn.fetch(
        """
        SELECT p.entry_id, e.created_at, e.kind, coalesce(e.match_id, held.match_id) AS match_id,
               e.reference,
               p.amount, p.balance_after AS balance, p.version_after AS version,
               pot.tier, pot.variant, pot.commission,
               CASE WHEN pot.match_id IS NOT NULL THEN (SELECT count(*)::int
                 FROM ledger.stakes s WHERE s.match_id = pot.match_id) END AS seats
        FROM ledger.postings p JOIN ledger.entries e ON e.id = p.entry_id
        -- a hold is made before its match exists: its match is the stake its hold became
        LEFT JOIN LATERAL (
          SELECT s.match_id FROM ledger.postings hp
          JOIN ledger.stakes s ON s.hold_id = hp.account_id
          WHERE e.match_id IS NULL AND hp.entry_id = e.id LIMIT 1
        ) held ON true
        LEFT JOIN ledger.pots pot ON pot.match_id = coalesce(e.match_id, held.match_id)
        WHERE p.account_id = $1 AND p.version_after > $4
          AND ($2::timestamptz IS NULL OR e.created_at >= $2)
          AND ($3::timestamptz IS NULL OR e.created_at < $3)
        ORDER BY p.version_after
        LIMIT $5
        """,
        account["id"],
        since,
        until,
        after,
        None if limit is None else limit + 1,
    )
    more = limit is not None and len(rows) > limit
    lines = clean([dict(r) for r in (rows[:limit] if more else rows)])
    first, last = lines[0] if lines else None, lines[-1] if lines else None
    if limit is not None or after > 0:
        first, last = await _period_ends(conn, account["id"], since, until)
    opening = (first["balance"] - first["amount"]) if first else None
    if opening is None:
        at = since or until
        opening = (
            await balance_at(conn, account["code"], at) if at is not None else account["balance"]
        ) or 0
    closing = last["balance"] if last else opening
    report: Row = {
        "player": player,
        "account": account["code"],
        "currency": account["currency"],
        "opening_balance": opening,
        "closing_balance": closing,
        "lines": lines,
    }
    if limit is not None:
        report["next"] = lines[-1]["version"] if more else None
    return report


async def _period_ends(
    conn: asyncpg.Connection, account_id: int, since: dt.datetime | None, until: dt.datetime | None
) -> tuple[Row | None, Row | None]:
    """The first and last posting of an account in the period (each read by the account's
    version index, not the whole period)."""
    ends: list[Row | None] = []
    for order in ("ASC", "DESC"):
        row = await conn.fetchrow(
            f"""
            SELECT p.amount, p.balance_after AS balance
            FROM ledger.postings p JOIN ledger.entries e ON e.id = p.entry_id
            WHERE p.account_id = $1
              AND ($2::timestamptz IS NULL OR e.created_at >= $2)
              AND ($3::timestamptz IS NULL OR e.created_at < $3)
            ORDER BY p.version_after {order} LIMIT 1
            """,  # noqa: S608 (the order is one of two fixed words)
            account_id,
            since,
            until,
        )
        ends.append(None if row is None else dict(row))
    return ends[0], ends[1]


async def balance_at(conn: asyncpg.Connection, code: str, at: dt.datetime) -> int | None:
    """The balance of one account counting the entries created at or before ``at``."""
    row = await conn.fetchrow(
        """
        SELECT a.id, coalesce((SELECT sum(p.amount) FROM ledger.postings p
                               JOIN ledger.entries e ON e.id = p.entry_id
                               WHERE p.account_id = a.id AND e.created_at <= $2), 0)::bigint AS b
        FROM ledger.accounts a WHERE a.code = $1
        """,
        code,
        at,
    )
    return None if row is None else int(row["b"])


JOURNAL_COLUMNS = (
    "entry_id",
    "created_at",
    "kind",
    "idempotency_key",
    "match_id",
    "reference",
    "leg",
    "account",
    "amount",
    "currency",
    "balance_after",
    "version_after",
)


async def journal(
    conn: asyncpg.Connection,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    *,
    after: tuple[int, int] = (0, 0),
    limit: int | None = None,
) -> list[Row]:
    """The journal, one row per posting in (entry, leg) order, for CSV/JSON export: those
    after the posting `after` (entry id, leg), at most `limit` of them (None: all)."""
    rows = await conn.fetch(
        """
        SELECT e.id AS entry_id, e.created_at, e.kind, e.idempotency_key, e.match_id,
               e.reference, p.leg, a.code AS account, p.amount, p.currency, p.balance_after,
               p.version_after
        FROM ledger.postings p
        JOIN ledger.entries e ON e.id = p.entry_id
        JOIN ledger.accounts a ON a.id = p.account_id
        WHERE (p.entry_id, p.leg) > ($3::bigint, $4::smallint)
          AND ($1::timestamptz IS NULL OR e.created_at >= $1)
          AND ($2::timestamptz IS NULL OR e.created_at < $2)
        ORDER BY p.entry_id, p.leg
        LIMIT $5
        """,
        since,
        until,
        after[0],
        after[1],
        limit,
    )
    # created_at is the one column that is not already JSON (a page is 5,000 rows: a general
    # `clean` of every value took as long as the query)
    out: list[Row] = []
    for r in rows:
        row = dict(r)
        row["created_at"] = _jsonable(row["created_at"])
        out.append(row)
    return out


# --- reconciliation -----------------------------------------------------------------------

# Each check's query answers one row per discrepancy: its sentence, then its references as a
# JSON object (entry_id, leg, account, match_id, currency...) a program or page can follow.
_CHECKS: list[tuple[str, str]] = [
    (
        "trial_balance",
        """SELECT 'currency ' || currency || ': accounts add up to ' || sum(balance) || ', not 0',
                  jsonb_build_object('currency', currency)
           FROM ledger.accounts GROUP BY currency HAVING sum(balance) <> 0""",
    ),
    (
        "account_matches_postings",
        """SELECT 'account ' || a.code || ': balance ' || a.balance || ' version ' || a.version
                  || ' but its postings add up to ' || coalesce(s.total, 0) || ' over '
                  || coalesce(s.n, 0) || ' postings (last recorded balance '
                  || coalesce(s.last_balance::text, 'none') || ')',
                  jsonb_build_object('account', a.code)
           FROM ledger.accounts a
           LEFT JOIN (SELECT account_id, sum(amount) AS total, count(*) AS n,
                             (array_agg(balance_after ORDER BY version_after DESC))[1]
                               AS last_balance
                      FROM ledger.postings GROUP BY account_id) s ON s.account_id = a.id
           WHERE a.balance <> coalesce(s.total, 0) OR a.version <> coalesce(s.n, 0)
              OR (s.n > 0 AND s.last_balance <> a.balance)
           ORDER BY a.id""",
    ),
    (
        "running_balances",
        """SELECT 'entry ' || entry_id || ' leg ' || leg || ' on account ' || account_id
                  || ': balance after ' || balance_after || ' does not follow from '
                  || coalesce(prev_balance, 0) || ' + ' || amount,
                  jsonb_build_object('entry_id', entry_id, 'leg', leg, 'account',
                                     (SELECT code FROM ledger.accounts WHERE id = account_id))
           FROM (SELECT p.*, lag(balance_after) OVER w AS prev_balance,
                        lag(version_after) OVER w AS prev_version
                 FROM ledger.postings p
                 WINDOW w AS (PARTITION BY account_id ORDER BY version_after)) x
           WHERE (DAY_FILTER_X)
             AND (balance_after <> coalesce(prev_balance, 0) + amount
                  OR version_after <> coalesce(prev_version, 0) + 1)
           ORDER BY entry_id, leg""",
    ),
    (
        "entries_balanced",
        """SELECT 'entry ' || e.id || ' (' || e.kind || '): ' || coalesce(s.n, 0)
                  || ' postings adding up to ' || coalesce(s.total, 0) || ', not 0',
                  jsonb_build_object('entry_id', e.id)
           FROM ledger.entries e
           LEFT JOIN (SELECT entry_id, count(*) AS n, sum(amount) AS total,
                             count(DISTINCT currency) AS currencies
                      FROM ledger.postings GROUP BY entry_id) s ON s.entry_id = e.id
           WHERE (DAY_FILTER_E)
             AND (s.n IS NULL OR s.n < 2 OR s.total <> 0 OR s.currencies <> 1)
           ORDER BY e.id""",
    ),
    (
        # a reversal is exactly its reversed cashier entry negated, recorded once, both ways
        "reversals",
        """SELECT 'entry ' || e.id || ' (reversal): '
                  || CASE WHEN r.reversed_entry_id IS NULL THEN 'reverses no recorded entry'
                          WHEN o.kind NOT IN ('deposit', 'withdrawal')
                            THEN 'reverses entry ' || o.id || ', a ' || o.kind
                          ELSE 'postings are not those of entry ' || o.id || ' negated' END,
                  jsonb_build_object('entry_id', e.id, 'reversed_entry_id', r.reversed_entry_id)
           FROM ledger.entries e
           LEFT JOIN ledger.reversals r ON r.reversal_entry_id = e.id
           LEFT JOIN ledger.entries o ON o.id = r.reversed_entry_id
           WHERE e.kind = 'reversal' AND (DAY_FILTER_E)
             AND (r.reversed_entry_id IS NULL OR o.kind NOT IN ('deposit', 'withdrawal')
                  OR EXISTS ((SELECT account_id, amount FROM ledger.postings
                              WHERE entry_id = e.id
                              EXCEPT SELECT account_id, -amount FROM ledger.postings
                              WHERE entry_id = o.id)
                             UNION ALL
                             (SELECT account_id, -amount FROM ledger.postings
                              WHERE entry_id = o.id
                              EXCEPT SELECT account_id, amount FROM ledger.postings
                              WHERE entry_id = e.id)))
           UNION ALL
           SELECT 'entry ' || r.reversal_entry_id || ' is recorded as reversing entry '
                  || r.reversed_entry_id || ' but is a ' || e.kind,
                  jsonb_build_object('entry_id', r.reversal_entry_id,
                                     'reversed_entry_id', r.reversed_entry_id)
           FROM ledger.reversals r JOIN ledger.entries e ON e.id = r.reversal_entry_id
           WHERE e.kind <> 'reversal' AND (DAY_FILTER_E)""",
    ),
    (
        "posting_currency",
        """SELECT 'entry ' || p.entry_id || ' leg ' || p.leg || ': posting in ' || p.currency
                  || ' on account ' || a.code || ' kept in ' || a.currency,
                  jsonb_build_object('entry_id', p.entry_id, 'leg', p.leg, 'account', a.code)
           FROM ledger.postings p JOIN ledger.accounts a ON a.id = p.account_id
           WHERE p.currency <> a.currency ORDER BY p.entry_id, p.leg""",
    ),
    (
        "no_negative_balances",
        """SELECT 'account ' || code || ' is negative: ' || balance,
                  jsonb_build_object('account', code) FROM ledger.accounts
           WHERE kind <> 'cashier' AND balance < 0 ORDER BY id""",
    ),
    (
        "pots",
        """SELECT 'pot ' || p.match_id || ' (' || p.status || '): balance ' || a.balance
                  || CASE WHEN p.status = 'open' THEN ', stakes ' || p.stake_total
                          ELSE ' after closing' END,
                  jsonb_build_object('match_id', p.match_id, 'account', a.code)
           FROM ledger.pots p JOIN ledger.accounts a ON a.id = p.account_id
           WHERE (DAY_FILTER_P)
             AND CASE WHEN p.status = 'open' THEN a.balance <> p.stake_total
                      ELSE a.balance <> 0 OR a.closed_at IS NULL END
           ORDER BY p.match_id""",
    ),
    (
        "stakes",
        """SELECT 'pot ' || p.match_id || ': stakes add up to ' || coalesce(s.total, 0)
                  || ', pot started with ' || p.stake_total,
                  jsonb_build_object('match_id', p.match_id)
           FROM ledger.pots p
           LEFT JOIN (SELECT match_id, sum(amount) AS total FROM ledger.stakes
                      GROUP BY match_id) s ON s.match_id = p.match_id
           WHERE (DAY_FILTER_P) AND coalesce(s.total, 0) <> p.stake_total
           ORDER BY p.match_id""",
    ),
    (
        "commission_rate",
        """SELECT 'pot ' || p.match_id || ': commission ' || coalesce(p.commission::text, 'none')
                  || ' but ' || p.stake_total || ' * ' || p.commission_rate_bp
                  || ' // 10000 = ' || (p.stake_total * p.commission_rate_bp / 10000)
                  || ' and the settlement posted ' || coalesce(c.amount, 0),
                  jsonb_build_object('match_id', p.match_id, 'entry_id', p.close_entry_id)
           FROM ledger.pots p
           LEFT JOIN ledger.postings c ON c.entry_id = p.close_entry_id
                AND c.account_id = p.commission_account_id
           WHERE p.status = 'settled' AND (DAY_FILTER_P)
             AND (p.commission IS DISTINCT FROM p.stake_total * p.commission_rate_bp / 10000
                  OR coalesce(c.amount, 0) <> p.commission)
           ORDER BY p.match_id""",
    ),
    (
        "commission_accounts",
        """SELECT 'house commission accounts hold ' || h.total || ' but settled pots took '
                  || coalesce(s.total, 0),
                  jsonb_build_object('account_kind', 'commission')
           FROM (SELECT coalesce(sum(balance), 0) AS total FROM ledger.accounts
                 WHERE kind = 'commission') h,
                (SELECT sum(commission) AS total FROM ledger.pots WHERE status = 'settled') s
           WHERE h.total <> coalesce(s.total, 0)""",
    ),
]

_DAY_FILTERS = {
    "DAY_FILTER_X": "entry_id IN (SELECT id FROM ledger.entries WHERE created_at >= $1 "
    "AND created_at < $2)",
    "DAY_FILTER_E": "e.created_at >= $1 AND e.created_at < $2",
    "DAY_FILTER_P": "(p.started_at >= $1 AND p.started_at < $2) OR "
    "(p.closed_at >= $1 AND p.closed_at < $2)",
}


async def reconcile(conn: asyncpg.Connection, day: dt.date | None = None) -> Row:
    """Run every check; with ``day`` the per-entry and per-pot checks cover that UTC day.

    Each check lists its discrepancies as sentences and, in the same order, as ``refs``:
    objects naming the rows behind each one (``entry_id``, ``leg``, ``account``, ``match_id``,
    ``currency``), for a program or the finance page to drill down to."""
    checks: list[Row] = []
    discrepancies: list[str] = []
    bounds = day_bounds(day) if day else None
    for name, sql in _CHECKS:
        args: list[Any] = []
        for marker, filt in _DAY_FILTERS.items():
            if marker in sql:
                sql = sql.replace(marker, filt if bounds else "TRUE")
        if bounds and "$1" in sql:
            args = list(bounds)
        rows = await conn.fetch(sql, *args)
        found = [str(r[0]) for r in rows]
        refs = [msgspec.json.decode(r[1]) if isinstance(r[1], str) else r[1] for r in rows]
        checks.append({"check": name, "ok": not found, "discrepancies": found, "refs": refs})
        discrepancies.extend(f"{name}: {d}" for d in found)
    summary: list[Row] = []
    if bounds:
        rows = await conn.fetch(
            """
            SELECT e.kind, count(DISTINCT e.id) AS entries, a.kind AS account_kind,
                   sum(p.amount)::bigint AS net
            FROM ledger.entries e JOIN ledger.postings p ON p.entry_id = e.id
            JOIN ledger.accounts a ON a.id = p.account_id
            WHERE e.created_at >= $1 AND e.created_at < $2
            GROUP BY e.kind, a.kind ORDER BY e.kind, a.kind
            """,
            *bounds,
        )
        summary = [dict(r) for r in rows]
        opening = await trial_balance(conn, bounds[0] - dt.timedelta(microseconds=1))
        closing = await trial_balance(conn, bounds[1] - dt.timedelta(microseconds=1))
        for label, tb in (("opening", opening), ("closing", closing)):
            if not tb["balanced"]:
                msg = f"trial_balance: {label} trial balance of {day} does not add up to zero"
                discrepancies.append(msg)
                checks.append(
                    {
                        "check": f"{label}_trial_balance",
                        "ok": False,
                        "discrepancies": [msg],
                        "refs": [{"day": day.isoformat() if day else None}],
                    }
                )
    return {
        "date": day.isoformat() if day else None,
        "ok": not discrepancies,
        "checks": checks,
        "movements": summary,
        "discrepancies": discrepancies,
    }


# A posting's entry carries its transaction's start time, and a wallet's postings take
# versions in lock order: a posting that waited for the wallet's lock may carry an earlier time
# than the one before it. Reading back from the window's start by this margin (far longer than
# any posting transaction waits) keeps such postings in the window.
ACTIVITY_MARGIN = dt.timedelta(minutes=1)
# What a wallet posting of each entry kind is to the player's net loss: stakes are held from
# the wallet (a hold counts as a loss until released); payouts, refunds and releases come back.
LOSS_KINDS = ("hold", "release", "settle", "void")


async def player_activity(
    conn: asyncpg.Connection, player: str, sinces: list[dt.datetime]
) -> Row | None:
    """A player's deposits and net loss (stakes minus payouts, refunds and releases) since
    each of `sinces`, in cents; None when he has no wallet.

    Cheap whatever the wallet's age: first the wallet version where the earliest window
    starts, found walking the wallet's version index back from its newest posting (as many
    steps as the window has postings); then only the postings after that version, by the same
    index. Neither statement filters on the entries' time index, which would read every
    player's entries of the window."""
    wallet = await conn.fetchrow(
        """
        SELECT w.id, w.currency, coalesce((
            SELECT p.version_after FROM ledger.postings p
            JOIN ledger.entries e ON e.id = p.entry_id
            WHERE p.account_id = w.id AND e.created_at < $2
            ORDER BY p.version_after DESC LIMIT 1), 0) AS version
        FROM ledger.accounts w WHERE w.code = 'wallet:' || $1
        """,
        player,
        min(sinces) - ACTIVITY_MARGIN,
    )
    if wallet is None:
        return None
    rows = await conn.fetch(
        """
        WITH lines AS MATERIALIZED (
            SELECT e.created_at, e.kind, p.amount
            FROM ledger.postings p,
                 -- each posting's own entry by its key (LIMIT keeps this a per-row lookup: a
                 -- misestimated range must not turn it into a scan of every entry)
                 LATERAL (SELECT x.created_at, x.kind FROM ledger.entries x
                          WHERE x.id = p.entry_id LIMIT 1) e
            WHERE p.account_id = $1 AND p.version_after > $2
        )
        SELECT coalesce(sum(l.amount) FILTER (WHERE l.kind = 'deposit'), 0)::bigint AS deposits,
               (-coalesce(sum(l.amount) FILTER (WHERE l.kind = ANY($4::text[])), 0))::bigint
                   AS net_loss
        FROM unnest($3::timestamptz[]) WITH ORDINALITY AS s(since, n)
        LEFT JOIN lines l ON l.created_at >= s.since
        GROUP BY s.n ORDER BY s.n
        """,
        wallet["id"],
        wallet["version"],
        sinces,
        list(LOSS_KINDS),
    )
    return {
        "player": player,
        "currency": wallet["currency"],
        "windows": [
            {"since": since, "deposits": int(r["deposits"]), "net_loss": int(r["net_loss"])}
            for since, r in zip(sinces, rows, strict=True)
        ],
    }
