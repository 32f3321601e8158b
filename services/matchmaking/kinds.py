"""Table kinds (variant + mode/options + seat layout) and the stake tiers they are offered at.

The catalogue is data: the operator chooses which (kind, tier) pairs are offered through
`MatchmakingConfig.offered`; by default every kind is offered at every tier.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TIERS: dict[str, int] = {"free": 0, "10": 1000, "20": 2000, "40": 4000, "80": 8000}


@dataclass(frozen=True, slots=True)
class Kind:
    kind: str
    variant: str
    title: str
    seat_count: int
    # Seats 0 and 2 against 1 and 3 (partners sit across).
    pairs: bool
    options: dict[str, Any] = field(default_factory=dict)


def _k(
    kind: str, variant: str, title: str, seats: int, in_pairs: bool, **options: Any
) -> tuple[str, Kind]:
    return kind, Kind(kind, variant, title, seats, in_pairs, dict(options))


CATALOGUE: dict[str, Kind] = dict(
    [
        _k("apuesta-parejas", "apuesta", "Apuesta parejas 2v2 a 200", 4, True, mode="parejas"),
        _k("apuesta-1v1", "apuesta", "Apuesta 1v1 a 100", 2, False, mode="1v1"),
        _k("apuesta-trios", "apuesta", "Apuesta tríos a 200", 3, False, mode="trios"),
        _k(
            "dominicana-2v2-100",
            "dominicana",
            "Dominicana 2v2 a 100",
            4,
            True,
            mode="2v2",
            target=100,
        ),
        _k(
            "dominicana-2v2-200",
            "dominicana",
            "Dominicana 2v2 a 200",
            4,
            True,
            mode="2v2",
            target=200,
        ),
        _k(
            "dominicana-1v1-100",
            "dominicana",
            "Dominicana 1v1 a 100",
            2,
            False,
            mode="1v1",
            target=100,
        ),
        _k("cubana-habana", "cubana", "Cubana La Habana", 4, True, preset="habana"),
        _k("cubana-miami", "cubana", "Cubana Miami", 4, True, preset="miami"),
        _k("cubana-oriente", "cubana", "Cubana Oriente", 4, True, preset="oriente"),
        _k("cubana-barrio", "cubana", "Cubana Barrio", 4, True, preset="barrio"),
        _k("casa-parejas", "casa", "Casa parejas (4)", 4, True, players=4, pairs=True),
        _k("casa-individual", "casa", "Casa individual (4)", 4, False, players=4, pairs=False),
        _k("casa-duelo", "casa", "Casa duelo (2)", 2, False, players=2, pairs=False),
    ]
)


def across(seat: int, seat_count: int) -> int:
    """The partner's seat in pairs (seat + 2 mod 4)."""
    return (seat + 2) % seat_count
