"""Tiles as small ints: one encoding for double-six and double-nine.

Tile ids follow the canonical double-nine order (for a in 0..9, for b in a..9: a-b), so a
tile has the same id in every variant; a hand is an int bitmask over those ids. Per-number
masks make "what fits this end" one AND.
"""

from __future__ import annotations

MAX_PIP = 9
LOW: list[int] = []
HIGH: list[int] = []
for _a in range(MAX_PIP + 1):
    for _b in range(_a, MAX_PIP + 1):
        LOW.append(_a)
        HIGH.append(_b)
TILE_COUNT = len(LOW)
PIPS: list[int] = [LOW[t] + HIGH[t] for t in range(TILE_COUNT)]
ID: dict[tuple[int, int], int] = {}
for _t in range(TILE_COUNT):
    ID[(LOW[_t], HIGH[_t])] = _t
    ID[(HIGH[_t], LOW[_t])] = _t
NUM_MASK: list[int] = [0] * (MAX_PIP + 1)
for _t in range(TILE_COUNT):
    NUM_MASK[LOW[_t]] |= 1 << _t
    NUM_MASK[HIGH[_t]] |= 1 << _t
DOUBLES_MASK = sum(1 << ID[(n, n)] for n in range(MAX_PIP + 1))


def tile_set(max_pip: int) -> tuple[int, ...]:
    """Every tile of the double-`max_pip` set, in canonical order."""
    return tuple(ID[(a, b)] for a in range(max_pip + 1) for b in range(a, max_pip + 1))


def tile(a: int, b: int) -> int:
    """The id of tile a-b (either order)."""
    return ID[(a, b)]


def is_double(t: int) -> bool:
    return LOW[t] == HIGH[t]


def tile_str(t: int) -> str:
    """Tile written high half first, e.g. "6-3"."""
    return f"{HIGH[t]}-{LOW[t]}"


def parse_tile(text: str, max_pip: int = MAX_PIP) -> tuple[int, int, int]:
    """Parse "a-b" into (tile id, a, b); raise ValueError on anything else."""
    if not isinstance(text, str):
        raise ValueError(f"tile must be a string like '6-3', got {text!r}")
    parts = text.split("-")
    if len(parts) != 2 or not all(len(p) == 1 and p.isdigit() for p in parts):
        raise ValueError(f"malformed tile {text!r}")
    a, b = int(parts[0]), int(parts[1])
    if a > max_pip or b > max_pip:
        raise ValueError(f"tile {text!r} is not in the double-{max_pip} set")
    return ID[(a, b)], a, b


def mask_of(tiles: tuple[int, ...] | list[int]) -> int:
    m = 0
    for t in tiles:
        m |= 1 << t
    return m


def tiles_of(mask: int) -> tuple[int, ...]:
    """Tile ids in a bitmask, ascending."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return tuple(out)


def mask_pips(mask: int) -> int:
    total = 0
    while mask:
        low = mask & -mask
        total += PIPS[low.bit_length() - 1]
        mask ^= low
    return total


def rank(t: int) -> tuple[int, int, int]:
    """Opening rank: doubles above everything, then pip sum, ties to the greater half."""
    return (1 if LOW[t] == HIGH[t] else 0, PIPS[t], HIGH[t])
