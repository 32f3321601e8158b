"""Matchmaking settings: which kinds are offered, reservation lifetimes and every limit.

`load_config(settings)` reads `MESA_MATCHMAKING_CONFIG`, else `<var_dir>/matchmaking.json` when it
exists (a JSON object with
any of the fields below); otherwise the defaults apply. Unknown fields are refused.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from services.common.config import ConfigError, Settings
from services.matchmaking.kinds import CATALOGUE, TIERS


class MatchmakingConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    # kind -> tiers offered; None means every kind at every tier.
    offered: dict[str, list[str]] | None = None
    # A seated reservation without a heartbeat for this long is released (before the start).
    reservation_ttl_ms: int = 60_000
    # After a reported disconnect the seat is kept at most this long.
    disconnect_grace_ms: int = 30_000
    # A reservation stuck 'pending' or 'releasing' (crash mid-request) is repaired after this.
    repair_after_ms: int = 5_000
    # Background sweep period; 0 disables the background task (tests drive `sweep_once`).
    sweep_interval_ms: int = 500
    # Rows handled per sweep step (expiry, repairs), so a backlog never becomes one huge batch.
    sweep_batch_size: int = 200
    lobby_limit: int = 100
    # Live seats one player may hold across tables at once.
    max_tables_per_player: int = 8
    # Candidate tables quick join inspects before opening a new one.
    quick_join_candidates: int = 5
    # Attempts at a database transaction that lost a race (unique violation, deadlock).
    tx_attempts: int = 8
    # Immediate attempts at the engine's create-match before leaving it to the sweeper.
    engine_attempts: int = 3
    engine_retry_ms: int = 50
    invite_code_length: int = 6
    # Idempotency records older than this are purged (a retry after it is a new request).
    request_retention_ms: int = 86_400_000

    def offered_tiers(self, kind: str) -> list[str]:
        # Absent a configuration, every kind at every tier (no kind -> tiers table built per
        # call: every join asks this).
        if self.offered is None:
            return list(TIERS) if kind in CATALOGUE else []
        return list(self.offered.get(kind, []))

    def validate(self) -> MatchmakingConfig:
        if self.offered is not None:
            for kind, tiers in self.offered.items():
                if kind not in CATALOGUE:
                    raise ConfigError(f"matchmaking.offered: unknown kind {kind!r}")
                for tier in tiers:
                    if tier not in TIERS:
                        raise ConfigError(f"matchmaking.offered[{kind}]: unknown tier {tier!r}")
        for name in (
            "reservation_ttl_ms",
            "disconnect_grace_ms",
            "repair_after_ms",
            "request_retention_ms",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(f"matchmaking.{name} must be positive")
        if self.sweep_interval_ms < 0 or not 1 <= self.sweep_batch_size <= 10_000:
            raise ConfigError("matchmaking: sweep_interval_ms >= 0, sweep_batch_size 1..10000")
        if not 1 <= self.lobby_limit <= 1000 or not 1 <= self.max_tables_per_player <= 100:
            raise ConfigError("matchmaking: lobby_limit 1..1000, max_tables_per_player 1..100")
        if not 1 <= self.quick_join_candidates <= 50 or not 1 <= self.tx_attempts <= 50:
            raise ConfigError("matchmaking: quick_join_candidates and tx_attempts 1..50")
        if not 4 <= self.invite_code_length <= 16:
            raise ConfigError("matchmaking.invite_code_length must be 4..16")
        return self


def load_config(settings: Settings) -> MatchmakingConfig:
    path = settings.matchmaking_config_file or Path(settings.var_dir) / "matchmaking.json"
    if settings.matchmaking_config_file is not None and not path.exists():
        raise ConfigError(f"MESA_MATCHMAKING_CONFIG: no file {path}")
    if not path.exists():
        return MatchmakingConfig().validate()
    try:
        return msgspec.json.decode(path.read_bytes(), type=MatchmakingConfig).validate()
    except msgspec.DecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
