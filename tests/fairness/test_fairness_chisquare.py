"""Chi-square tests: no tile prefers any position (bounded to a few seconds)."""

from __future__ import annotations

import hashlib

from fairness.shuffle import canonical_tiles, shuffle_tiles

SHUFFLES = 6000
# Critical values of chi-square at p = 0.0001 (upper tail, Wilson-Hilferty); the seeds are
# fixed, so the test is deterministic: it fails only if the algorithm changes and is biased.
CRITICAL_27DF = 63.4  # positions 0..27 for one tile
CRITICAL_729DF = 880.0  # whole 28x28 tile-by-position table: (28-1)^2 = 729 df


def test_tile_positions_are_uniform() -> None:
    tiles = canonical_tiles(6)
    n = len(tiles)
    index = {t: i for i, t in enumerate(tiles)}
    counts = [[0] * n for _ in range(n)]  # counts[tile][position]
    server_seed = hashlib.sha256(b"chi-square").digest()
    for k in range(SHUFFLES):
        order = shuffle_tiles(server_seed, f"chi/{k}", ["s"], 6)
        for pos, t in enumerate(order):
            counts[index[t]][pos] += 1
    expected = SHUFFLES / n
    total = 0.0
    worst = 0.0
    for row in counts:
        chi = sum((c - expected) ** 2 / expected for c in row)
        worst = max(worst, chi)
        total += chi
    assert total < CRITICAL_729DF, total
    # With 28 tiles tested at p = 0.0001 each, a false alarm has probability < 0.3%.
    assert worst < CRITICAL_27DF, worst


def test_first_tile_uniform_double_nine() -> None:
    tiles = canonical_tiles(9)
    counts = dict.fromkeys(tiles, 0)
    server_seed = hashlib.sha256(b"chi-square-9").digest()
    runs = 5500
    for k in range(runs):
        counts[shuffle_tiles(server_seed, f"c9/{k}", [], 9)[0]] += 1
    expected = runs / len(tiles)
    chi = sum((c - expected) ** 2 / expected for c in counts.values())
    assert chi < 101.6, chi  # 54 df, p = 0.0001
