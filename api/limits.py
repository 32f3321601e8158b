"""Responsible play: deposit and loss limits, session reminders, cool-off (schema `gateway`).

A player sets daily, weekly and monthly deposit limits and loss limits, in cents. Each counts
over a rolling window (the last 24 hours, 7 days, 30 days) ending now, so no calendar edge
lets a day's limit be spent twice in a few minutes. A lower limit (or a first one) applies at
once; a higher one, or a removal, waits 24 hours by the database's clock (`pending_at`), and
the player sees both. The figures are the ledger's (`GET /v1/players/{player}/activity`):
deposits into his wallet, and his net loss at the tables (stakes held minus payouts, refunds
and released holds), counting a stake about to be held as lost.

A cool-off (24 hours to 6 weeks) closes paid tables and deposits until it ends; free tables
stay open. It cannot be shortened or cancelled, only extended.

The checks live here and are called by `api.eligibility.check_may_sit` (a paid seat) and the
cashier (api/cashier.py); `limits_of` is the plain read the player's and staff screens show.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Literal

import msgspec
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from api.backends import Backends, call
from api.schema import LIMIT_NAMES, MAX_LIMIT_CENTS, REMINDER_MINUTES
from services.common.errors import ServiceError
from services.common.http import InternalClient
from services.ledger.contract import PlayerActivity

# Limits count in the platform's currency: the ledger keeps USD wallets.
CURRENCY = "USD"
Window = Literal["day", "week", "month"]
WINDOWS: dict[Window, timedelta] = {
    "day": timedelta(days=1),
    "week": timedelta(days=7),
    "month": timedelta(days=30),
}
INCREASE_DELAY = timedelta(hours=24)
COOL_OFF_MIN_HOURS = 24
COOL_OFF_MAX_HOURS = 6 * 7 * 24


class Limit(msgspec.Struct, frozen=True):
    """One limit: `cents` applies now (None: no limit); a pending change (`pending_at` set)
    makes it `pending_cents` (None: no limit) from that time."""

    cents: int | None = None
    pending_cents: int | None = None
    pending_at: datetime | None = None


class PlayerLimits(msgspec.Struct, frozen=True):
    player: str
    currency: str
    windows: str  # how the limits count: "rolling" (last 24 h, 7 days, 30 days)
    deposit_day: Limit
    deposit_week: Limit
    deposit_month: Limit
    loss_day: Limit
    loss_week: Limit
    loss_month: Limit
    reminder_min: int  # 0: no session reminders
    cooling_off_until: datetime | None
    # the seating preference kept in the same row (api.player_prefs)
    random_opponents_only: bool = False

    def limit(self, name: str) -> Limit:
        found: Limit = getattr(self, name)
        return found


def _limit_sql(table: str = "") -> str:
    """The limit in force: a pending change whose time has come is the limit."""
    p = table + "." if table else ""
    return (
        f"CASE WHEN {p}pending_at IS NOT NULL AND {p}pending_at <= now() "
        f"THEN {p}pending_cents ELSE {p}cents END"
    )


_READ_LIMITS = text(
    f"SELECT name, {_limit_sql()} AS cents, "  # noqa: S608 (fixed SQL)
    "CASE WHEN pending_at > now() THEN pending_cents END AS pending_cents, "
    "CASE WHEN pending_at > now() THEN pending_at END AS pending_at "
    "FROM gateway.play_limits WHERE player = :player"
)
_READ_SETTINGS = text(
    "SELECT reminder_min, CASE WHEN cooling_off_until > now() THEN cooling_off_until END "
    "AS cooling_off_until, random_opponents_only FROM gateway.play_settings "
    "WHERE player = :player"
)


async def _read(conn: AsyncConnection, player: str) -> PlayerLimits:
    limits = {name: Limit() for name in LIMIT_NAMES}
    for row in (await conn.execute(_READ_LIMITS, {"player": player})).all():
        limits[row.name] = Limit(row.cents, row.pending_cents, row.pending_at)
    settings = (await conn.execute(_READ_SETTINGS, {"player": player})).first()
    return PlayerLimits(
        player=player,
        currency=CURRENCY,
        windows="rolling",
        reminder_min=0 if settings is None else int(settings.reminder_min),
        cooling_off_until=None if settings is None else settings.cooling_off_until,
        random_opponents_only=settings is not None and bool(settings.random_opponents_only),
        **limits,
    )


async def limits_of(db: AsyncEngine | AsyncConnection, player: str) -> PlayerLimits:
    """A player's limits, reminder and cool-off as they apply now (a plain read; a player who
    never set any has none)."""
    if isinstance(db, AsyncConnection):
        return await _read(db, player)
    async with db.connect() as conn:
        return await _read(conn, player)


# A new value for one limit, in one statement: a decrease (or a first limit) applies at once
# and drops any pending change; an increase or a removal is pending for INCREASE_DELAY (asking
# for the same pending value again keeps its time: the wait does not restart).
_EFFECTIVE = _limit_sql("l")
_NEW = "CAST(:cents AS bigint)"
_DECREASE = f"({_NEW} IS NOT NULL AND ({_EFFECTIVE} IS NULL OR {_NEW} <= {_EFFECTIVE}))"
_SET_LIMIT = text(
    "INSERT INTO gateway.play_limits AS l (player, name, cents) "  # noqa: S608 (fixed SQL)
    f"VALUES (:player, :name, {_NEW}) "
    "ON CONFLICT (player, name) DO UPDATE SET "
    f"cents = CASE WHEN {_DECREASE} THEN {_NEW} ELSE {_EFFECTIVE} END, "
    f"pending_cents = CASE WHEN {_DECREASE} THEN NULL ELSE {_NEW} END, "
    f"pending_at = CASE WHEN {_DECREASE} THEN NULL "
    f"  WHEN {_NEW} IS NOT DISTINCT FROM {_EFFECTIVE} THEN NULL "
    f"  WHEN l.pending_at > now() AND l.pending_cents IS NOT DISTINCT FROM {_NEW} "
    "    THEN l.pending_at "
    f"  ELSE now() + make_interval(secs => {int(INCREASE_DELAY.total_seconds())}) END, "
    "updated_at = now()"
)


def _check_cents(name: str, cents: int | None) -> None:
    if name not in LIMIT_NAMES:
        raise ServiceError(400, "invalid_limit", f"no limit named {name}")
    if cents is not None and not 1 <= cents <= MAX_LIMIT_CENTS:
        raise ServiceError(
            400, "invalid_limit", f"{name} must be 1 to {MAX_LIMIT_CENTS} cents, or null"
        )


async def set_limits(
    conn: AsyncConnection,
    player: str,
    changes: Mapping[str, int | None],
    reminder_min: int | None = None,
) -> PlayerLimits:
    """Set some limits (None: remove) and the reminder interval; the others stay as they are.

    `conn` is a transaction holding the player's cashier lock (`api.cashier.player_locked`):
    a deposit in flight for him posts before a lower limit or after it, never past it."""
    for name, cents in changes.items():
        _check_cents(name, cents)
    if reminder_min is not None and reminder_min not in REMINDER_MINUTES:
        raise ServiceError(400, "invalid_reminder", "reminder_min must be 0, 30, 60 or 120")
    for name, cents in sorted(changes.items()):
        await conn.execute(_SET_LIMIT, {"player": player, "name": name, "cents": cents})
    if reminder_min is not None:
        await conn.execute(
            text(
                "INSERT INTO gateway.play_settings AS s (player, reminder_min) "
                "VALUES (:player, :minutes) ON CONFLICT (player) DO UPDATE "
                "SET reminder_min = :minutes, updated_at = now()"
            ),
            {"player": player, "minutes": reminder_min},
        )
    return await _read(conn, player)


async def start_cool_off(conn: AsyncConnection, player: str, hours: int) -> PlayerLimits:
    """Cool off for `hours` from now (database clock). A cool-off under way may be extended,
    never shortened: asking for an earlier end is refused (409 `cool_off_active`).

    `conn` is a transaction holding the player's cashier lock (`api.cashier.player_locked`),
    so a deposit waiting on that lock reads the cool-off once it commits."""
    if not COOL_OFF_MIN_HOURS <= hours <= COOL_OFF_MAX_HOURS:
        raise ServiceError(
            400,
            "invalid_cool_off",
            f"a cool-off lasts {COOL_OFF_MIN_HOURS} to {COOL_OFF_MAX_HOURS} hours",
        )
    row = (
        await conn.execute(
            text(
                "INSERT INTO gateway.play_settings AS s (player, cooling_off_until) "
                "VALUES (:player, now() + make_interval(hours => :hours)) "
                "ON CONFLICT (player) DO UPDATE "
                "SET cooling_off_until = excluded.cooling_off_until, updated_at = now() "
                "WHERE s.cooling_off_until IS NULL "
                "   OR s.cooling_off_until <= excluded.cooling_off_until "
                "RETURNING cooling_off_until"
            ),
            {"player": player, "hours": hours},
        )
    ).first()
    current = await _read(conn, player)
    if row is None:
        until = current.cooling_off_until
        raise ServiceError(
            409,
            "cool_off_active",
            f"you are cooling off until {_iso(until)}; it cannot be shortened",
        )
    return current


def _iso(moment: datetime | None) -> str:
    if moment is None:
        return "-"
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def cooling_off_detail(until: datetime) -> str:
    return f"you are cooling off from paid tables and deposits until {_iso(until)}"


async def activity(
    ledger: InternalClient, player: str, sinces: list[datetime]
) -> PlayerActivity | None:
    """The ledger's figures for `player` since each time (None: he has no wallet yet)."""
    params = {"since": [_iso_us(s) for s in sinces]}
    try:
        return await call(
            "ledger", ledger.get(f"/v1/players/{player}/activity", PlayerActivity, params=params)
        )
    except ServiceError as exc:
        if exc.status == 404:
            return None
        raise


def _iso_us(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


async def _headroom(
    ledger: InternalClient, limits: PlayerLimits, kind: Literal["deposit", "loss"]
) -> tuple[int, Window] | None:
    """The least a player may still deposit (or lose) under his `kind` limits, and the window
    that allows the least; None without such limits."""
    set_windows: list[tuple[Window, int]] = []
    for window in WINDOWS:
        cents = limits.limit(f"{kind}_{window}").cents
        if cents is not None:
            set_windows.append((window, cents))
    if not set_windows:
        return None
    now = datetime.now(UTC)
    found = await activity(ledger, limits.player, [now - WINDOWS[w] for w, _ in set_windows])
    best: tuple[int, Window] | None = None
    for n, (window, cents) in enumerate(set_windows):
        used = 0
        if found is not None:
            figures = found.windows[n]
            used = figures.deposits if kind == "deposit" else figures.net_loss
        left = max(cents - max(used, 0), 0)
        if best is None or left < best[0]:
            best = (left, window)
    return best


_WINDOW_WORD = {"day": "daily", "week": "weekly", "month": "monthly"}


async def seat_refusal(
    backends: Backends, limits: PlayerLimits, stake_cents: int | None
) -> tuple[str, str] | None:
    """Why the player of `limits` (as `limits_of` read them) may not take a paid seat now
    (code, detail), or None: cooling off, or a stake that could take him past a loss limit.
    `stake_cents` None (a private table joined by code, whose tier only matchmaking knows)
    counts the largest stake offered."""
    if limits.cooling_off_until is not None:
        return "cooling_off", cooling_off_detail(limits.cooling_off_until)
    if all(limits.limit(f"loss_{w}").cents is None for w in WINDOWS):
        return None
    if stake_cents is None:
        kinds = await backends.kinds()
        stake_cents = max(
            (t.stake_cents for k in kinds.kinds for t in k.tiers if t.tier != "free"), default=0
        )
    room = await _headroom(backends.ledger, limits, "loss")
    if room is not None and stake_cents > room[0]:
        left, window = room
        return (
            "loss_limit",
            f"this stake ({stake_cents} cents) could take you past your {_WINDOW_WORD[window]} "
            f"loss limit: {left} cents left",
        )
    return None


async def check_deposit(
    db: AsyncEngine | AsyncConnection, ledger: InternalClient, player: str, amount: int
) -> None:
    """Refuse (403) a deposit while the player cools off or beyond his deposit limits; the
    detail names the allowance left, to the cent. The cashier calls it under the player's
    cashier lock (api/cashier.py): no other deposit for him posts between this check and
    the posting it allows."""
    limits = await limits_of(db, player)
    if limits.cooling_off_until is not None:
        raise ServiceError(403, "cooling_off", cooling_off_detail(limits.cooling_off_until))
    room = await _headroom(ledger, limits, "deposit")
    if room is not None and amount > room[0]:
        left, window = room
        raise ServiceError(
            403,
            "deposit_limit",
            f"beyond the player's {_WINDOW_WORD[window]} deposit limit: "
            f"{left} cents may still be deposited",
            refs={"left_cents": [str(left)], "currency": [CURRENCY], "window": [window]},
        )


def next_reminder_at(started_at: datetime, interval_min: int, now: datetime) -> datetime | None:
    """When the next session reminder is due: the first whole interval since the session
    began that is after `now` (None with reminders off)."""
    if interval_min <= 0:
        return None
    step = timedelta(minutes=interval_min)
    elapsed = max(now - started_at, timedelta(0))
    return started_at + step * (elapsed // step + 1)
