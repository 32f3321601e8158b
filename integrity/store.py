"""The integrity schema's data: alerts and their evidence, withdrawal holds, seat observations
and the scan's cursors. Every function takes an `AsyncEngine` (its own transaction) or an
`AsyncConnection` (it joins the caller's, e.g. with the staff audit record of the action).

Other detectors raise their alerts here with `raise_alerts` (see `integrity.models.NewAlert`
for the dedup rule).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import msgspec
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from integrity.models import (
    MAX_EVIDENCE,
    Alert,
    AlertPage,
    Evidence,
    NewAlert,
    Raised,
    SeatSighting,
    WithdrawalHold,
)
from integrity.schema import (
    RESOLUTIONS,
    alert_evidence,
    alerts,
    scan_cursors,
    seat_observations,
    withdrawal_holds,
)
from services.common.errors import ServiceError

MAX_PAGE = 200
MAX_DAY_ALERTS = 5000
MAX_RAISE_BATCH = 1000
MAX_SIGHTINGS_PAGE = 5000
Db = AsyncEngine | AsyncConnection


@asynccontextmanager
async def _tx(db: Db) -> AsyncIterator[AsyncConnection]:
    if isinstance(db, AsyncConnection):
        yield db
        return
    async with db.begin() as conn:
        yield conn


def _alert(row: Any) -> Alert:
    return Alert(**{field: row._mapping[field] for field in Alert.__struct_fields__})


# --- alerts ----------------------------------------------------------------------------------


async def raise_alerts(db: Db, new: Sequence[NewAlert]) -> list[Raised]:
    """Store each alert, or update the open alert with the same dedup key (score, figures,
    new evidence); an alert already closed under that key is left as it was."""
    if len(new) > MAX_RAISE_BATCH:
        raise ValueError(f"at most {MAX_RAISE_BATCH} alerts at a time")
    out: list[Raised] = []
    async with _tx(db) as conn:
        for alert in new:
            figures = msgspec.to_builtins(alert.figures)
            statement = (
                insert(alerts)
                .values(
                    kind=alert.kind,
                    player=alert.player,
                    counterpart=alert.counterpart,
                    score=float(alert.score),
                    figures=figures,
                    dedup_key=alert.dedup_key,
                )
                .on_conflict_do_update(
                    constraint="alerts_dedup_key_key",
                    set_={
                        "score": float(alert.score),
                        "figures": figures,
                        "updated_at": sa.func.now(),
                    },
                    where=alerts.c.status == "open",
                )
                .returning(alerts.c.id, sa.literal_column("(xmax = 0)").label("created"))
            )
            row = (await conn.execute(statement)).first()
            if row is None:  # closed under this key: nothing to change
                found = (
                    await conn.execute(
                        sa.select(alerts.c.id).where(alerts.c.dedup_key == alert.dedup_key)
                    )
                ).scalar_one()
                out.append(Raised(id=int(found), created=False))
                continue
            alert_id = int(row.id)
            if alert.evidence:
                have = int(
                    (
                        await conn.execute(
                            sa.select(sa.func.count())
                            .select_from(alert_evidence)
                            .where(alert_evidence.c.alert_id == alert_id)
                        )
                    ).scalar_one()
                )
                room = max(0, MAX_EVIDENCE - have)
                rows = [
                    {"alert_id": alert_id, "kind": e.kind, "ref": e.ref, "detail": e.detail}
                    for e in alert.evidence[:room]
                ]
                if rows:
                    await conn.execute(insert(alert_evidence).values(rows).on_conflict_do_nothing())
            out.append(Raised(id=alert_id, created=bool(row.created)))
    return out


async def list_alerts(
    db: Db,
    *,
    status: str | None = None,
    kind: str | None = None,
    player: str | None = None,
    before: int | None = None,
    limit: int = MAX_PAGE,
) -> AlertPage:
    """Newest first, a page at a time; `player` matches the alert's player or counterpart."""
    limit = max(1, min(limit, MAX_PAGE))
    query = sa.select(alerts).order_by(alerts.c.id.desc()).limit(limit + 1)
    if status is not None:
        query = query.where(alerts.c.status == status)
    if kind is not None:
        query = query.where(alerts.c.kind == kind)
    if player is not None:
        query = query.where(sa.or_(alerts.c.player == player, alerts.c.counterpart == player))
    if before is not None:
        query = query.where(alerts.c.id < before)
    async with _tx(db) as conn:
        rows = (await conn.execute(query)).all()
    page = [_alert(r) for r in rows[:limit]]
    return AlertPage(alerts=page, next=page[-1].id if len(rows) > limit and page else None)


async def get_alert(db: Db, alert_id: int) -> tuple[Alert, list[Evidence]]:
    async with _tx(db) as conn:
        row = (await conn.execute(sa.select(alerts).where(alerts.c.id == alert_id))).first()
        if row is None:
            raise ServiceError(404, "unknown_alert", f"no alert {alert_id}")
        evidence = (
            await conn.execute(
                sa.select(alert_evidence.c.kind, alert_evidence.c.ref, alert_evidence.c.detail)
                .where(alert_evidence.c.alert_id == alert_id)
                .order_by(alert_evidence.c.kind, alert_evidence.c.ref)
                .limit(MAX_EVIDENCE)
            )
        ).all()
    return _alert(row), [Evidence(kind=e.kind, ref=e.ref, detail=e.detail) for e in evidence]


async def close_alert(db: Db, alert_id: int, *, actor: str, resolution: str, reason: str) -> Alert:
    """Close an open alert as `dismissed` or `actioned` with the officer's reason; 404 for an
    unknown alert, 409 `alert_closed` for one already closed."""
    if resolution not in RESOLUTIONS:
        raise ServiceError(400, "invalid_resolution", "resolution is dismissed or actioned")
    if not reason.strip():
        raise ServiceError(400, "reason_required", "closing an alert needs a reason")
    async with _tx(db) as conn:
        row = (
            await conn.execute(
                sa.update(alerts)
                .where(alerts.c.id == alert_id, alerts.c.status == "open")
                .values(
                    status="closed",
                    resolution=resolution,
                    close_reason=reason.strip(),
                    closed_by=actor,
                    closed_at=sa.func.now(),
                    updated_at=sa.func.now(),
                )
                .returning(*alerts.c)
            )
        ).first()
        if row is None:
            exists = (
                await conn.execute(sa.select(alerts.c.id).where(alerts.c.id == alert_id))
            ).first()
            if exists is None:
                raise ServiceError(404, "unknown_alert", f"no alert {alert_id}")
            raise ServiceError(409, "alert_closed", f"alert {alert_id} is already closed")
    return _alert(row)


def day_bounds(day: date) -> tuple[datetime, datetime]:
    start = datetime.combine(day, time(0), tzinfo=UTC)
    return start, start + timedelta(days=1)


async def alerts_of_day(db: Db, day: date, limit: int = MAX_DAY_ALERTS) -> list[Alert]:
    """The alerts raised on one UTC day, oldest first (for the daily report); at most `limit`."""
    start, end = day_bounds(day)
    query = (
        sa.select(alerts)
        .where(alerts.c.created_at >= start, alerts.c.created_at < end)
        .order_by(alerts.c.id)
        .limit(max(1, min(limit, MAX_DAY_ALERTS)))
    )
    async with _tx(db) as conn:
        rows = (await conn.execute(query)).all()
    return [_alert(r) for r in rows]


async def kinds_of_day(db: Db, day: date) -> dict[str, int]:
    """How many alerts of each kind were raised on one UTC day (all of them, unlisted too)."""
    start, end = day_bounds(day)
    query = (
        sa.select(alerts.c.kind, sa.func.count())
        .where(alerts.c.created_at >= start, alerts.c.created_at < end)
        .group_by(alerts.c.kind)
    )
    async with _tx(db) as conn:
        rows = (await conn.execute(query)).all()
    return {str(kind): int(count) for kind, count in rows}


# --- withdrawal holds ------------------------------------------------------------------------


def _hold(row: Any) -> WithdrawalHold:
    return WithdrawalHold(**{f: row._mapping[f] for f in WithdrawalHold.__struct_fields__})


async def active_hold(db: Db, player: str) -> WithdrawalHold | None:
    async with _tx(db) as conn:
        row = (
            await conn.execute(
                sa.select(withdrawal_holds).where(
                    withdrawal_holds.c.player == player, withdrawal_holds.c.released_at.is_(None)
                )
            )
        ).first()
    return None if row is None else _hold(row)


async def place_hold(
    db: Db, player: str, *, actor: str, reason: str, alert_id: int | None = None
) -> WithdrawalHold:
    """Hold a player's withdrawals; 409 `already_held` when they are held."""
    async with _tx(db) as conn:
        row = (
            await conn.execute(
                insert(withdrawal_holds)
                .values(player=player, alert_id=alert_id, placed_by=actor, reason=reason.strip())
                .on_conflict_do_nothing(
                    index_elements=["player"], index_where=withdrawal_holds.c.released_at.is_(None)
                )
                .returning(*withdrawal_holds.c)
            )
        ).first()
    if row is None:
        raise ServiceError(409, "already_held", f"{player}'s withdrawals are already held")
    return _hold(row)


async def release_hold(db: Db, player: str, *, actor: str, reason: str) -> WithdrawalHold:
    """Release a player's hold; 409 `not_held` when there is none."""
    async with _tx(db) as conn:
        row = (
            await conn.execute(
                sa.update(withdrawal_holds)
                .where(
                    withdrawal_holds.c.player == player, withdrawal_holds.c.released_at.is_(None)
                )
                .values(released_by=actor, release_reason=reason.strip(), released_at=sa.func.now())
                .returning(*withdrawal_holds.c)
            )
        ).first()
    if row is None:
        raise ServiceError(409, "not_held", f"{player}'s withdrawals are not held")
    return _hold(row)


# --- seat observations -----------------------------------------------------------------------


def seat_key(secret: bytes) -> bytes:
    """The key seat observations are hashed under, derived from the server's secret (so the
    hashes of one deployment cannot be matched against another's)."""
    return hmac.new(secret, b"mesa-integrity-seat-v1", hashlib.sha256).digest()


def keyed_hash(key: bytes, value: str) -> bytes:
    return hmac.new(key, value.encode(), hashlib.sha256).digest()


async def record_seat(
    db: Db,
    *,
    match_id: str,
    player: str,
    tier: str,
    private: bool | None,
    address_hash: bytes,
    device_hash: bytes | None,
) -> bool:
    """Note who sat at a paid match from which (hashed) address and device; the first sighting
    of a player at a match is kept. True when this one was new."""
    async with _tx(db) as conn:
        row = (
            await conn.execute(
                insert(seat_observations)
                .values(
                    match_id=match_id,
                    player=player,
                    tier=tier,
                    private=private,
                    address_hash=address_hash,
                    device_hash=device_hash,
                )
                .on_conflict_do_nothing(constraint="seat_observations_match_id_player_key")
                .returning(seat_observations.c.id)
            )
        ).first()
    return row is not None


async def sightings(
    db: Db, *, since: datetime, after_id: int = 0, limit: int = MAX_SIGHTINGS_PAGE
) -> list[tuple[int, SeatSighting]]:
    """Seat observations since `since` after id `after_id`, oldest first, with their ids."""
    query = (
        sa.select(seat_observations)
        .where(seat_observations.c.observed_at >= since, seat_observations.c.id > after_id)
        .order_by(seat_observations.c.id)
        .limit(max(1, min(limit, MAX_SIGHTINGS_PAGE)))
    )
    async with _tx(db) as conn:
        rows = (await conn.execute(query)).all()
    return [
        (
            int(r.id),
            SeatSighting(
                match_id=r.match_id,
                player=r.player,
                tier=r.tier,
                private=r.private,
                address_hash=bytes(r.address_hash).hex(),
                device_hash=bytes(r.device_hash).hex() if r.device_hash is not None else None,
                at_ms=int(r.observed_at.timestamp() * 1000),
            ),
        )
        for r in rows
    ]


# --- scan cursors ----------------------------------------------------------------------------


async def seat_seen(db: Db, match_id: str, player: str) -> bool:
    async with _tx(db) as conn:
        row = (
            await conn.execute(
                sa.select(seat_observations.c.id).where(
                    seat_observations.c.match_id == match_id, seat_observations.c.player == player
                )
            )
        ).first()
    return row is not None


async def get_cursor(db: Db, name: str) -> str | None:
    async with _tx(db) as conn:
        value = (
            await conn.execute(
                sa.select(scan_cursors.c.position).where(scan_cursors.c.name == name)
            )
        ).scalar_one_or_none()
    return None if value is None else str(value)


async def set_cursor(db: Db, name: str, position: str) -> None:
    async with _tx(db) as conn:
        await conn.execute(
            insert(scan_cursors)
            .values(name=name, position=position)
            .on_conflict_do_update(
                index_elements=["name"], set_={"position": position, "updated_at": sa.func.now()}
            )
        )
