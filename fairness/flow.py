"""The fairness flow of one deal, as the engine drives it (no I/O: the caller logs and sends).

1. `open_deal` draws a fresh server seed and returns the signed commitment (append it to the
   log with `LogStore.append`, publish it) before any player seed is accepted.
2. Drive a `SeedRound` (commit, open_reveals, reveal, close).
3. `make_deal` lays out the hands from the server seed, the deal id and the seeds.
4. When the hand ends, `close_deal` (or `void_deal`) gives the signed result/void record to log;
   `build_transcript` assembles the published transcript with the log's proof and checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fairness.commitments import (
    SeedRoundResult,
    commitment_record,
    result_record,
    seed_commitments_record,
    server_seed_commitment,
    sign_record,
    void_record,
)
from fairness.keys import OperatorKey
from fairness.seeds import new_server_seed
from fairness.shuffle import Deal, cuban_draw, deal, pares_o_nones


@dataclass(frozen=True, slots=True)
class OpenDeal:
    deal_id: str
    server_seed: bytes  # secret until the hand ends
    commitment: dict[str, Any]  # signed envelope: log it and publish it

    @property
    def record(self) -> dict[str, Any]:
        record: dict[str, Any] = self.commitment["record"]
        return record


def open_deal(
    key: OperatorKey,
    *,
    deal_id: str,
    table_id: str,
    variant: str,
    options: Mapping[str, Any],
    tile_set: int,
    hand_size: int,
    seats: Sequence[str | None],
    now: datetime,
    purpose: str = "deal",
) -> OpenDeal:
    """Fresh 32-byte server seed (never reused; redeals get a new deal id and seed)."""
    seed = new_server_seed()
    record = commitment_record(
        deal_id=deal_id,
        table_id=table_id,
        variant=variant,
        options=options,
        tile_set=tile_set,
        hand_size=hand_size,
        seats=seats,
        commitment=server_seed_commitment(seed),
        time=now,
        signing_key_id=key.key_id,
        purpose=purpose,
    )
    return OpenDeal(deal_id, seed, sign_record(key.private_key, record))


def make_deal(opened: OpenDeal, seeds: SeedRoundResult) -> Deal:
    r = opened.record
    return deal(opened.server_seed, opened.deal_id, seeds.seeds, r["tile_set"], r["hand_size"])


def close_deal(
    key: OperatorKey,
    opened: OpenDeal,
    seeds: SeedRoundResult,
    moves: Sequence[Mapping[str, Any]],
    result: Mapping[str, Any] | None,
    now: datetime,
) -> dict[str, Any]:
    record = result_record(
        deal_id=opened.deal_id,
        commitment=opened.record["commitment"],
        server_seed=opened.server_seed,
        seeds=seeds.seeds,
        moves=moves,
        result=result,
        time=now,
        signing_key_id=key.key_id,
    )
    return sign_record(key.private_key, record)


def void_deal(
    key: OperatorKey,
    opened: OpenDeal,
    reason: str,
    now: datetime,
    reveal_seed: bool = True,
    seeds: SeedRoundResult | None = None,
) -> dict[str, Any]:
    """The signed void record; with the round's `seeds` (once they are known) the revealed
    deal is logged in it."""
    dealt: dict[str, Any] | None = None
    if seeds is not None and reveal_seed and opened.record.get("purpose", "deal") == "deal":
        hands, stock = make_deal(opened, seeds).as_strings()
        dealt = {"hands": hands, "stock": stock}
    record = void_record(
        deal_id=opened.deal_id,
        commitment=opened.record["commitment"],
        reason=reason,
        server_seed=opened.server_seed if reveal_seed else None,
        time=now,
        signing_key_id=key.key_id,
        seeds=None if seeds is None else list(seeds.seeds),
        deal=dealt,
    )
    return sign_record(key.private_key, record)


def log_seed_commitments(
    key: OperatorKey,
    opened: OpenDeal,
    seats: Sequence[tuple[str, str | None]],
    now: datetime,
) -> dict[str, Any]:
    """The signed record of every seat's seed commitment (or its absence): the seats'
    receipt, logged before any seed is revealed."""
    record = seed_commitments_record(
        deal_id=opened.deal_id,
        commitment=opened.record["commitment"],
        seats=seats,
        time=now,
        signing_key_id=key.key_id,
    )
    return sign_record(key.private_key, record)


DRAW_PURPOSES = ("cuban_draw", "pares_o_nones")


def draw_outcome(
    purpose: str, server_seed: bytes | str, deal_id: str, seeds: Sequence[str]
) -> dict[str, Any]:
    """The `result` of an opening draw (its result record and transcript): the winning side
    and the rounds drawn (Cuban draw) or the fingers shown (pares o nones)."""
    if purpose == "cuban_draw":
        side, rounds = cuban_draw(server_seed, deal_id, seeds)
        return {"opening_side": side, "rounds": [[list(t0), list(t1)] for t0, t1 in rounds]}
    if purpose == "pares_o_nones":
        side, fingers = pares_o_nones(server_seed, deal_id, seeds)
        return {"opening_side": side, "fingers": list(fingers)}
    raise ValueError(f"{purpose!r} is not an opening draw")
