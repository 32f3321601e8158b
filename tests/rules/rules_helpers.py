"""Helpers for the rules tests: replay through the CLI, and hand positions built directly."""

from __future__ import annotations

import io
import json
import sys
from typing import Any

from msgspec.structs import replace

from services.engine import rules as R
from services.engine.rules import cli
from services.engine.rules.tiles import HIGH, LOW, parse_tile


def run_replay(tmp_path, scenario: Any) -> tuple[int, Any, str]:
    """Run `mesa rules replay FILE` in-process; return (status, stdout JSON or text, stderr)."""
    path = tmp_path / "scenario.json"
    path.write_text(scenario if isinstance(scenario, str) else json.dumps(scenario))
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        rc = cli.main(["replay", str(path)])
    finally:
        sys.stdout, sys.stderr = old
    text = out.getvalue()
    return rc, (json.loads(text) if rc == 0 else text), err.getvalue()


def T(text: str) -> int:
    return parse_tile(text)[0]


def tiles(texts: list[str]) -> list[int]:
    return [T(x) for x in texts]


def fill_deal(rs: R.RuleSet, partial: list[list[str]]) -> tuple[list[list[str]], list[str]]:
    """Complete partially given hands (in order) with the remaining tiles, then the stock."""
    used = {T(x) for h in partial for x in h}
    rest = [t for t in R.tile_set(rs.max_pip) if t not in used]
    hands = []
    for s in range(rs.seats):
        h = list(partial[s]) if s < len(partial) else []
        while len(h) < rs.hand_size:
            h.append(R.tile_str(rest.pop(0)))
        hands.append(h)
    return hands, [R.tile_str(t) for t in rest]


def position(
    variant: str,
    options: dict[str, Any],
    hands: list[list[str]],
    left: int,
    right: int,
    turn: int,
    *,
    opener: int = 0,
    plays: int = 6,
    passes: int = 0,
    last_player: int | None = None,
    scores: list[int] | None = None,
    stock: list[str] | None = None,
    first_hand: bool = False,
) -> R.HandState:
    """A mid-hand position: the given hands and ends, `turn` to play (tiles not in any hand are
    on the table or, if `stock` is given, in the stock)."""
    rs = R.make_ruleset(variant, options)
    match = R.new_match(rs)
    if scores is not None:
        match = replace(match, scores=tuple(scores))
    if not first_hand:
        match = replace(match, hands_played=1)
    full_hands, full_stock = fill_deal(rs, [])
    st = R.start_hand(match, [tiles(h) for h in full_hands], tiles(full_stock), opener=opener)
    masks = tuple(sum(1 << T(x) for x in h) for h in hands)
    stock_ids = tuple(tiles(stock or []))
    live = 0
    for m in masks:
        live |= m
    if rs.draws:
        for t in stock_ids:
            live |= 1 << t
    return replace(
        st,
        hands=masks,
        stock=stock_ids,
        left=left,
        right=right,
        turn=turn,
        opener=opener,
        plays=plays,
        passes=passes,
        last_player=(turn - 1) % rs.seats if last_player is None else last_player,
        live=live,
    )


def play(state: R.HandState, text: str, end: str | None = None):
    t = T(text)
    e = R.LEFT if end in (None, "left") else R.RIGHT
    if end is None and state.left >= 0:
        if not (LOW[t] == state.left or HIGH[t] == state.left):
            e = R.RIGHT
    return R.apply(state, R.Play(t, e))


def kinds(events) -> list[tuple]:
    out = []
    for e in events:
        if isinstance(e, R.BonusEvent):
            out.append(("bonus", e.kind, e.side, e.points, e.counted))
        elif isinstance(e, R.PassEvent):
            out.append(("pass", e.seat))
        elif isinstance(e, R.PlayEvent):
            out.append(("play", e.seat))
        elif isinstance(e, R.DrawEvent):
            out.append(("draw", e.seat))
    return out
