"""Player seeds in two phases, server seeds, shuffle input validation."""

from __future__ import annotations

import pytest

from fairness.commitments import (
    NO_COMMITMENT,
    NOT_REVEALED,
    REVEALED,
    SeedPhaseError,
    SeedRevealMismatch,
    SeedRound,
    player_seed_commitment,
)
from fairness.seeds import new_server_seed
from fairness.shuffle import (
    FairnessInputError,
    canonical_tiles,
    deal,
    shuffle_tiles,
    validate_deal_id,
    validate_player_seed,
)


def test_mismatched_reveal_is_refused_and_right_one_accepted() -> None:
    rnd = SeedRound(2)
    rnd.commit(0, player_seed_commitment("alice"))
    rnd.commit(1, player_seed_commitment("bob"))
    assert rnd.all_committed
    rnd.open_reveals()
    with pytest.raises(SeedRevealMismatch):
        rnd.reveal(0, "mallory")
    rnd.reveal(0, "alice")
    rnd.reveal(1, "bob")
    assert rnd.all_revealed
    result = rnd.close()
    assert result.seeds == ("alice", "bob")
    assert result.defaulted == ()


def test_defaulting_seats_get_the_empty_seed_recorded() -> None:
    rnd = SeedRound(3)
    rnd.commit(1, player_seed_commitment("b"))
    rnd.commit(2, player_seed_commitment("c"))
    rnd.open_reveals()
    rnd.reveal(2, "c")
    result = rnd.close()
    assert result.seeds == ("", "", "c")
    assert [e.status for e in result.entries] == [NO_COMMITMENT, NOT_REVEALED, REVEALED]
    assert result.entries[0].commitment is None
    assert result.entries[1].commitment == player_seed_commitment("b")
    assert result.defaulted == (0, 1)


def test_phase_errors() -> None:
    rnd = SeedRound(2)
    with pytest.raises(SeedPhaseError):
        rnd.reveal(0, "x")
    rnd.commit(0, player_seed_commitment("x"))
    with pytest.raises(SeedPhaseError):
        rnd.commit(0, player_seed_commitment("y"))
    with pytest.raises(FairnessInputError):
        rnd.commit(1, "not-hex")
    with pytest.raises(FairnessInputError):
        rnd.commit(5, player_seed_commitment("y"))
    rnd.open_reveals()
    with pytest.raises(SeedPhaseError):
        rnd.commit(1, player_seed_commitment("y"))
    with pytest.raises(SeedPhaseError):
        rnd.reveal(1, "y")  # never committed
    with pytest.raises(FairnessInputError):
        rnd.reveal(0, "bad seed!")
    rnd.reveal(0, "x")
    with pytest.raises(SeedPhaseError):
        rnd.reveal(0, "x")
    rnd.close()
    with pytest.raises(SeedPhaseError):
        rnd.reveal(0, "x")


def test_uppercase_commitment_is_normalised() -> None:
    rnd = SeedRound(1)
    rnd.commit(0, player_seed_commitment("abc").upper())
    rnd.open_reveals()
    rnd.reveal(0, "abc")
    assert rnd.close().seeds == ("abc",)


def test_server_seeds_are_fresh() -> None:
    seeds = {new_server_seed() for _ in range(1000)}
    assert len(seeds) == 1000
    assert all(len(s) == 32 for s in seeds)


@pytest.mark.parametrize("deal_id", ["", "a b", "x" * 129, "é", "a|b", "a\n"])
def test_bad_deal_ids(deal_id: str) -> None:
    with pytest.raises(FairnessInputError):
        validate_deal_id(deal_id)


@pytest.mark.parametrize("seed", ["a b", "x" * 65, "a|b", "a.b", "a/b", "ñ"])
def test_bad_seeds(seed: str) -> None:
    with pytest.raises(FairnessInputError):
        validate_player_seed(seed)


def test_good_alphabet_edges() -> None:
    validate_deal_id("A" * 128)
    validate_deal_id("a.b_c/d-e")
    validate_player_seed("")
    validate_player_seed("Az09_-" * 10 + "abcd")


@pytest.mark.parametrize("server_seed", ["00" * 31, "00" * 33, "zz" * 32, b"\x00" * 31, 7])
def test_bad_server_seeds(server_seed: object) -> None:
    with pytest.raises(FairnessInputError):
        shuffle_tiles(server_seed, "d", [], 6)  # type: ignore[arg-type]


def test_bad_tile_sets_and_layouts() -> None:
    for n in (0, 5, 7, 12, True):
        with pytest.raises(FairnessInputError):
            canonical_tiles(n)
    with pytest.raises(FairnessInputError):
        deal("00" * 32, "d", ["", "", "", ""], 6, 8)
    with pytest.raises(FairnessInputError):
        deal("00" * 32, "d", [], 6, 7)


def test_shuffle_is_a_permutation_and_depends_on_every_input() -> None:
    base = shuffle_tiles("00" * 32, "d", ["a", "b"], 9)
    assert sorted(base) == canonical_tiles(9)
    assert base != shuffle_tiles("01" + "00" * 31, "d", ["a", "b"], 9)
    assert base != shuffle_tiles("00" * 32, "e", ["a", "b"], 9)
    assert base != shuffle_tiles("00" * 32, "d", ["a", "c"], 9)
    assert base != shuffle_tiles("00" * 32, "d", ["b", "a"], 9)
    assert base != shuffle_tiles("00" * 32, "d", ["a", "b", ""], 9)
