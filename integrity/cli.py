"""`mesa integrity scan [--since ISO]`: one integrity scan now (the gateways also scan every
`MESA_INTEGRITY_SCAN_INTERVAL_S`; the advisory lock lets one scan at a time). `--since` reads
from that time instead of the lookback window and scans even when nothing is new.

`mesa integrity day YYYY-MM-DD`: the alerts raised that UTC day, one JSON object a line.

Exit codes: 0 done (or skipped: another scan running), 1 a service refused or failed,
2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys

import msgspec

from integrity import config as integrity_config
from integrity import store
from integrity.scan import ContractSources, scan
from services.common.auth import INTEGRITY
from services.common.config import ConfigError, load_settings
from services.common.db import create_engine
from services.common.http import InternalClient, RemoteError, ServiceUnavailable


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mesa integrity", description="integrity alerts")
    sub = p.add_subparsers(dest="action", required=True)
    scanning = sub.add_parser("scan", help="run the detectors now")
    scanning.add_argument("--since", help="ISO 8601 time to read from (default: the lookback)")
    day = sub.add_parser("day", help="the alerts raised on one UTC day")
    day.add_argument("day", help="YYYY-MM-DD")
    return p


def _since(raw: str | None) -> dt.datetime | None:
    if raw is None:
        return None
    value = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


async def _run(args: argparse.Namespace) -> int:
    settings = load_settings()
    db = create_engine(settings.database_url, application_name="mesa-integrity", pool_size=2)
    try:
        if args.action == "day":
            for alert in await store.alerts_of_day(db, dt.date.fromisoformat(args.day)):
                print(msgspec.json.encode(alert).decode())
            return 0
        ledger = InternalClient.of("ledger", settings, INTEGRITY, timeout_s=60.0)
        engine = InternalClient.of("engine", settings, INTEGRITY, timeout_s=60.0)
        try:
            report = await scan(
                db,
                ContractSources(ledger, engine),
                integrity_config.load(settings.integrity_thresholds),
                since=_since(args.since),
            )
        finally:
            await ledger.aclose()
            await engine.aclose()
        print(msgspec.json.encode(report).decode())
        return 0
    finally:
        await db.dispose()


def main(argv: list[str]) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        return asyncio.run(_run(args))
    except (ConfigError, ValueError) as exc:
        print(f"mesa integrity: {exc}", file=sys.stderr)
        return 2
    except (RemoteError, ServiceUnavailable) as exc:
        print(f"mesa integrity: {exc}", file=sys.stderr)
        return 1
