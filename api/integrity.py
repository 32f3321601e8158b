"""The gateway's side of integrity: the device cookie, the seat observations it records, the
background scan and the day's alerts for the daily report.

- `mesa_device`: a long-lived random first-party cookie (HttpOnly) set at sign-in when the
  browser has none; it tells one device from another, nothing more.
- At a player's first socket to a paid match, the gateway stores keyed hashes (HMAC under a
  key derived from the server's secret) of his address (the trusted-proxy-aware one the rate
  limits use) and of his device cookie: the raw values are never stored or logged.
- The background scan runs every `MESA_INTEGRITY_SCAN_INTERVAL_S` in every gateway; the
  advisory lock lets one of them scan at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
from datetime import UTC, date
from typing import Any

from litestar.datastructures import Cookie
from sqlalchemy.ext.asyncio import AsyncEngine

from api.backends import Backends, get_backends
from api.security import address_key, client_address
from integrity import config as integrity_config
from integrity import store
from integrity.models import Alert
from integrity.scan import ContractSources, ScanReport, scan
from services.common.config import Settings
from services.common.logging import get_logger
from services.ledger.contract import MAX_CLOSE_ALERTS, CloseAlert, CloseAlertCount, CloseIntegrity
from services.matchmaking.contract import PlayerTables

log = get_logger()

DEVICE_COOKIE = "mesa_device"
DEVICE_COOKIE_MAX_AGE_S = 2 * 365 * 24 * 3600
_DEVICE_RE = re.compile(r"^[A-Za-z0-9_-]{32,64}$")
# Sockets whose observation is being written, so the task is not collected mid-way.
_PENDING: set[asyncio.Task[None]] = set()
MAX_PENDING = 1000


def device_id(cookies: dict[str, str]) -> str | None:
    value = cookies.get(DEVICE_COOKIE)
    return value if value and _DEVICE_RE.match(value) else None


def device_cookie(settings: Settings, cookies: dict[str, str]) -> Cookie | None:
    """A new `mesa_device` cookie when the browser sent none (or a malformed one)."""
    if device_id(cookies) is not None:
        return None
    return Cookie(
        key=DEVICE_COOKIE,
        value=secrets.token_urlsafe(32),
        httponly=True,
        samesite="lax",
        secure=settings.env == "production",
        path="/",
        max_age=DEVICE_COOKIE_MAX_AGE_S,
    )


async def _observe(
    db: AsyncEngine,
    backends: Backends,
    key: bytes,
    match_id: str,
    player: str,
    tier: str,
    address: str,
    device: str | None,
) -> None:
    try:
        if await store.seat_seen(db, match_id, player):
            return
        private: bool | None = None
        tables = await backends.matchmaking.get(f"/v1/players/{player}/tables", PlayerTables)
        for table in tables.tables:
            if table.match_id == match_id:
                private = table.private
        await store.record_seat(
            db,
            match_id=match_id,
            player=player,
            tier=tier,
            private=private,
            address_hash=store.keyed_hash(key, address_key(address)),
            device_hash=store.keyed_hash(key, device) if device else None,
        )
    except Exception as exc:  # an observation lost is a gap in evidence, not a failed socket
        log.warning("seat_observation_failed", match_id=match_id, error=type(exc).__name__)


def observe_seat(connection: Any, match_id: str, player: str, tier: str) -> None:
    """Note, in the background, where a player sits at a paid match from (free tables and
    anything past `MAX_PENDING` writes in flight are left out)."""
    if tier == "free" or len(_PENDING) >= MAX_PENDING:
        return
    state = connection.app.state
    settings: Settings = state.settings
    task = asyncio.create_task(
        _observe(
            state.db,
            get_backends(state),
            store.seat_key(settings.internal_secret),
            match_id,
            player,
            tier,
            client_address(connection),
            device_id(dict(connection.cookies)),
        )
    )
    _PENDING.add(task)
    task.add_done_callback(_PENDING.discard)


async def run_scan(state: Any) -> ScanReport:
    settings: Settings = state.settings
    backends = get_backends(state)
    return await scan(
        state.db,
        ContractSources(backends.ledger, backends.engine),
        integrity_config.load(settings.integrity_thresholds),
    )


async def _scanner(state: Any, interval_s: int) -> None:
    while True:
        await asyncio.sleep(interval_s)
        try:
            report = await run_scan(state)
            if report.ran:
                log.info(
                    "integrity_scan", **{k: getattr(report, k) for k in report.__struct_fields__}
                )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # try again next interval
            log.warning("integrity_scan_failed", error=type(exc).__name__, detail=str(exc)[:200])


async def start_scanner(app: Any) -> None:
    settings: Settings = app.state.settings
    integrity_config.load(settings.integrity_thresholds)  # a bad threshold stops the start
    if settings.integrity_scan_interval_s > 0:
        app.state.integrity_scanner = asyncio.create_task(
            _scanner(app.state, settings.integrity_scan_interval_s)
        )


async def stop_scanner(app: Any) -> None:
    task: asyncio.Task[None] | None = app.state.get("integrity_scanner")
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def alerts_of_day(db: AsyncEngine, day: date) -> list[Alert]:
    """The integrity alerts raised on one UTC day, for the daily report."""
    return await store.alerts_of_day(db, day)


SCORE_DECIMALS = 4


def close_alert(alert: Alert) -> CloseAlert:
    """An alert as the daily report lists it: what was raised, not how it was handled (its
    status may change after the close; the report does not)."""
    return CloseAlert(
        id=alert.id,
        kind=alert.kind,
        player=alert.player,
        counterpart=alert.counterpart,
        score=f"{round(alert.score, SCORE_DECIMALS):.{SCORE_DECIMALS}f}",
        raised_at=alert.created_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
    )


async def close_summary(db: AsyncEngine, day: date) -> CloseIntegrity:
    """The day's alerts for the ledger's daily close, listed and counted in one snapshot."""
    async with db.connect() as conn:
        conn = await conn.execution_options(isolation_level="REPEATABLE READ")
        async with conn.begin():
            listed = await store.alerts_of_day(conn, day, MAX_CLOSE_ALERTS)
            counts = await store.kinds_of_day(conn, day)
    return CloseIntegrity(
        alerts=[close_alert(a) for a in listed],
        by_kind=[CloseAlertCount(kind=k, count=counts[k]) for k in sorted(counts)],
        truncated=max(0, sum(counts.values()) - len(listed)),
    )
