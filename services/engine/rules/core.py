"""The hand and match machinery: start a hand from a deal, apply actions, read views.

Forced passes and draws are applied eagerly inside `apply` until some seat has a real choice
or the hand ends. Everything here is pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

from collections.abc import Sequence

from msgspec.structs import replace

from services.engine.rules import variants as V
from services.engine.rules.errors import IllegalAction, InvalidDeal
from services.engine.rules.model import (
    LEFT,
    NO_END,
    PHASE_CHOOSE,
    PHASE_OVER,
    PHASE_PLAY,
    PHASE_REDEAL,
    RIGHT,
    Action,
    BonusEvent,
    ChoiceEvent,
    ChooseOpener,
    DrawEvent,
    Event,
    HandResult,
    HandSetup,
    HandState,
    MatchState,
    PassEvent,
    Play,
    PlayEvent,
    RedealEvent,
    RequestRedeal,
    SeatView,
)
from services.engine.rules.tiles import (
    DOUBLES_MASK,
    HIGH,
    LOW,
    MAX_PIP,
    NUM_MASK,
    PIPS,
    TILE_COUNT,
    mask_pips,
    rank,
    tile_set,
    tile_str,
    tiles_of,
)
from services.engine.rules.variants import TRANQUE_LOCK, RuleSet

_PLAY_OPEN = [Play(t, NO_END) for t in range(TILE_COUNT)]
_PLAY_LEFT = [Play(t, LEFT) for t in range(TILE_COUNT)]
_PLAY_RIGHT = [Play(t, RIGHT) for t in range(TILE_COUNT)]


def _plays_by_subset(plays: list[Play]) -> dict[int, tuple[Action, ...]]:
    """A constant table: every subset of the tiles holding one number (a hand ANDed with
    `NUM_MASK[n]`) -> those tiles as plays, ascending. Built once at import, never written."""
    table: dict[int, tuple[Action, ...]] = {0: ()}
    for mask in NUM_MASK:
        sub = (0 - mask) & mask  # subsets of `mask` in increasing order
        while sub:
            if sub not in table:
                top = 1 << (sub.bit_length() - 1)
                table[sub] = table[sub ^ top] + (plays[sub.bit_length() - 1],)
            sub = (sub - mask) & mask
    return table


# Legal plays on one end = _FITS_LEFT[hand & NUM_MASK[left]]: pure lookups, no memo.
_FITS_LEFT = _plays_by_subset(_PLAY_LEFT)
_FITS_RIGHT = _plays_by_subset(_PLAY_RIGHT)
# Tiles by opening rank, highest first (first-hand "highest double, else highest tile").
_BY_RANK = tuple(sorted(range(TILE_COUNT), key=rank, reverse=True))
# _OTHER_HALF[t][n]: the other half of tile t when it holds n, else -1.
_OTHER_HALF = tuple(
    tuple(HIGH[t] if LOW[t] == n else LOW[t] if HIGH[t] == n else -1 for n in range(MAX_PIP + 1))
    for t in range(TILE_COUNT)
)
_PIPS_OF_BIT = {1 << t: PIPS[t] for t in range(TILE_COUNT)}
# Side of each seat, by (pairs, seats): `RuleSet.side_of` as a table.
_SIDES = {
    (pairs, n): tuple(s % 2 if pairs else s for s in range(n))
    for pairs in (False, True)
    for n in range(1, 5)
}


def _sides(rules: RuleSet) -> tuple[int, ...]:
    return _SIDES[rules.pairs, rules.seats]


_FULL_MASK = {p: sum(1 << t for t in tile_set(p)) for p in (6, 9)}


def new_match(rules: RuleSet) -> MatchState:
    """A fresh match: zero scores; the first hand uses the variant's first-hand opening rule."""
    zeros = (0,) * rules.sides
    return MatchState(
        rules=rules,
        scores=zeros,
        hands_played=0,
        next_opener=None,
        next_opening_side=None,
        priority=None,
        first_pass_pending=rules.primer_pase_points > 0,
        partida=1,
        partidas_won=zeros,
        partida_over=False,
        over=False,
        winner_side=None,
        pollona=False,
        last_result=None,
    )


def needs_opening_side(match: MatchState) -> bool:
    """True when the next hand needs a random opening side from outside (Cuban draw, Miami's
    pares o nones): the first hand of a partida where a pair chooses its opener."""
    return match.hands_played == 0 and match.rules.first_opening == V.OPEN_CHOOSE


def start_hand(
    match: MatchState,
    hands: Sequence[Sequence[int]],
    stock: Sequence[int],
    opener: int | None = None,
    opening_side: int | None = None,
) -> HandState:
    """Start the next hand of `match` from an already-shuffled deal.

    `hands[s]` are seat s's tile ids, `stock` the undealt tiles (boneyard front first, or
    dormidas). `opener` is needed only where no rule decides it; `opening_side` is the side
    holding the opening right when a pair chooses (random draw decided outside the core).
    """
    rules = match.rules
    if match.over:
        raise InvalidDeal("match_over", "the match is over")
    n = rules.seats
    if len(hands) != n:
        raise InvalidDeal("bad_deal", f"{rules.variant} needs {n} hands, got {len(hands)}")
    full = _FULL_MASK[rules.max_pip]
    size = rules.hand_size
    try:
        masks = []
        dealt = 0
        for s, h in enumerate(hands):
            if len(h) != size:
                raise InvalidDeal(
                    "bad_deal", f"seat {s} has {len(h)} tiles, the variant deals {size}"
                )
            m = 0
            for t in h:
                m |= 1 << t
            masks.append(m)
            dealt |= m
        smask = 0
        for t in stock:
            smask |= 1 << t
    except (TypeError, ValueError):
        _explain_bad_deal(hands, stock, full)
        raise
    if dealt | smask != full or n * size + len(stock) != full.bit_count():
        _explain_bad_deal(hands, stock, full)
    if opener is not None and not (type(opener) is int and 0 <= opener < n):
        raise InvalidDeal("bad_opener", f"opener {opener!r} is not a seat")
    if opening_side is not None and not (type(opening_side) is int and 0 <= opening_side < 2):
        raise InvalidDeal("bad_opener", f"opening side {opening_side!r} is not a side")

    first_hand = match.hands_played == 0
    forced = -1
    phase = PHASE_PLAY
    priority = None
    side_right = opening_side
    if first_hand and rules.first_opening == V.OPEN_HIGHEST:
        forced = next(t for t in _BY_RANK if dealt >> t & 1)
        holder = 0
        while not masks[holder] >> forced & 1:
            holder += 1
        if opener is not None and opener != holder:
            raise InvalidDeal(
                "bad_opener", f"seat {holder} opens with {tile_str(forced)}, not seat {opener}"
            )
        opener = holder
    elif first_hand and rules.first_opening == V.OPEN_CHOOSE:
        if opener is None:
            if opening_side is None:
                raise InvalidDeal("bad_opener", "the first hand needs the opening side")
            phase = PHASE_CHOOSE
            priority = opening_side  # the first seat of the pair
        elif opening_side is not None and rules.side_of(opener) != opening_side:
            raise InvalidDeal("bad_opener", f"seat {opener} is not on side {opening_side}")
    elif match.next_opener is not None:
        if opener is not None and opener != match.next_opener:
            raise InvalidDeal(
                "bad_opener", f"seat {match.next_opener} opens this hand, not seat {opener}"
            )
        opener = match.next_opener
    elif match.next_opening_side is not None:
        side_right = match.next_opening_side
        if opener is None:
            phase = PHASE_CHOOSE
            priority = match.priority
        elif rules.side_of(opener) != side_right:
            raise InvalidDeal("bad_opener", f"side {side_right} opens, seat {opener} is not on it")
    elif opener is None:
        raise InvalidDeal("bad_opener", "this hand needs an opener")
    if opener is not None:
        side_right = rules.side_of(opener)
    hand_masks = tuple(masks)
    setup = HandSetup(
        first_hand=first_hand,
        scores_before=match.scores,
        dealt=hand_masks,
        stock_dealt=tuple(stock),
        opening_side=side_right,
        priority=priority,
        forced_open=forced,
        first_pass_pending=match.first_pass_pending and first_hand,
    )
    return HandState(
        rules=rules,
        setup=setup,
        hands=hand_masks,
        stock=setup.stock_dealt,
        left=-1,
        right=-1,
        turn=-1 if opener is None else opener,
        phase=phase,
        opener=-1 if opener is None else opener,
        last_player=-1,
        passes=0,
        plays=0,
        live=dealt | smask if rules.draws else dealt,
        scores=match.scores,
        bonuses=(),
        log=None,
        choices=(),
        first_pass_pending=setup.first_pass_pending,
        result=None,
    )


def _stock_mask(stock: Sequence[int]) -> int:
    m = 0
    for t in stock:
        m |= 1 << t
    return m


def _explain_bad_deal(hands: Sequence[Sequence[int]], stock: Sequence[int], full: int) -> None:
    seen: set[int] = set()
    for t in [t for h in hands for t in h] + list(stock):
        if not (type(t) is int and 0 <= t < TILE_COUNT and full >> t & 1):
            raise InvalidDeal("bad_deal", f"tile {t!r} is not in this set")
        if t in seen:
            raise InvalidDeal("bad_deal", f"tile {tile_str(t)} appears twice")
        seen.add(t)
    missing = [t for t in tiles_of(full) if t not in seen]
    raise InvalidDeal("bad_deal", f"tile {tile_str(missing[0])} is missing from the deal")


# ---------------------------------------------------------------------------------------------
# Legal actions


def _redeal_ok(state: HandState, seat: int) -> bool:
    return (
        state.rules.redeal_doubles > 0
        and state.plays == 0
        and state.phase in (PHASE_CHOOSE, PHASE_PLAY)
        and (state.hands[seat] & DOUBLES_MASK).bit_count() >= state.rules.redeal_doubles
    )


def legal_actions(state: HandState, seat: int | None = None) -> tuple[Action, ...]:
    """Every legal action of `seat` (default: the seat on turn). Empty if it has no choice."""
    if state.phase == PHASE_PLAY and (seat is None or seat == state.turn):
        le = state.left
        if le >= 0:
            h = state.hands[state.turn]
            r = state.right
            if r == le:  # a tile fitting both equal ends is listed once, on the left
                return _FITS_LEFT[h & NUM_MASK[le]]
            return _FITS_LEFT[h & NUM_MASK[le]] + _FITS_RIGHT[h & NUM_MASK[r]]
        turn = state.turn
        out: list[Action] = []
        f = state.setup.forced_open
        if f >= 0:
            out.append(_PLAY_OPEN[f])
        else:
            m = state.hands[turn]
            while m:
                low = m & -m
                out.append(_PLAY_OPEN[low.bit_length() - 1])
                m ^= low
        if state.plays == 0 and state.rules.redeal_doubles and _redeal_ok(state, turn):
            out.append(RequestRedeal(turn))
        return tuple(out)
    if seat is None:
        return ()
    acts: list[Action] = []
    if state.phase == PHASE_CHOOSE and state.rules.side_of(seat) == state.setup.opening_side:
        if all(s != seat for s, _ in state.choices):
            acts += [ChooseOpener(seat, True), ChooseOpener(seat, False)]
    if _redeal_ok(state, seat):
        acts.append(RequestRedeal(seat))
    return tuple(acts)


def awaiting(state: HandState) -> tuple[int, ...]:
    """Seats whose decision the hand waits for (the seat on turn, or the choosing pair)."""
    if state.phase == PHASE_PLAY:
        return (state.turn,)
    if state.phase == PHASE_CHOOSE:
        done = {s for s, _ in state.choices}
        return tuple(
            s
            for s in range(state.rules.seats)
            if state.rules.side_of(s) == state.setup.opening_side and s not in done
        )
    return ()


def side_on_turn(state: HandState) -> int | None:
    """The side whose decision is awaited (e.g. for dominicana's 2-minute claim)."""
    if state.phase == PHASE_PLAY:
        return state.rules.side_of(state.turn)
    if state.phase == PHASE_CHOOSE:
        return state.setup.opening_side
    return None


def heaviest_playable(state: HandState) -> Play | None:
    """The play the engine makes on a timed-out turn: the heaviest playable tile (pip sum,
    ties to the greater half), on the left end when it fits both."""
    best: Play | None = None
    key = (-1, -1, -1)
    for a in legal_actions(state):
        if isinstance(a, Play):
            k = (PIPS[a.tile], HIGH[a.tile], 1 if a.end != RIGHT else 0)
            if k > key:
                best, key = a, k
    return best


# ---------------------------------------------------------------------------------------------
# Applying actions


def apply(state: HandState, action: Action) -> tuple[HandState, tuple[Event, ...]]:
    """Apply one player's action; return the new state and the events it caused, forced
    passes/draws and bonuses included. Raises `IllegalAction` when it is not legal."""
    if type(action) is Play:
        return _play(state, action)
    if isinstance(action, ChooseOpener):
        return _choose(state, action)
    if isinstance(action, RequestRedeal):
        if not (type(action.seat) is int and 0 <= action.seat < state.rules.seats):
            raise IllegalAction("bad_seat", f"{action.seat!r} is not a seat")
        if not _redeal_ok(state, action.seat):
            raise IllegalAction("no_redeal", f"seat {action.seat} may not ask for a redeal")
        ev = RedealEvent(action.seat)
        return replace(state, phase=PHASE_REDEAL, turn=-1, log=(ev, state.log)), (ev,)
    raise IllegalAction("bad_action", f"unknown action {action!r}")


def _choose(state: HandState, action: ChooseOpener) -> tuple[HandState, tuple[Event, ...]]:
    rules = state.rules
    seat = action.seat
    if state.phase != PHASE_CHOOSE:
        raise IllegalAction("not_choosing", "nobody is choosing an opener now")
    if not (type(seat) is int and 0 <= seat < rules.seats):
        raise IllegalAction("bad_seat", f"{seat!r} is not a seat")
    if rules.side_of(seat) != state.setup.opening_side:
        raise IllegalAction("not_your_choice", f"seat {seat} is not on the opening side")
    if any(s == seat for s, _ in state.choices):
        raise IllegalAction("already_chosen", f"seat {seat} has already chosen")
    choices = (*state.choices, (seat, bool(action.salgo)))
    if len(choices) < 2:
        return replace(state, choices=choices), ()
    salgo = [s for s, c in choices if c]
    priority = state.setup.priority
    if priority is None or rules.side_of(priority) != state.setup.opening_side:
        priority = state.setup.opening_side
    opener = salgo[0] if len(salgo) == 1 else priority
    ordered = tuple(sorted(choices))
    ev = ChoiceEvent(state.setup.opening_side or 0, ordered, opener)
    new = replace(
        state,
        choices=ordered,
        phase=PHASE_PLAY,
        opener=opener,
        turn=opener,
        log=(ev, state.log),
    )
    return new, (ev,)


def _opening_ends(state: HandState, action: Play, t: int) -> tuple[int, int, int]:
    """(end, left, right) after the opening tile `t`, or IllegalAction."""
    f = state.setup.forced_open
    if f >= 0 and t != f:
        raise IllegalAction("forced_opening", f"the opening tile must be {tile_str(f)}")
    if action.flip:
        return NO_END, LOW[t], HIGH[t]
    return NO_END, HIGH[t], LOW[t]


def _pase_due(state: HandState, seat: int) -> tuple[str, int, int] | None:
    """The pase (kind, side, points) that `seat` playing now earns after `state.passes`
    passes, or None. A pase worth 0 points (casa with `pase_corrido_bonus` 0) is none."""
    rules = state.rules
    style = rules.pase_style
    pb = state.passes
    if style == "none" or not pb:
        return None
    if style == "dominicana":
        if state.plays == 1 and pb == 1 and rules.pase_salida_points:
            return ("pase_salida", rules.side_of(state.opener), rules.pase_salida_points)
    elif style == "casa":
        if pb == rules.seats - 1 and rules.pase_corrido_points:
            return ("pase_corrido", rules.side_of(seat), rules.pase_corrido_points)
    elif pb == 1 and rules.seats > 2 and rules.pase_points:
        return ("pase", rules.side_of(state.last_player), rules.pase_points)
    return None


def _play(state: HandState, action: Play) -> tuple[HandState, tuple[Event, ...]]:
    """A tile played by the seat on turn, then every forced pass and draw that follows."""
    if state.phase != PHASE_PLAY:
        raise IllegalAction("not_playing", f"no tile can be played now (phase {state.phase})")
    seat = state.turn
    t = action.tile
    hands = state.hands
    h = hands[seat]
    if type(t) is not int or t < 0 or not (h >> t) & 1:
        raise IllegalAction("not_in_hand", f"seat {seat} does not hold that tile")
    le = state.left
    r = state.right
    if le < 0:
        end, nl, nr = _opening_ends(state, action, t)
    elif (end := action.end) == LEFT:
        nl = _OTHER_HALF[t][le]
        if nl < 0:
            raise IllegalAction("no_fit", f"{tile_str(t)} does not fit the left end {le}")
        nr = r
    elif end == RIGHT:
        nr = _OTHER_HALF[t][r]
        if nr < 0:
            raise IllegalAction("no_fit", f"{tile_str(t)} does not fit the right end {r}")
        nl = le
    else:
        raise IllegalAction("bad_end", f"end {end!r} is not LEFT or RIGHT")
    h ^= 1 << t
    rules = state.rules
    new_hands = list(hands)
    new_hands[seat] = h
    events: list[Event] = [PlayEvent(seat, t, end, nl, nr)]
    plays = state.plays + 1
    scores = state.scores
    bonuses = state.bonuses

    # A pase earned by this play (paid after the hand's own points if the play ends the hand).
    pase = _pase_due(state, seat) if state.passes else None
    style = rules.pase_style

    if h == 0:
        return _end_hand(
            state, new_hands, state.stock, nl, nr, events, plays, seat, "domino", pase, (le, r, t)
        )
    fit = NUM_MASK[nl] | NUM_MASK[nr]
    live = state.live ^ (1 << t)
    if not live & fit and rules.tranque_detect == TRANQUE_LOCK:
        return _end_hand(
            state, new_hands, state.stock, nl, nr, events, plays, seat, "tranque", pase, None
        )
    if pase is not None:
        scores, bonuses, won = _award(rules, scores, bonuses, events, pase[0], pase[1], pase[2])
        if won is not None:
            return _target_end(
                state, new_hands, state.stock, nl, nr, events, plays, seat, won, scores, bonuses
            )

    # Eager forced draws and passes until someone can play.
    n = rules.seats
    turn = seat
    passes = 0
    stock = state.stock
    first_pass_pending = state.first_pass_pending
    draws = rules.draws
    while True:
        turn = turn + 1 if turn + 1 < n else 0
        hm = new_hands[turn]
        if hm & fit:
            break
        if draws and stock:
            while stock:
                d = stock[0]
                stock = stock[1:]
                hm |= 1 << d
                events.append(DrawEvent(turn, d))
                if (1 << d) & fit:
                    break
            new_hands[turn] = hm
            if hm & fit:
                break
        passes += 1
        events.append(PassEvent(turn))
        won = None
        if style == "dominicana":
            if passes == 2 and plays == 1:
                scores, bonuses, won = _award(
                    rules,
                    scores,
                    bonuses,
                    events,
                    "pase_salida",
                    rules.side_of(seat),
                    rules.pase_salida_points,
                    uncounted=True,
                )
            elif passes == 3:
                scores, bonuses, won = _award(
                    rules,
                    scores,
                    bonuses,
                    events,
                    "pase_corrido",
                    rules.side_of(seat),
                    rules.pase_corrido_points,
                )
        elif style == "apuesta":
            if n == 2:
                scores, bonuses, won = _award(
                    rules, scores, bonuses, events, "pase", rules.side_of(seat), rules.pase_points
                )
            elif passes == n - 1:
                scores, bonuses, won = _award(
                    rules,
                    scores,
                    bonuses,
                    events,
                    "pase_corrido",
                    rules.side_of(seat),
                    rules.pase_corrido_points,
                )
        if first_pass_pending:
            first_pass_pending = False
            rivals = (rules.side_of(turn) + 1) % 2 if rules.pairs else (turn + 1) % n
            scores, bonuses, won = _award(
                rules, scores, bonuses, events, "primer_pase", rivals, rules.primer_pase_points
            )
        if won is None and plays == 1 and passes == 1 and rules.doble_sin_respuesta_points:
            if nl == nr:
                scores, bonuses, won = _award(
                    rules,
                    scores,
                    bonuses,
                    events,
                    "doble_sin_respuesta",
                    rules.side_of(seat),
                    rules.doble_sin_respuesta_points,
                )
        if won is not None:
            st = replace(state, first_pass_pending=first_pass_pending)
            return _target_end(
                st, new_hands, stock, nl, nr, events, plays, seat, won, scores, bonuses
            )
        if passes == n:
            st = replace(
                state, scores=scores, bonuses=bonuses, first_pass_pending=first_pass_pending
            )
            return _end_hand(
                st, new_hands, stock, nl, nr, events, plays, seat, "tranque", None, None
            )
    log = state.log
    for e in events:
        log = (e, log)
    # Positional, in HandState's field order: the one constructor on the path of every play,
    # where msgspec's keyword __init__ (or `replace`) costs 10-15% of the play (bench rules).
    return HandState(
        rules,
        state.setup,
        tuple(new_hands),
        stock,
        nl,
        nr,
        turn,
        PHASE_PLAY,
        state.opener,
        seat,
        passes,
        plays,
        live,
        scores,
        bonuses,
        log,
        state.choices,
        first_pass_pending,
        None,
    ), tuple(events)


def _counted(rules: RuleSet, kind: str, side: int, points: int, score: int) -> bool:
    if rules.scoring == "hands":
        return False
    if rules.pase_cap_at_target and kind in ("pase_salida", "pase_corrido"):
        return score + points < rules.target
    return True


def _award(
    rules: RuleSet,
    scores: tuple[int, ...],
    bonuses: tuple[BonusEvent, ...],
    events: list[Event],
    kind: str,
    side: int,
    points: int,
    uncounted: bool = False,
) -> tuple[tuple[int, ...], tuple[BonusEvent, ...], int | None]:
    """Emit a bonus; return new scores, bonuses and the side it took to the target (if that
    wins the match at once in this variant)."""
    if points <= 0:
        return scores, bonuses, None
    counted = not uncounted and _counted(rules, kind, side, points, scores[side])
    ev = BonusEvent(kind, side, points, counted)
    events.append(ev)
    bonuses = (*bonuses, ev)
    if not counted:
        return scores, bonuses, None
    sc = list(scores)
    sc[side] += points
    won = side if rules.bonuses_win and sc[side] >= rules.target else None
    return tuple(sc), bonuses, won


def _over_state(
    state: HandState,
    hands: list[int],
    stock: tuple[int, ...],
    nl: int,
    nr: int,
    events: list[Event],
    plays: int,
    seat: int,
    result: HandResult,
) -> tuple[HandState, tuple[Event, ...]]:
    log = state.log
    for e in events:
        log = (e, log)
    live = 0
    for m in hands:
        live |= m
    if state.rules.draws:
        live |= _stock_mask(stock)
    return replace(
        state,
        hands=tuple(hands),
        stock=stock,
        left=nl,
        right=nr,
        turn=-1,
        phase=PHASE_OVER,
        last_player=seat,
        plays=plays,
        live=live,
        scores=result.scores,
        bonuses=result.bonuses,
        log=log,
        result=result,
    ), tuple(events)


def _target_end(
    state: HandState,
    hands: list[int],
    stock: tuple[int, ...],
    nl: int,
    nr: int,
    events: list[Event],
    plays: int,
    seat: int,
    side: int,
    scores: tuple[int, ...],
    bonuses: tuple[BonusEvent, ...],
) -> tuple[HandState, tuple[Event, ...]]:
    result = HandResult(
        end="target",
        winner_seat=None,
        winner_side=side,
        points=0,
        bonuses=bonuses,
        scores=scores,
        next_opener=None,
        next_opening_side=None,
        match_over=True,
        match_winner_side=side,
        pips=tuple(mask_pips(m) for m in hands),
    )
    return _over_state(state, hands, stock, nl, nr, events, plays, seat, result)


def _first_from(opener: int, n: int, seats: Sequence[int]) -> int:
    """The first of `seats` in turn order starting at `opener`."""
    return min(seats, key=lambda s: (s - opener) % n)


def _end_hand(
    state: HandState,
    hands: list[int],
    stock: tuple[int, ...],
    nl: int,
    nr: int,
    events: list[Event],
    plays: int,
    seat: int,
    end: str,
    pase: tuple[str, int, int] | None,
    last: tuple[int, int, int] | None,
) -> tuple[HandState, tuple[Event, ...]]:
    rules = state.rules
    opener = state.opener
    pips = []
    for m in hands:
        p = 0
        while m:
            low = m & -m
            p += _PIPS_OF_BIT[low]
            m ^= low
        pips.append(p)
    winner_seat: int | None
    winner_side: int | None
    blocker = None
    if end == "domino":
        winner_seat = seat
        winner_side = rules.side_of(seat)
        collect = rules.domino_collect
    else:
        blocker = seat
        collect = rules.tranque_collect
        winner_seat, winner_side = _tranque_winner(rules, pips, seat, opener)
    points = 0
    if winner_side is not None:
        if collect == V.COLLECT_ALL:
            points = sum(pips)
        else:
            for p, sd in zip(pips, _sides(rules), strict=True):
                if sd != winner_side:
                    points += p
    scores = list(state.scores)
    bonuses = state.bonuses
    match_winner: int | None = None
    ordered = rules.match_end == V.MATCH_FIRST_TO_TARGET
    if winner_side is not None:
        scores[winner_side] += 1 if rules.scoring == "hands" else points
        if ordered and scores[winner_side] >= rules.target:
            match_winner = winner_side
    hand_value = points
    if winner_side is not None and end == "domino" and last is not None:
        le, r, t = last
        lo, hi = LOW[t], HIGH[t]
        if rules.capicua_equal_ends:
            capicua = (lo == le or hi == le) and (lo == r or hi == r)
        else:
            capicua = le != r and lo != hi and ((lo == le and hi == r) or (lo == r and hi == le))
        if capicua and rules.capicua != "none":
            value = points if rules.capicua == "double" else rules.capicua_points
            sc, bonuses, _ = _award(
                rules,
                tuple(scores),
                bonuses,
                events,
                "capicua",
                winner_side,
                value,
            )
            scores = list(sc)
            if rules.capicua == "double":
                hand_value += value
            if ordered and match_winner is None and scores[winner_side] >= rules.target:
                match_winner = winner_side
    if end == "tranque" and winner_side is not None and rules.tranque_bonus:
        sc, bonuses, _ = _award(
            rules,
            tuple(scores),
            bonuses,
            events,
            "tranque",
            winner_side,
            rules.tranque_bonus,
        )
        scores = list(sc)
    if pase is not None:
        sc, bonuses, _ = _award(rules, tuple(scores), bonuses, events, *pase)
        scores = list(sc)
        if ordered and match_winner is None and scores[pase[1]] >= rules.target:
            match_winner = pase[1]
    viajera = bool(rules.viajera and winner_side is not None and hand_value >= rules.viajera)
    if not ordered and winner_side is not None:
        if rules.match_end == V.MATCH_SOLE_LEADER:
            top = max(scores)
            if top >= rules.target and scores.count(top) == 1:  # one side alone leads
                match_winner = scores.index(top)
        elif scores[winner_side] >= rules.target or viajera:
            match_winner = winner_side
    next_opener, next_side, priority = _next_opening(rules, opener, winner_seat, winner_side)
    result = HandResult(
        end=end,
        winner_seat=winner_seat,
        winner_side=winner_side,
        points=(1 if rules.scoring == "hands" else points) if winner_side is not None else 0,
        bonuses=bonuses,
        scores=tuple(scores),
        next_opener=next_opener,
        next_opening_side=next_side,
        match_over=match_winner is not None,
        match_winner_side=match_winner,
        blocker=blocker,
        pips=tuple(pips),
        viajera=viajera,
        next_priority=priority,
    )
    return _over_state(state, hands, stock, nl, nr, events, plays, seat, result)


def _tranque_winner(
    rules: RuleSet, pips: list[int], blocker: int, opener: int
) -> tuple[int | None, int | None]:
    n = rules.seats
    side_of = rules.side_of
    if rules.tranque_winner == V.TRANQUE_BLOCKER_RIGHT:
        right = (blocker + 1) % n
        if pips[blocker] < pips[right]:
            w = blocker
        elif pips[right] < pips[blocker]:
            w = right
        else:
            w = opener
        return w, side_of(w)
    if rules.tranque_winner == V.TRANQUE_LOWEST_SEAT:
        low = min(pips)
        holders = [s for s in range(n) if pips[s] == low]
        sides = {side_of(s) for s in holders}
        if len(sides) == 1:
            return _first_from(opener, n, holders), side_of(holders[0])
        if rules.tranque_tie == V.TIE_OPENER:
            ws = side_of(opener)
            return _first_from(opener, n, [s for s in holders if side_of(s) == ws]), ws
        return None, None
    seat_side = _sides(rules)
    totals = [0] * rules.sides
    for s in range(n):
        totals[seat_side[s]] += pips[s]
    low = min(totals)
    if totals.count(low) == 1:
        ws = totals.index(low)
    elif rules.tranque_tie == V.TIE_OPENER:
        tied = [x for x in range(rules.sides) if totals[x] == low]
        ws = seat_side[_first_from(opener, n, [s for s in range(n) if seat_side[s] in tied])]
    else:
        return None, None
    if rules.tranque_seat == V.TRANQUE_SEAT_FIRST:
        return seat_side.index(ws), ws
    members = [s for s in range(n) if seat_side[s] == ws]
    best = min(pips[s] for s in members)
    return _first_from(opener, n, [s for s in members if pips[s] == best]), ws


def _next_opening(
    rules: RuleSet, opener: int, winner_seat: int | None, winner_side: int | None
) -> tuple[int | None, int | None, int | None]:
    """(next opener or None when a pair chooses, opening side, priority seat for the choice)."""
    n = rules.seats
    if rules.next_opening == V.NEXT_RIGHT_OF_OPENER:
        s = (opener + 1) % n
        return s, rules.side_of(s), None
    if winner_seat is None or winner_side is None:
        if rules.tranque_tie == V.TIE_NOBODY_OTHER_OPENS:
            s = (opener + 1) % n
            if rules.next_opening == V.NEXT_WINNERS_CHOOSE:
                return None, rules.side_of(s), s
            return s, rules.side_of(s), None
        s = (opener + 1) % n
        return s, rules.side_of(s), None
    if rules.next_opening == V.NEXT_WINNERS_CHOOSE:
        return None, winner_side, winner_seat
    return winner_seat, winner_side, None


# ---------------------------------------------------------------------------------------------
# Matches


def finish_hand(match: MatchState, hand: HandState) -> MatchState:
    """Fold a finished hand into the match: scores, next opener, partida/series end."""
    if hand.phase == PHASE_REDEAL:
        return match  # void hand: deal again with the same opening right
    res = hand.result
    if hand.phase != PHASE_OVER or res is None:
        raise IllegalAction("hand_not_over", "the hand is not over")
    rules = match.rules
    if not res.match_over:
        return replace(
            match,
            scores=res.scores,
            hands_played=match.hands_played + 1,
            next_opener=res.next_opener,
            next_opening_side=res.next_opening_side,
            priority=res.next_priority,
            first_pass_pending=hand.first_pass_pending,
            last_result=res,
        )
    w = res.match_winner_side if res.match_winner_side is not None else 0
    pollona = all(res.scores[s] == 0 for s in range(rules.sides) if s != w)
    won = list(match.partidas_won)
    won[w] += 2 if (pollona and rules.series_best_of > 1) else 1
    series_over = won[w] * 2 > rules.series_best_of
    if series_over:
        return replace(
            match,
            scores=res.scores,
            hands_played=match.hands_played + 1,
            next_opener=res.next_opener,
            next_opening_side=res.next_opening_side,
            priority=res.next_priority,
            partidas_won=tuple(won),
            partida_over=True,
            over=True,
            winner_side=w,
            pollona=pollona,
            last_result=res,
        )
    zeros = (0,) * rules.sides
    return replace(
        match,
        scores=zeros,
        hands_played=0,
        next_opener=None,
        next_opening_side=None,
        priority=None,
        first_pass_pending=rules.primer_pase_points > 0,
        partida=match.partida + 1,
        partidas_won=tuple(won),
        partida_over=False,
        pollona=pollona,
        last_result=res,
    )


# ---------------------------------------------------------------------------------------------
# Views


def events_of(state: HandState) -> tuple[Event, ...]:
    """Every event of the hand so far, oldest first."""
    out = []
    node = state.log
    while node is not None:
        out.append(node[0])
        node = node[1]
    out.reverse()
    return tuple(out)


def view(state: HandState, seat: int) -> SeatView:
    """What `seat` may see: its own tiles, the others' counts, the table, scores, turn, bonuses
    and passes. Other hands, the stock and dormidas only once the hand is over."""
    rules = state.rules
    over = state.phase in (PHASE_OVER, PHASE_REDEAL)
    evs = []
    for e in events_of(state):
        if isinstance(e, DrawEvent) and e.seat != seat and not over:
            e = DrawEvent(e.seat, -1)
        evs.append(e)
    mine = None
    for s, c in state.choices:
        if s == seat:
            mine = c
    return SeatView(
        seat=seat,
        variant=rules.variant,
        phase=state.phase,
        hand=tiles_of(state.hands[seat]),
        counts=tuple(m.bit_count() for m in state.hands),
        left=state.left,
        right=state.right,
        chain=tuple(e for e in evs if isinstance(e, PlayEvent)),
        events=tuple(evs),
        scores=state.scores,
        turn=state.turn,
        side_on_turn=side_on_turn(state),
        opener=state.opener,
        opening_side=state.setup.opening_side,
        stock_count=len(state.stock) if rules.draws else 0,
        bonuses=state.bonuses,
        my_choice=mine,
        result=state.result,
        revealed_hands=tuple(tiles_of(m) for m in state.hands) if over else None,
        revealed_stock=state.stock if over else None,
    )
