"""The integrity component's Structs: alerts as other components raise and read them, and the
histories the detectors read (built by the scan from the ledger's and engine's contracts).

Times in histories are UTC milliseconds since the epoch (`*_ms`); money is integer cents with
its currency.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec

MAX_EVIDENCE = 200
MAX_FIGURES = 40

PlayerId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.@:-]{1,64}$")]
# An alert's kind: a detector's name (`pair_flow`, `structuring`, `deliberate_losing`, ...).
AlertKind = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9_]{0,39}$")]
# What a piece of evidence is: `match`, `deal`, `entry` (a ledger entry id), `flow` (a pair's
# flow, ref `A>B:CUR`), `seat` (a seat observation), `report` (a player report), ...
EvidenceKind = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9_]{0,31}$")]
DedupKey = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
Figure = int | float | str | bool | None


class EvidenceRef(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    kind: EvidenceKind
    ref: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    # a few readable facts kept with the reference (amount, time, tier); at most 4 KB
    detail: dict[str, Figure] = {}


class NewAlert(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An alert as a detector raises it.

    `dedup_key` names the suspicion, not the scan: raising the same key again updates the
    alert's score, figures and evidence while it is open, and changes nothing once it is
    closed. A detector that watches a recurring condition puts its period in the key
    (`pair_flow:USD:alice:bob:2026-12`), so a new period can raise a new alert.
    """

    kind: AlertKind
    player: PlayerId
    dedup_key: DedupKey
    score: float
    # the figures that triggered it, with the thresholds they crossed
    figures: Annotated[dict[str, Figure], msgspec.Meta(max_length=MAX_FIGURES)]
    evidence: Annotated[list[EvidenceRef], msgspec.Meta(max_length=MAX_EVIDENCE)] = []
    counterpart: PlayerId | None = None


class Raised(msgspec.Struct, frozen=True):
    id: int
    created: bool  # false: an alert with this dedup key existed (updated if open)


class Alert(msgspec.Struct, frozen=True):
    id: int
    kind: str
    player: str
    counterpart: str | None
    score: float
    figures: dict[str, Any]
    dedup_key: str
    status: Literal["open", "closed"]
    resolution: Literal["dismissed", "actioned"] | None
    close_reason: str | None
    closed_by: str | None
    created_at: datetime
    updated_at: datetime
    closed_at: datetime | None


class Evidence(msgspec.Struct, frozen=True):
    kind: str
    ref: str
    detail: dict[str, Any]


class AlertPage(msgspec.Struct, frozen=True):
    alerts: list[Alert]
    next: int | None  # the `before` of the next (older) page; null on the last


class WithdrawalHold(msgspec.Struct, frozen=True):
    id: int
    player: str
    alert_id: int | None
    placed_by: str
    reason: str
    placed_at: datetime
    released_by: str | None
    release_reason: str | None
    released_at: datetime | None


# --- histories -----------------------------------------------------------------------------


class SeatResult(msgspec.Struct, frozen=True):
    player: str
    stake: int
    payout: int  # what the settlement paid this seat (0 for a loser)


class PotRecord(msgspec.Struct, frozen=True):
    """A settled match's money: who staked what and who was paid what."""

    match_id: str
    tier: str
    variant: str
    currency: str
    closed_at_ms: int
    seats: list[SeatResult]
    private: bool | None = None  # from the seat observations, when the gateway saw the seats


class CashierMove(msgspec.Struct, frozen=True):
    entry_id: int
    kind: Literal["deposit", "withdrawal"]
    player: str
    amount: int  # positive cents
    currency: str
    at_ms: int


class ActionTiming(msgspec.Struct, frozen=True):
    """How long a player took over one action of his own (bots and timeouts excluded)."""

    match_id: str
    player: str
    delta_ms: int
    at_ms: int


class SeatSighting(msgspec.Struct, frozen=True):
    """A seat at a paid match with the keyed hashes (hex) of its address and device."""

    match_id: str
    player: str
    tier: str
    private: bool | None
    address_hash: str
    device_hash: str | None
    at_ms: int


class History(msgspec.Struct, frozen=True):
    pots: list[PotRecord] = []
    moves: list[CashierMove] = []
    timings: list[ActionTiming] = []
    sightings: list[SeatSighting] = []
