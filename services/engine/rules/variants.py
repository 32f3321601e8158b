"""Variants as data: `make_ruleset(variant, options)` validates options into a `RuleSet`."""

from __future__ import annotations

from typing import Any

import msgspec

from services.engine.rules.errors import InvalidOptions

# Opening rule for the first hand of a match (partida).
OPEN_HIGHEST = "highest"  # highest double at the table, else highest tile; that tile is forced
OPEN_CHOOSE = "choose"  # a side holds the opening right (drawn outside) and picks its opener
# Who opens the next hand.
NEXT_WINNER = "winner"
NEXT_WINNERS_CHOOSE = "winners_choose"
NEXT_RIGHT_OF_OPENER = "right_of_opener"
# How a tranque is detected.
TRANQUE_LOCK = "lock"  # at once when no tile in play fits either end
TRANQUE_PASSES = "passes"  # when every seat passes in a row
# Who wins a tranque.
TRANQUE_BLOCKER_RIGHT = "blocker_right"  # dominicana
TRANQUE_LOWEST_SEAT = "lowest_seat"  # cubana: lowest individual sum
TRANQUE_LOWEST_SIDE = "lowest_side"  # casa, apuesta: lowest side total
# What happens on a tied tranque.
TIE_OPENER = "opener"  # the opener's seat/side wins it
TIE_NOBODY_OTHER_OPENS = "nobody_other_opens"
TIE_NOBODY_ROTATE = "nobody_rotate"
# Which seat of the side with the lowest total wins a tranque (TRANQUE_LOWEST_SIDE).
TRANQUE_SEAT_LOWEST = "lowest"  # apuesta: the side's seat with the fewest pips
TRANQUE_SEAT_FIRST = "first"  # casa: the side's first seat
# Which hands a winner collects.
COLLECT_ALL = "all"
COLLECT_RIVALS = "rivals"
# When the match (partida) is won.
MATCH_WINNER_REACHES = "winner_reaches"  # the hand's winner reaches the target (or viajera)
MATCH_FIRST_TO_TARGET = "first_to_target"  # apuesta: whoever reaches it first, point by point
MATCH_SOLE_LEADER = "sole_leader"  # casa: a side at or over the target leads alone


class RuleSet(msgspec.Struct, frozen=True):
    """One variant with its options resolved: everything the core needs to run it."""

    variant: str
    options: dict[str, Any]
    max_pip: int
    seats: int
    pairs: bool
    hand_size: int
    draws: bool
    target: int
    scoring: str  # "points" | "hands"
    first_opening: str
    next_opening: str
    tranque_detect: str
    tranque_winner: str
    tranque_tie: str
    tranque_seat: str
    domino_collect: str
    tranque_collect: str
    capicua: str  # "none" | "bonus" | "double"
    capicua_points: int
    capicua_equal_ends: bool
    pase_style: str  # "none" | "dominicana" | "casa" | "apuesta"
    pase_points: int
    pase_corrido_points: int
    pase_salida_points: int
    primer_pase_points: int
    doble_sin_respuesta_points: int
    tranque_bonus: int
    bonuses_win: bool  # a counted bonus reaching the target wins the match at once
    pase_cap_at_target: bool  # dominicana: pase bonuses count only below the target
    redeal_doubles: int  # 0: no redeal right
    viajera: int  # 0: no viajera
    series_best_of: int
    match_end: str
    # Table timing, for the engine (0: none). After `turn_timeout_ms` on turn the engine plays
    # the seat's heaviest tile (apuesta); after `claim_after_ms` the other side may claim the
    # match (dominicana, unless the match is played turn by turn).
    turn_timeout_ms: int
    claim_after_ms: int

    @property
    def sides(self) -> int:
        return 2 if self.pairs else self.seats

    def side_of(self, seat: int) -> int:
        return seat % 2 if self.pairs else seat


VARIANTS: dict[str, dict[str, Any]] = {
    "dominicana": {
        "sheet": "000",
        "options": {
            "mode": {"default": "2v2", "values": ["2v2", "1v1"]},
            "target": {"default": 100, "values": [100, 200]},
        },
    },
    "cubana": {
        "sheet": "002",
        "options": {
            "preset": {"default": "habana", "values": ["habana", "miami", "oriente", "barrio"]},
            "target": {"default": "by preset: habana 100, miami 150, oriente 20, barrio 100"},
            "first_pass_bonus": {"default": "by preset: true in miami", "values": [False, True]},
            "doble_sin_respuesta": {
                "default": "by preset: true in oriente",
                "values": [False, True],
            },
            "next_hand": {
                "default": "by preset: winners_choose (habana, miami), right_of_opener "
                "(oriente), winner (barrio)",
                "values": [NEXT_WINNERS_CHOOSE, NEXT_RIGHT_OF_OPENER, NEXT_WINNER],
            },
            "capicua": {
                "default": "by preset: double in barrio, none elsewhere",
                "values": ["none", "double"],
            },
        },
    },
    "casa": {
        "sheet": "003",
        "options": {
            "players": {"default": 4, "values": [4, 2]},
            "pairs": {"default": "true with 4 players, false with 2", "values": [True, False]},
            "scoring": {"default": "points", "values": ["points", "hands"]},
            "target": {"default": "100 points or 5 hands"},
            "capicua_bonus": {"default": 25, "values": [0, 25, 30]},
            "pase_corrido_bonus": {"default": 25, "values": [0, 25, 30]},
            "tranque_bonus": {"default": 0, "values": [0, 25, 30]},
        },
    },
    "apuesta": {
        "sheet": "004",
        "options": {
            "mode": {"default": "parejas", "values": ["parejas", "1v1", "trios"]},
            "target": {"default": "by mode: parejas 200, 1v1 100, trios 200"},
        },
    },
}

CUBAN_PRESETS: dict[str, dict[str, Any]] = {
    "habana": {
        "max_pip": 9,
        "hand_size": 10,
        "target": 100,
        "first_opening": OPEN_CHOOSE,
        "next_hand": NEXT_WINNERS_CHOOSE,
        "capicua": "none",
        "tie": TIE_NOBODY_OTHER_OPENS,
        "first_pass_bonus": False,
        "doble_sin_respuesta": False,
        "series": 1,
    },
    "miami": {
        "max_pip": 9,
        "hand_size": 10,
        "target": 150,
        "first_opening": OPEN_CHOOSE,
        "next_hand": NEXT_WINNERS_CHOOSE,
        "capicua": "none",
        "tie": TIE_NOBODY_OTHER_OPENS,
        "first_pass_bonus": True,
        "doble_sin_respuesta": False,
        "series": 3,
    },
    "oriente": {
        "max_pip": 6,
        "hand_size": 7,
        "target": 20,
        "first_opening": OPEN_HIGHEST,
        "next_hand": NEXT_RIGHT_OF_OPENER,
        "capicua": "none",
        "tie": TIE_OPENER,
        "first_pass_bonus": False,
        "doble_sin_respuesta": True,
        "series": 1,
    },
    "barrio": {
        "max_pip": 9,
        "hand_size": 10,
        "target": 100,
        "first_opening": OPEN_HIGHEST,
        "next_hand": NEXT_WINNER,
        "capicua": "double",
        "tie": TIE_OPENER,
        "first_pass_bonus": False,
        "doble_sin_respuesta": False,
        "series": 1,
    },
}


def list_variants() -> dict[str, Any]:
    """Variants, their options, allowed values and defaults (what `mesa rules list` prints)."""
    return {
        "variants": {
            name: {"sheet": spec["sheet"], "options": spec["options"]}
            for name, spec in VARIANTS.items()
        },
        "cubana_presets": {
            name: {
                "target": p["target"],
                "tiles": f"double-{p['max_pip']}",
                "hand_size": p["hand_size"],
                "first_hand": p["first_opening"],
                "next_hand": p["next_hand"],
                "capicua": p["capicua"],
                "tranque_tie": p["tie"],
                "first_pass_bonus": p["first_pass_bonus"],
                "doble_sin_respuesta": p["doble_sin_respuesta"],
                "best_of": p["series"],
            }
            for name, p in CUBAN_PRESETS.items()
        },
    }


def _pick(options: dict[str, Any], key: str, default: Any, values: list[Any] | None) -> Any:
    if key not in options:
        return default
    value = options[key]
    if values is not None:
        if not any(type(value) is type(v) and value == v for v in values):
            raise InvalidOptions(f"option {key!r}: {value!r} is not one of {values!r}")
    return value


def _target(options: dict[str, Any], default: int) -> int:
    if "target" not in options:
        return default
    value = options["target"]
    if type(value) is not int or value <= 0:
        raise InvalidOptions(f"option 'target': {value!r} is not a positive integer")
    return value


def make_ruleset(variant: str, options: dict[str, Any] | None = None) -> RuleSet:
    """Resolve a variant and its options; raise `InvalidOptions` on anything unknown or bad."""
    if variant not in VARIANTS:
        raise InvalidOptions(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
    opts = dict(options or {})
    if not isinstance(options or {}, dict):
        raise InvalidOptions("options must be an object")
    unknown = sorted(set(opts) - set(VARIANTS[variant]["options"]))
    if unknown:
        raise InvalidOptions(f"unknown option(s) for {variant}: {', '.join(unknown)}")
    if variant == "dominicana":
        return _dominicana(opts)
    if variant == "cubana":
        return _cubana(opts)
    if variant == "casa":
        return _casa(opts)
    return _apuesta(opts)


def _base(**kw: Any) -> RuleSet:
    fields: dict[str, Any] = {
        "max_pip": 6,
        "pairs": True,
        "hand_size": 7,
        "draws": False,
        "scoring": "points",
        "first_opening": OPEN_HIGHEST,
        "next_opening": NEXT_WINNER,
        "tranque_detect": TRANQUE_LOCK,
        "capicua": "none",
        "capicua_points": 0,
        "capicua_equal_ends": False,
        "pase_style": "none",
        "pase_points": 0,
        "pase_corrido_points": 0,
        "pase_salida_points": 0,
        "primer_pase_points": 0,
        "doble_sin_respuesta_points": 0,
        "tranque_bonus": 0,
        "bonuses_win": False,
        "pase_cap_at_target": False,
        "redeal_doubles": 0,
        "viajera": 0,
        "series_best_of": 1,
        "match_end": MATCH_WINNER_REACHES,
        "tranque_seat": TRANQUE_SEAT_LOWEST,
        "turn_timeout_ms": 0,
        "claim_after_ms": 0,
    }
    fields.update(kw)
    return RuleSet(**fields)


def _dominicana(o: dict[str, Any]) -> RuleSet:
    mode = _pick(o, "mode", "2v2", ["2v2", "1v1"])
    target = _pick(o, "target", 100, [100, 200])
    pairs = mode == "2v2"
    return _base(
        variant="dominicana",
        options={"mode": mode, "target": target},
        seats=4 if pairs else 2,
        pairs=pairs,
        draws=not pairs,
        target=target,
        tranque_winner=TRANQUE_BLOCKER_RIGHT,
        tranque_tie=TIE_OPENER,
        domino_collect=COLLECT_ALL,
        tranque_collect=COLLECT_ALL,
        capicua="bonus",
        capicua_points=25,
        capicua_equal_ends=True,
        pase_style="dominicana" if pairs else "none",
        pase_corrido_points=25 if pairs else 0,
        pase_salida_points=25 if pairs else 0,
        pase_cap_at_target=True,
        claim_after_ms=120_000,  # "2 minutos sin jugar"
    )


def _cubana(o: dict[str, Any]) -> RuleSet:
    preset = _pick(o, "preset", "habana", list(CUBAN_PRESETS))
    p = CUBAN_PRESETS[preset]
    target = _target(o, p["target"])
    first_pass = _pick(o, "first_pass_bonus", p["first_pass_bonus"], [False, True])
    dsr = _pick(o, "doble_sin_respuesta", p["doble_sin_respuesta"], [False, True])
    next_hand = _pick(
        o, "next_hand", p["next_hand"], [NEXT_WINNERS_CHOOSE, NEXT_RIGHT_OF_OPENER, NEXT_WINNER]
    )
    capicua = _pick(o, "capicua", p["capicua"], ["none", "double"])
    return _base(
        variant="cubana",
        options={
            "preset": preset,
            "target": target,
            "first_pass_bonus": first_pass,
            "doble_sin_respuesta": dsr,
            "next_hand": next_hand,
            "capicua": capicua,
        },
        max_pip=p["max_pip"],
        seats=4,
        hand_size=p["hand_size"],
        target=target,
        first_opening=p["first_opening"],
        next_opening=next_hand,
        tranque_winner=TRANQUE_LOWEST_SEAT,
        tranque_tie=p["tie"],
        domino_collect=COLLECT_RIVALS,
        tranque_collect=COLLECT_RIVALS,
        capicua=capicua,
        primer_pase_points=2 if first_pass else 0,
        doble_sin_respuesta_points=20 if dsr else 0,
        bonuses_win=True,
        redeal_doubles=5,
        viajera=100,
        series_best_of=p["series"],
    )


def _casa(o: dict[str, Any]) -> RuleSet:
    players = _pick(o, "players", 4, [4, 2])
    pairs = _pick(o, "pairs", players == 4, [True, False])
    if pairs and players != 4:
        raise InvalidOptions("option 'pairs': pairs need 4 players")
    scoring = _pick(o, "scoring", "points", ["points", "hands"])
    target = _target(o, 100 if scoring == "points" else 5)
    capicua_bonus = _pick(o, "capicua_bonus", 25, [0, 25, 30])
    corrido = _pick(o, "pase_corrido_bonus", 25, [0, 25, 30])
    tranque_bonus = _pick(o, "tranque_bonus", 0, [0, 25, 30])
    return _base(
        variant="casa",
        options={
            "players": players,
            "pairs": pairs,
            "scoring": scoring,
            "target": target,
            "capicua_bonus": capicua_bonus,
            "pase_corrido_bonus": corrido,
            "tranque_bonus": tranque_bonus,
        },
        seats=players,
        pairs=pairs,
        draws=players == 2,
        target=target,
        scoring=scoring,
        tranque_detect=TRANQUE_PASSES,
        tranque_winner=TRANQUE_LOWEST_SIDE,
        tranque_tie=TIE_NOBODY_ROTATE,
        tranque_seat=TRANQUE_SEAT_FIRST,
        domino_collect=COLLECT_RIVALS,
        tranque_collect=COLLECT_RIVALS,
        capicua="bonus",
        capicua_points=capicua_bonus,
        pase_style="casa",
        pase_corrido_points=corrido,
        tranque_bonus=tranque_bonus,
        match_end=MATCH_SOLE_LEADER,
    )


def _apuesta(o: dict[str, Any]) -> RuleSet:
    mode = _pick(o, "mode", "parejas", ["parejas", "1v1", "trios"])
    target = _target(o, {"parejas": 200, "1v1": 100, "trios": 200}[mode])
    seats = {"parejas": 4, "1v1": 2, "trios": 3}[mode]
    return _base(
        variant="apuesta",
        options={"mode": mode, "target": target},
        seats=seats,
        pairs=mode == "parejas",
        target=target,
        tranque_winner=TRANQUE_LOWEST_SIDE,
        tranque_tie=TIE_OPENER,
        domino_collect=COLLECT_ALL,
        tranque_collect=COLLECT_ALL,
        capicua="bonus",
        capicua_points=25,
        pase_style="apuesta",
        pase_points=25,
        pase_corrido_points=30 if seats > 2 else 0,
        bonuses_win=True,
        match_end=MATCH_FIRST_TO_TARGET,
        turn_timeout_ms=25_000,  # "25 segundos por turno", then "el juego juega una ficha"
    )
