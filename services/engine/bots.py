"""CPU players: legal, sensible moves from what their own seat may see (never hidden data).

Heuristics, in order of weight: block numbers the opponents showed they lack (they passed on
them), keep the numbers the bot holds many of at the open ends, and get rid of heavy tiles and
doubles early. Deterministic: the same view gives the same move.
"""

from __future__ import annotations

from services.engine import rules as R
from services.engine.rules.tiles import HIGH, LOW, PIPS


def _lacks(view: R.SeatView, rules: R.RuleSet) -> set[int]:
    """Numbers some opponent passed on (so it holds none of them)."""
    me = rules.side_of(view.seat)
    left = right = -1
    lacks: set[int] = set()
    for e in view.events:
        if isinstance(e, R.PlayEvent):
            left, right = e.left, e.right
        elif isinstance(e, R.PassEvent) and rules.side_of(e.seat) != me and left >= 0:
            lacks.update((left, right))
    return lacks


def _exposed(view: R.SeatView, play: R.Play) -> tuple[int, int]:
    """The two open ends after `play`."""
    a, b = LOW[play.tile], HIGH[play.tile]
    if view.left < 0:
        return a, b
    if play.end == R.RIGHT:
        keep, end = view.left, view.right
    else:
        keep, end = view.right, view.left
    other = b if a == end else a
    return keep, other


def choose_action(view: R.SeatView, rules: R.RuleSet, legal: tuple[R.Action, ...]) -> R.Action:
    """The bot's pick among `legal` (non-empty)."""
    if not legal:
        raise ValueError("a bot needs at least one legal action")
    # A house seat never asks for a redeal: the house must not void a deal for what it holds
    # (docs/fairness.md 4.3). Redeals are the human players' right.
    legal = tuple(a for a in legal if not isinstance(a, R.RequestRedeal)) or legal
    chooses = [a for a in legal if isinstance(a, R.ChooseOpener)]
    if chooses:
        pips = sum(PIPS[t] for t in view.hand)
        doubles = sum(1 for t in view.hand if LOW[t] == HIGH[t])
        strong = doubles >= 2 or pips >= len(view.hand) * rules.max_pip
        return next(a for a in chooses if a.salgo == strong)
    counts = [0] * (rules.max_pip + 1)
    for t in view.hand:
        counts[LOW[t]] += 1
        if HIGH[t] != LOW[t]:
            counts[HIGH[t]] += 1
    lacks = _lacks(view, rules)
    best: R.Action = legal[0]
    best_score = -(10**9)
    for a in legal:
        if not isinstance(a, R.Play):
            continue
        t = a.tile
        ends = _exposed(view, a)
        score = PIPS[t] * 2 + (3 if LOW[t] == HIGH[t] else 0)
        for n in set(ends):
            score += 3 * (counts[n] - (1 if n in (LOW[t], HIGH[t]) else 0))
            if n in lacks:
                score += 6
        if score > best_score:
            best, best_score = a, score
    return best
