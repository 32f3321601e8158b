"""Every integrity threshold, with its default. `MESA_INTEGRITY_THRESHOLDS` (a JSON object of
these fields) overrides any of them; an unknown field or a bad value fails at start.

The defaults are starting points for a small operator and are meant to be tuned on its own
history: the false-positive rate measured on honest simulated play is in
docs/explanation/integrity.md.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

Cents = Annotated[int, msgspec.Meta(ge=1, le=10**13)]
Count = Annotated[int, msgspec.Meta(ge=1, le=1_000_000)]
Hours = Annotated[int, msgspec.Meta(ge=1, le=24 * 366)]
Share = Annotated[float, msgspec.Meta(gt=0, le=1)]


class IntegrityConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    # How far back each scan looks (the detectors' longest window).
    lookback_h: Hours = 30 * 24

    # Pair flow: what one player won from another over the window, net, per currency, nearly
    # one way (what came back at most `pair_back_share_max` of what went). Opponents at public
    # tables are drawn, not chosen, so a pair met mostly there must pass
    # `pair_public_multiplier` times the threshold.
    pair_flow_cents: Cents = 20_000
    pair_min_matches: Count = 3
    pair_back_share_max: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.25
    pair_public_multiplier: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 5

    # Repeated losing: a player whose losses go mostly to one opponent, who beats him in most
    # of the matches they play together (at public tables, twice `loss_count_min` losses).
    loss_share_min: Share = 0.6
    loss_count_min: Count = 6
    loss_rate_min: Share = 0.8

    # Chain: A deposits, loses to B, and B withdraws, each step within the window; what A
    # passed is at least `chain_share_min` of both A's deposit and B's withdrawal, at private
    # tables or making most of what A lost in that time (`chain_concentration_min`).
    chain_window_h: Hours = 48
    chain_min_cents: Cents = 5_000
    chain_share_min: Share = 0.5
    chain_concentration_min: Share = 0.8

    # Little play: deposits withdrawn after staking less than this share of them.
    turnover_ratio_max: Annotated[float, msgspec.Meta(ge=0, le=100)] = 0.3
    little_play_min_cents: Cents = 10_000

    # Rapid in-and-out: a withdrawal this soon after a deposit of at least this much.
    rapid_minutes: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 120
    rapid_min_cents: Cents = 10_000

    # Structuring: this many deposits in the window, each within `structuring_margin` under
    # the reporting threshold.
    reporting_threshold_cents: Cents = 1_000_000
    structuring_margin: Share = 0.1
    structuring_count: Count = 3
    structuring_window_h: Hours = 7 * 24

    # Steady response times: the coefficient of variation (stdev / mean) of a player's
    # response times below this, over at least this many actions.
    steady_cv_max: Annotated[float, msgspec.Meta(gt=0, le=10)] = 0.15
    steady_min_actions: Count = 60

    # Around the clock: active in at least this many distinct hours of each of this many
    # rolling 24 h periods (days).
    clock_hours_min: Annotated[int, msgspec.Meta(ge=1, le=24)] = 20
    clock_days_min: Annotated[int, msgspec.Meta(ge=1, le=366)] = 2

    # Shared device or address: this many accounts at one paid match from one device/address.
    shared_accounts_min: Annotated[int, msgspec.Meta(ge=2, le=16)] = 2

    # Deliberate losing (integrity/losing.py): at most this many hands of the window are
    # replayed per scan; a player needs `losing_min_opportunities` positions where a gift was
    # avoidable, and gifts `losing_z_alert` standard deviations above chance, to alert.
    losing_max_hands: Annotated[int, msgspec.Meta(ge=1, le=200_000)] = 20_000
    losing_min_opportunities: Count = 12
    losing_z_alert: Annotated[float, msgspec.Meta(gt=0, le=100)] = 4.0


def load(raw_json: str) -> IntegrityConfig:
    """The thresholds from `MESA_INTEGRITY_THRESHOLDS` (empty: the defaults); ValueError with
    msgspec's message (naming the field) on a bad one."""
    if not raw_json.strip():
        return IntegrityConfig()
    try:
        return msgspec.json.decode(raw_json, type=IntegrityConfig)
    except msgspec.ValidationError as exc:
        raise ValueError(f"MESA_INTEGRITY_THRESHOLDS: {exc}") from None
    except msgspec.DecodeError as exc:
        raise ValueError(f"MESA_INTEGRITY_THRESHOLDS is not a JSON object: {exc}") from None
