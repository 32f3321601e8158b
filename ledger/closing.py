"""The daily close with four eyes: one finance user proposes closing a UTC day, a second one
approves; the closed day's report is signed with the ledger's Ed25519 report key.

Rules (docs/explanation/daily-close.md):

* Days close in order, one at a time, only once over (UTC), and are never reopened. The first
  day to close is the day of the ledger's first entry.
* Once a day is closed, no entry may be dated into it (`ledger.refuse_closed_day`, a trigger on
  every entry insert); a correction is a reversal posted in the open day.
* The approver is not the proposer (409 `same_approver`, also a table constraint), and approval
  recomputes the report: it refuses (409 `report_changed`) a report that differs from the one
  proposed, so the approver signs off what the proposer saw.

The report is `build_report` (a pure function) over what `read_day` reads in one snapshot. The
signed document's bytes are `canonical(document)`: JSON with keys sorted, no whitespace, UTF-8
(msgspec's encoding; the document holds only strings, integers, booleans, null, lists and
objects, so any reader can rebuild the same bytes from the parsed JSON).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from dataclasses import dataclass
from typing import Any

import asyncpg
import msgspec
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ledger import chain, reports
from ledger.errors import LedgerError
from ledger.schema import ACCOUNT_KINDS, CHAIN_LOCK_KEY

FORMAT = "mesa-day-close-v1"
# Proposals, approvals and withdrawals take this lock (transaction-scoped) one at a time.
CLOSE_LOCK_KEY = CHAIN_LOCK_KEY + 2
MAX_DISCREPANCIES_LISTED = 20  # per check, in a report (the count is always given)
MAX_CLOSES_LISTED = 400
# The days a close may name (the bounds keep every day's arithmetic inside datetime's range).
FIRST_DAY = dt.date(2000, 1, 1)
LAST_DAY = dt.date(9000, 12, 31)
# A closing waits this long at most for the chain to be sealed through the day.
SEAL_ATTEMPTS = 100
SEAL_PAUSE_S = 0.02

Row = dict[str, Any]

# Activity lines: (line, entry kind, reversed kind, account kind, sign). The amount of a line is
# the sum of the day's postings of that entry kind on accounts of that kind, times the sign (so
# every amount is positive); its count is the number of such entries.
ACTIVITY: tuple[tuple[str, str, str | None, str, int], ...] = (
    ("deposits", "deposit", None, "wallet", 1),
    ("withdrawals", "withdrawal", None, "wallet", -1),
    ("deposit_reversals", "reversal", "deposit", "wallet", -1),
    ("withdrawal_reversals", "reversal", "withdrawal", "wallet", 1),
    ("stakes_held", "hold", None, "hold", 1),
    ("holds_released", "release", None, "wallet", 1),
    ("stakes_into_pots", "start", None, "pot", 1),
    ("payouts", "settle", None, "wallet", 1),
    ("commission", "settle", None, "commission", 1),
    ("voids_refunded", "void", None, "wallet", 1),
)


def canonical(document: Any) -> bytes:
    """The signed bytes of a document: sorted keys, compact, UTF-8."""
    return msgspec.json.encode(document, order="sorted")


def public_key_hex(key: Ed25519PublicKey) -> str:
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw).hex()


def load_signing_key(seed_hex: str) -> Ed25519PrivateKey:
    """The report key from its file's content: the 32-byte Ed25519 seed as 64 hex digits."""
    try:
        seed = bytes.fromhex(seed_hex.strip())
    except ValueError:
        raise ValueError("the report key file must hold 64 hex digits") from None
    if len(seed) != 32:
        raise ValueError("the report key file must hold 64 hex digits (a 32-byte seed)")
    return Ed25519PrivateKey.from_private_bytes(seed)


def sign(key: Ed25519PrivateKey, document: Row) -> Row:
    """The signed report as served: the document, its signature and the signer's public key."""
    return {
        "document": document,
        "signature": key.sign(canonical(document)).hex(),
        "public_key": public_key_hex(key.public_key()),
    }


def verify(signed: Any, public_key: bytes) -> bool:
    """Whether `signed` (a parsed report file) carries a valid signature by `public_key`."""
    if not isinstance(signed, dict) or not isinstance(signed.get("document"), dict):
        return False
    try:
        signature = bytes.fromhex(str(signed.get("signature", "")))
        Ed25519PublicKey.from_public_bytes(public_key).verify(
            signature, canonical(signed["document"])
        )
    except (ValueError, InvalidSignature):
        return False
    return True


# --- the report -----------------------------------------------------------------------------


@dataclass(frozen=True)
class DayRows:
    """What the report is made of, read in one snapshot."""

    day: dt.date
    opening: list[Row]  # {kind, currency, balance}: the trial balance before the day
    closing: list[Row]  # the same at the day's end
    movements: list[Row]  # {entry_kind, reverses_kind, account_kind, currency, entries, net}
    entries: list[Row]  # {kind, count}
    commission: list[Row]  # {tier, variant, currency, matches, pot_total, commission}
    reconciliation: Row
    chain_head: Row  # {entry_id, chain_hash}


def _kind_order(kind: str) -> int:
    return ACCOUNT_KINDS.index(kind) if kind in ACCOUNT_KINDS else len(ACCOUNT_KINDS)


def build_report(rows: DayRows) -> Row:
    """The day's figures, integer cents, from `read_day`'s rows (a pure function)."""
    balances: dict[tuple[str, str], Row] = {}
    for label, lines in (("opening", rows.opening), ("closing", rows.closing)):
        for line in lines:
            key = (str(line["kind"]), str(line["currency"]))
            entry = balances.setdefault(
                key, {"kind": key[0], "currency": key[1], "opening": 0, "closing": 0}
            )
            entry[label] = int(line["balance"])
    balance_lines = []
    for key in sorted(balances, key=lambda k: (k[1], _kind_order(k[0]), k[0])):
        line = balances[key]
        line["movement"] = line["closing"] - line["opening"]
        balance_lines.append(line)

    currencies = sorted({k[1] for k in balances} | {str(m["currency"]) for m in rows.movements})
    activity = []
    for currency in currencies:
        for name, entry_kind, reverses, account_kind, sign_ in ACTIVITY:
            found = [
                m
                for m in rows.movements
                if m["entry_kind"] == entry_kind
                and m["account_kind"] == account_kind
                and m["currency"] == currency
                and (reverses is None or m["reverses_kind"] == reverses)
            ]
            activity.append(
                {
                    "line": name,
                    "currency": currency,
                    "count": sum(int(m["entries"]) for m in found),
                    "amount": sign_ * sum(int(m["net"]) for m in found),
                }
            )

    commission: list[Row] = [
        {
            "tier": str(c["tier"]),
            "variant": str(c["variant"]),
            "currency": str(c["currency"]),
            "matches": int(c["matches"]),
            "pot_total": int(c["pot_total"]),
            "commission": int(c["commission"]),
        }
        for c in sorted(rows.commission, key=lambda c: (c["currency"], c["tier"], c["variant"]))
    ]
    pots_settled = [
        {
            "currency": currency,
            "count": sum(int(c["matches"]) for c in commission if c["currency"] == currency),
            "pot_total": sum(int(c["pot_total"]) for c in commission if c["currency"] == currency),
            "commission": sum(
                int(c["commission"]) for c in commission if c["currency"] == currency
            ),
        }
        for currency in currencies
    ]
    checks = [
        {
            "check": str(c["check"]),
            "ok": bool(c["ok"]),
            "discrepancy_count": len(c["discrepancies"]),
            "discrepancies": [str(d) for d in c["discrepancies"][:MAX_DISCREPANCIES_LISTED]],
        }
        for c in rows.reconciliation["checks"]
    ]
    return {
        "format": FORMAT,
        "day": rows.day.isoformat(),
        "balances": balance_lines,
        "balanced": all(
            sum(b["closing"] for b in balance_lines if b["currency"] == c) == 0
            and sum(b["opening"] for b in balance_lines if b["currency"] == c) == 0
            for c in currencies
        ),
        "activity": activity,
        "pots_settled": pots_settled,
        "commission": commission,
        "entries": sorted(
            ({"kind": str(e["kind"]), "count": int(e["count"])} for e in rows.entries),
            key=lambda e: e["kind"],
        ),
        "reconciliation": {"ok": bool(rows.reconciliation["ok"]), "checks": checks},
        "chain_head": {
            "entry_id": int(rows.chain_head["entry_id"]),
            "chain_hash": str(rows.chain_head["chain_hash"]),
        },
    }


_MOVEMENTS_SQL = """
SELECT e.kind AS entry_kind, e.result ->> 'reverses_kind' AS reverses_kind,
       a.kind AS account_kind, p.currency::text AS currency,
       count(DISTINCT e.id) AS entries, sum(p.amount)::bigint AS net
FROM ledger.entries e
JOIN ledger.postings p ON p.entry_id = e.id
JOIN ledger.accounts a ON a.id = p.account_id
WHERE e.created_at >= $1 AND e.created_at < $2
GROUP BY 1, 2, 3, 4
"""


async def read_day(conn: asyncpg.Connection, day: dt.date) -> DayRows:
    """Everything the report needs; call it inside one REPEATABLE READ transaction."""
    start, end = reports.day_bounds(day)
    just_before = dt.timedelta(microseconds=1)
    opening = await reports.trial_balance(conn, start - just_before)
    closing = await reports.trial_balance(conn, end - just_before)
    movements = [dict(r) for r in await conn.fetch(_MOVEMENTS_SQL, start, end)]
    entries = [
        dict(r)
        for r in await conn.fetch(
            "SELECT kind::text AS kind, count(*) AS count FROM ledger.entries "
            "WHERE created_at >= $1 AND created_at < $2 GROUP BY kind",
            start,
            end,
        )
    ]
    commission = await reports.commission(conn, ("tier", "variant"), day, day)
    reconciliation = await reports.reconcile(conn, day)
    return DayRows(
        day=day,
        opening=opening["by_kind"],
        closing=closing["by_kind"],
        movements=movements,
        entries=entries,
        commission=commission,
        reconciliation=reconciliation,
        chain_head=await chain_head(conn, end),
    )


async def chain_head(conn: asyncpg.Connection, end: dt.datetime) -> Row:
    """The chain hash after the newest entry (by id) dated before `end`: the sealed chain as of
    the day's close. Raises 503 `chain_behind` when that entry is not sealed yet."""
    last = await conn.fetchval("SELECT max(id) FROM ledger.entries WHERE created_at < $1", end)
    if last is None:
        return {"entry_id": 0, "chain_hash": chain.GENESIS.hex()}
    seal = await conn.fetchrow(
        "SELECT id, entry_ids, entry_hashes FROM ledger.chain_seals "
        "WHERE last_entry_id >= $1 ORDER BY id LIMIT 1",
        last,
    )
    if seal is None or last not in seal["entry_ids"]:
        raise LedgerError(503, "chain_behind", f"entry {last} is not sealed into the chain yet")
    previous = await conn.fetchval(
        "SELECT chain_hash FROM ledger.chain_seals WHERE id = $1", seal["id"] - 1
    )
    running = bytes(previous) if previous is not None else chain.GENESIS
    hashes = bytes(seal["entry_hashes"])
    for at, entry_id in enumerate(seal["entry_ids"]):
        if entry_id > last:
            break
        running = chain.link(running, hashes[at * 32 : at * 32 + 32])
    return {"entry_id": int(last), "chain_hash": running.hex()}


# --- the day's integrity alerts --------------------------------------------------------------

MAX_ALERTS_LISTED = 5000
MAX_ALERT_KINDS = 100


def integrity_section(day: dt.date, summary: Row) -> Row:
    """The report's `integrity_alerts` section from the gateway's summary of the day's alerts
    (the integrity store is not the ledger's to read): checked to be canonical, so the same
    alerts always give the same signed bytes. Raises 400 `invalid_integrity_summary`."""

    def bad(detail: str) -> LedgerError:
        return LedgerError(400, "invalid_integrity_summary", detail)

    alerts = [dict(a) for a in summary["alerts"]]
    by_kind = [dict(k) for k in summary["by_kind"]]
    truncated = int(summary.get("truncated", 0))
    if len(alerts) > MAX_ALERTS_LISTED or len(by_kind) > MAX_ALERT_KINDS or truncated < 0:
        raise bad(f"at most {MAX_ALERTS_LISTED} alerts and {MAX_ALERT_KINDS} kinds")
    ids = [int(a["id"]) for a in alerts]
    if any(b <= a for a, b in zip(ids, ids[1:], strict=False)):
        raise bad("alerts must be sorted by id, each once")
    if any(not str(a["raised_at"]).startswith(day.isoformat()) for a in alerts):
        raise bad(f"every alert must be raised on {day} (UTC)")
    kinds = [str(k["kind"]) for k in by_kind]
    if any(b <= a for a, b in zip(kinds, kinds[1:], strict=False)):
        raise bad("by_kind must be sorted by kind, each once")
    counts = {str(k["kind"]): int(k["count"]) for k in by_kind}
    listed: dict[str, int] = {}
    for a in alerts:
        listed[str(a["kind"])] = listed.get(str(a["kind"]), 0) + 1
    if any(listed[k] > counts.get(k, 0) for k in listed):
        raise bad("by_kind must count every listed alert")
    if sum(counts.values()) != len(alerts) + truncated:
        raise bad("by_kind must add up to the alerts listed plus truncated")
    return {
        "alerts": [
            {
                "id": int(a["id"]),
                "kind": str(a["kind"]),
                "player": str(a["player"]),
                "counterpart": None if a["counterpart"] is None else str(a["counterpart"]),
                "score": str(a["score"]),
                "raised_at": str(a["raised_at"]),
            }
            for a in alerts
        ],
        "by_kind": [{"kind": k, "count": counts[k]} for k in kinds],
        "total": len(alerts) + truncated,
        "truncated": truncated,
    }


# --- the close ------------------------------------------------------------------------------


def _stamp(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class Computed:
    report: Row
    horizon: int  # every entry id up to this one was final when the report was read


async def _seal_through(conn: asyncpg.Connection, day: dt.date) -> None:
    """Seal the chain through the day's last entry (the background sealer may be at it)."""
    end = reports.day_bounds(day)[1]
    last = await conn.fetchval("SELECT max(id) FROM ledger.entries WHERE created_at < $1", end)
    for _ in range(SEAL_ATTEMPTS):
        await chain.seal(conn)
        if last is None or await chain.sealed_to(conn) >= last:
            return
        await asyncio.sleep(SEAL_PAUSE_S)
    raise LedgerError(503, "chain_behind", "the hash chain is not sealed through the day yet")


async def compute(pool: asyncpg.Pool, day: dt.date, section: Row | None = None) -> Computed:
    """The day's report as the books stand now (nothing written); with `section` (from
    `integrity_section`), the day's integrity alerts as its `integrity_alerts` section."""
    async with pool.acquire() as conn:
        # every entry id up to the horizon is final, so one snapshot taken after it holds
        # every entry of the day that had committed (or will ever commit) below it
        horizon = int(await conn.fetchval("SELECT ledger.chain_horizon(true)"))
        await _seal_through(conn, day)
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            report = build_report(await read_day(conn, day))
    if section is not None:
        report["integrity_alerts"] = section
    return Computed(report=report, horizon=horizon)


def _today(now: dt.datetime) -> dt.date:
    return now.astimezone(dt.UTC).date()


async def next_day(conn: asyncpg.Connection) -> dt.date | None:
    """The next day to close: the day after the newest closed one, or the first entry's day."""
    last = await conn.fetchval("SELECT max(day) FROM ledger.day_closes WHERE status = 'closed'")
    if last is not None:
        return last + dt.timedelta(days=1)  # type: ignore[no-any-return]
    first = await conn.fetchval("SELECT min(created_at) FROM ledger.entries")
    return None if first is None else _today(first)


async def check_closable(conn: asyncpg.Connection, day: dt.date, now: dt.datetime) -> None:
    """Refuse (409) a day that may not be proposed now."""
    if day >= _today(now):
        raise LedgerError(409, "day_not_over", f"{day} is not over yet (UTC)")
    row = await conn.fetchrow("SELECT status FROM ledger.day_closes WHERE day = $1", day)
    if row is not None:
        code = "day_closed" if row["status"] == "closed" else "already_proposed"
        raise LedgerError(409, code, f"{day} is already {row['status']}")
    pending = await conn.fetchval(
        "SELECT day FROM ledger.day_closes WHERE status = 'proposed' LIMIT 1"
    )
    if pending is not None:
        raise LedgerError(
            409, "proposal_pending", f"{pending} is proposed; approve or withdraw it first"
        )
    expected = await next_day(conn)
    if expected is None:
        raise LedgerError(409, "nothing_to_close", "the ledger has no entries yet")
    if day != expected:
        raise LedgerError(409, "day_out_of_order", f"days close in order: the next is {expected}")


async def draft(pool: asyncpg.Pool, day: dt.date, now: dt.datetime) -> Row:
    """The report a proposal of `day` would carry now (a closed day: its closed report)."""
    async with pool.acquire() as conn:
        stored = await conn.fetchval("SELECT report FROM ledger.day_closes WHERE day = $1", day)
    if stored is not None:
        return msgspec.json.decode(stored) if isinstance(stored, str | bytes) else stored  # type: ignore[no-any-return]
    if day >= _today(now):
        raise LedgerError(409, "day_not_over", f"{day} is not over yet (UTC)")
    return (await compute(pool, day)).report


_ROW_SQL = """
SELECT day, status, proposed_by, proposed_at, approved_by, approved_at, report::text AS report,
       document, signature, chain_head
FROM ledger.day_closes
"""


def _summary(row: Any) -> Row:
    return {
        "day": row["day"].isoformat(),
        "status": row["status"],
        "proposed_by": row["proposed_by"],
        "proposed_at": _stamp(row["proposed_at"]),
        "approved_by": row["approved_by"],
        "approved_at": _stamp(row["approved_at"]) if row["approved_at"] else None,
        "chain_head": bytes(row["chain_head"]).hex(),
    }


def _detail(row: Any) -> Row:
    out = _summary(row)
    out["report"] = msgspec.json.decode(row["report"])
    out["signed"] = (
        {
            "document": msgspec.json.decode(bytes(row["document"])),
            "signature": bytes(row["signature"]).hex(),
        }
        if row["document"] is not None
        else None
    )
    return out


async def get(conn: asyncpg.Connection, day: dt.date) -> Row | None:
    row = await conn.fetchrow(_ROW_SQL + " WHERE day = $1", day)
    return None if row is None else _detail(row)


async def listing(conn: asyncpg.Connection, limit: int = MAX_CLOSES_LISTED) -> Row:
    rows = await conn.fetch(_ROW_SQL + " ORDER BY day DESC LIMIT $1", limit)
    upcoming = await next_day(conn)
    return {
        "closes": [_summary(r) for r in rows],
        "next_day": upcoming.isoformat() if upcoming else None,
    }


async def propose(
    pool: asyncpg.Pool, day: dt.date, actor: str, now: dt.datetime, integrity: Row | None = None
) -> Row:
    """Record `actor`'s proposal to close `day` with the report as it stands now."""
    section = None if integrity is None else integrity_section(day, integrity)
    async with pool.acquire() as conn:
        await check_closable(conn, day, now)
    computed = await compute(pool, day, section)
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", CLOSE_LOCK_KEY)
        await check_closable(conn, day, now)
        await conn.execute(
            "INSERT INTO ledger.day_closes (day, status, proposed_by, proposed_at, report, "
            "chain_head) VALUES ($1, 'proposed', $2, $3, $4::jsonb, $5)",
            day,
            actor,
            now,
            canonical(computed.report).decode(),
            bytes.fromhex(computed.report["chain_head"]["chain_hash"]),
        )
        found = await get(conn, day)
    if found is None:
        raise LedgerError(500, "close_not_recorded", f"the proposal of {day} was not recorded")
    return found


async def _proposal(conn: asyncpg.Connection, day: dt.date) -> Any:
    row = await conn.fetchrow(_ROW_SQL + " WHERE day = $1", day)
    if row is None:
        raise LedgerError(404, "no_proposal", f"nobody proposed closing {day}")
    if row["status"] == "closed":
        raise LedgerError(409, "day_closed", f"{day} is closed already")
    return row


async def approve(
    pool: asyncpg.Pool,
    day: dt.date,
    actor: str,
    now: dt.datetime,
    key: Ed25519PrivateKey,
    integrity: Row | None = None,
) -> Row:
    """Close `day`: `actor` (not the proposer) approves the report, recomputed now (with the
    day's integrity alerts as the gateway reads them now)."""
    section = None if integrity is None else integrity_section(day, integrity)
    async with pool.acquire() as conn:
        proposal = await _proposal(conn, day)
    if proposal["proposed_by"] == actor:
        raise LedgerError(409, "same_approver", "the proposer of a close cannot approve it")
    computed = await compute(pool, day, section)
    proposed = msgspec.json.decode(proposal["report"])
    if canonical(computed.report) != canonical(proposed):
        what = "books"
        if computed.report.get("integrity_alerts") != proposed.get("integrity_alerts"):
            what = "integrity alerts"
        raise LedgerError(
            409, "report_changed", f"the {what} of {day} changed since the proposal; withdraw it"
        )
    end = reports.day_bounds(day)[1]
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", CLOSE_LOCK_KEY)
        current = await _proposal(conn, day)
        if current["proposed_at"] != proposal["proposed_at"]:
            raise LedgerError(409, "report_changed", f"{day} was proposed again meanwhile")
        # Exclusive, as the chain sealer takes it: every posting in flight finishes first, and
        # those after see the day closed. Held for one read of the entries drawn since the
        # report's horizon: none of them may be dated into the day.
        await conn.execute("SELECT pg_advisory_xact_lock($1)", CHAIN_LOCK_KEY)
        late = await conn.fetchval(
            "SELECT min(id) FROM ledger.entries WHERE id > $1 AND created_at < $2",
            computed.horizon,
            end,
        )
        if late is not None:
            raise LedgerError(
                409, "report_changed", f"entry {late} was posted into {day} since; try again"
            )
        document = {
            "format": FORMAT,
            "day": day.isoformat(),
            "report": computed.report,
            "proposed_by": proposal["proposed_by"],
            "proposed_at": _stamp(proposal["proposed_at"]),
            "approved_by": actor,
            "approved_at": _stamp(now),
            "public_key": public_key_hex(key.public_key()),
        }
        signed_bytes = canonical(document)
        await conn.execute(
            "UPDATE ledger.day_closes SET status = 'closed', approved_by = $2, approved_at = $3, "
            "document = $4, signature = $5 WHERE day = $1",
            day,
            actor,
            now,
            signed_bytes,
            key.sign(signed_bytes),
        )
        found = await get(conn, day)
    if found is None:
        raise LedgerError(500, "close_not_recorded", f"the close of {day} was not recorded")
    return found


async def withdraw(pool: asyncpg.Pool, day: dt.date) -> Row:
    """Withdraw the pending proposal of `day` (any finance user, with a reason at the gateway)."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", CLOSE_LOCK_KEY)
        row = await _proposal(conn, day)
        summary = _summary(row)
        await conn.execute("DELETE FROM ledger.day_closes WHERE day = $1", day)
    summary["status"] = "withdrawn"
    return summary
