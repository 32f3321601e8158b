"""mesa-shuffle-v1: the deal as a pure function of (server seed, deal id, player seeds).

Normative text: docs/fairness.md, section "Shuffle algorithm". Everything here is pure.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

ALGORITHM = "mesa-shuffle-v1"
SERVER_SEED_BYTES = 32
TILE_SETS = (6, 9)

_DEAL_ID_RE = re.compile(r"[A-Za-z0-9._/-]{1,128}")
_SEED_RE = re.compile(r"[A-Za-z0-9_-]{0,64}")
_HEX64_RE = re.compile(r"[0-9a-f]{64}")

Tile = tuple[int, int]


class FairnessInputError(ValueError):
    """An input (deal id, seed, server seed, tile set, layout) is outside its alphabet or range."""


def validate_deal_id(deal_id: str) -> str:
    if not isinstance(deal_id, str) or _DEAL_ID_RE.fullmatch(deal_id) is None:
        raise FairnessInputError(
            f"invalid deal id {deal_id!r}: must match [A-Za-z0-9._/-]{{1,128}}"
        )
    return deal_id


def validate_player_seed(seed: str) -> str:
    if not isinstance(seed, str) or _SEED_RE.fullmatch(seed) is None:
        raise FairnessInputError(f"invalid player seed {seed!r}: must match [A-Za-z0-9_-]{{0,64}}")
    return seed


def parse_server_seed(value: str | bytes) -> bytes:
    """Accept 32 raw bytes or 64 lowercase/uppercase hex digits; return the raw bytes."""
    if isinstance(value, bytes):
        if len(value) != SERVER_SEED_BYTES:
            raise FairnessInputError(
                f"server seed must be {SERVER_SEED_BYTES} bytes, got {len(value)}"
            )
        return value
    if not isinstance(value, str) or _HEX64_RE.fullmatch(value.lower()) is None:
        raise FairnessInputError("server seed must be exactly 64 hexadecimal digits (32 bytes)")
    return bytes.fromhex(value)


def validate_tile_set(n: int) -> int:
    if isinstance(n, bool) or n not in TILE_SETS:
        raise FairnessInputError(
            f"unknown tile set {n!r}: must be 6 (double-six) or 9 (double-nine)"
        )
    return n


def canonical_tiles(n: int) -> list[Tile]:
    """All tiles a-b with a <= b of the double-n set, in canonical order."""
    validate_tile_set(n)
    return [(a, b) for a in range(n + 1) for b in range(a, n + 1)]


def tile_str(tile: Tile) -> str:
    a, b = tile
    return f"{min(a, b)}-{max(a, b)}"


def block_message(deal_id: str, seeds: Sequence[str], i: int) -> bytes:
    """ASCII bytes of `mesa-shuffle-v1|<deal_id>|<seed_0>|...|<seed_{n-1}>|<i>`."""
    return "|".join([ALGORITHM, deal_id, *seeds, str(i)]).encode("ascii")


class Keystream:
    """HMAC-SHA256(server_seed, message_i) for i = 0, 1, ... concatenated, read 4 bytes at a time."""

    def __init__(self, server_seed: bytes | str, deal_id: str, seeds: Sequence[str]) -> None:
        self._key = parse_server_seed(server_seed)
        self._deal_id = validate_deal_id(deal_id)
        self._seeds = [validate_player_seed(s) for s in seeds]
        self._block = 0
        self._buf = b""
        self._pos = 0

    def read(self, count: int) -> bytes:
        out = bytearray()
        while len(out) < count:
            if self._pos >= len(self._buf):
                msg = block_message(self._deal_id, self._seeds, self._block)
                self._buf = hmac.new(self._key, msg, hashlib.sha256).digest()
                self._block += 1
                self._pos = 0
            take = min(count - len(out), len(self._buf) - self._pos)
            out += self._buf[self._pos : self._pos + take]
            self._pos += take
        return bytes(out)

    def below(self, n: int) -> int:
        """Uniform integer in [0, n) by rejection sampling on 32-bit big-endian words."""
        if n < 1 or n > 2**32:
            raise FairnessInputError(f"below(n) needs 1 <= n <= 2**32, got {n}")
        limit = 2**32 - (2**32 % n)
        while True:
            x = int.from_bytes(self.read(4), "big")
            if x < limit:
                return x % n


def shuffle_tiles(
    server_seed: bytes | str, deal_id: str, seeds: Sequence[str], tile_set: int
) -> list[Tile]:
    """The full shuffled tile order of mesa-shuffle-v1."""
    tiles = canonical_tiles(tile_set)
    ks = Keystream(server_seed, deal_id, seeds)
    for i in range(len(tiles) - 1, 0, -1):
        j = ks.below(i + 1)
        tiles[i], tiles[j] = tiles[j], tiles[i]
    return tiles


@dataclass(frozen=True, slots=True)
class Deal:
    hands: tuple[tuple[Tile, ...], ...]
    stock: tuple[Tile, ...]

    def as_strings(self) -> tuple[list[list[str]], list[str]]:
        return [[tile_str(t) for t in h] for h in self.hands], [tile_str(t) for t in self.stock]


def deal_layout(shuffled: Sequence[Tile], seats: int, hand_size: int) -> Deal:
    """Seat s gets shuffled[s*H:(s+1)*H]; the rest, in order, is the stock or the dormidas."""
    if seats < 1 or hand_size < 0 or seats * hand_size > len(shuffled):
        raise FairnessInputError(
            f"cannot deal {seats} hands of {hand_size} from {len(shuffled)} tiles"
        )
    hands = tuple(tuple(shuffled[s * hand_size : (s + 1) * hand_size]) for s in range(seats))
    return Deal(hands=hands, stock=tuple(shuffled[seats * hand_size :]))


def deal(
    server_seed: bytes | str,
    deal_id: str,
    seeds: Sequence[str],
    tile_set: int,
    hand_size: int,
) -> Deal:
    """Shuffle and lay out one deal; one seed per seat (the empty string for a seat that gave none)."""
    if len(seeds) < 1:
        raise FairnessInputError("at least one seat (one seed, possibly empty) is required")
    return deal_layout(shuffle_tiles(server_seed, deal_id, seeds, tile_set), len(seeds), hand_size)


def cuban_draw(
    server_seed: bytes | str, deal_id: str, seeds: Sequence[str]
) -> tuple[int, list[tuple[Tile, Tile]]]:
    """Cuban draw for the first opening right (double-nine set, two pairs).

    Rounds: side 0 gets canonical[below(55)], then side 1 gets canonical[below(55)], from the
    mesa-shuffle-v1 keystream of this draw's own committed seed and deal id. The greater pip sum
    wins; equal sums repeat the draw (tiles are put back). Returns (winning side, rounds drawn).
    """
    tiles = canonical_tiles(9)
    ks = Keystream(server_seed, deal_id, seeds)
    rounds: list[tuple[Tile, Tile]] = []
    while True:
        t0 = tiles[ks.below(len(tiles))]
        t1 = tiles[ks.below(len(tiles))]
        rounds.append((t0, t1))
        s0, s1 = sum(t0), sum(t1)
        if s0 != s1:
            return (0 if s0 > s1 else 1), rounds


def pares_o_nones(
    server_seed: bytes | str, deal_id: str, seeds: Sequence[str]
) -> tuple[int, tuple[int, int]]:
    """Miami's pares o nones: side 0 calls even ("pares"), side 1 odd ("nones").

    Each side shows 0..5 fingers: f0 = below(6), then f1 = below(6), from the mesa-shuffle-v1
    keystream of this choice's own committed seed and deal id. An even f0 + f1 gives the opening
    right to side 0, odd to side 1. Returns (winning side, (f0, f1)).
    """
    ks = Keystream(server_seed, deal_id, seeds)
    f0 = ks.below(6)
    f1 = ks.below(6)
    return (f0 + f1) % 2, (f0, f1)


def iter_tile_strings(tiles: Sequence[Tile]) -> Iterator[str]:
    return (tile_str(t) for t in tiles)
