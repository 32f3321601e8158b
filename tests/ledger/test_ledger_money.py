"""Property tests for the money math: integer cents, nothing lost, commission never negative."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.money import (
    MoneyError,
    commission_for,
    commission_shard,
    format_cents,
    largest_remainder,
    parse_amount,
    split_pot,
)

pots = st.integers(min_value=0, max_value=10**12)
rates = st.integers(min_value=0, max_value=10_000)
share_lists = st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=16)


@given(pots, rates, share_lists)
def test_legs_sum_to_the_pot(pot: int, rate: int, shares: list[int]) -> None:
    split = split_pot(pot, rate, shares)
    assert split.commission + sum(split.payouts) == pot
    assert len(split.payouts) == len(shares)


@given(pots, rates, share_lists)
def test_commission_never_negative_and_exact(pot: int, rate: int, shares: list[int]) -> None:
    split = split_pot(pot, rate, shares)
    assert 0 <= split.commission <= pot
    assert split.commission == pot * rate // 10_000
    assert all(p >= 0 for p in split.payouts)


@given(pots, st.integers(min_value=1, max_value=16))
def test_equal_shares_differ_by_at_most_a_cent_lower_seats_first(pot: int, n: int) -> None:
    payouts = largest_remainder(pot, [1] * n)
    assert sum(payouts) == pot
    assert max(payouts) - min(payouts) <= 1
    assert payouts == sorted(payouts, reverse=True)  # the odd cents go to the lower seats


@given(pots, share_lists)
def test_each_payout_is_within_a_cent_of_its_quota(total: int, shares: list[int]) -> None:
    payouts = largest_remainder(total, shares)
    weight = sum(shares)
    for payout, share in zip(payouts, shares, strict=True):
        assert total * share // weight <= payout <= total * share // weight + 1


def test_known_splits() -> None:
    assert split_pot(1000, 1000, [1, 1]).payouts == (450, 450)
    assert split_pot(1001, 1000, [1, 1, 1]) == split_pot(1001, 1000, [1, 1, 1])
    assert split_pot(1001, 1000, [1, 1, 1]).commission == 100
    assert split_pot(1001, 1000, [1, 1, 1]).payouts == (301, 300, 300)
    assert split_pot(7, 1000, [1, 1]).payouts == (4, 3)
    assert split_pot(10, 1000, [2, 1]).payouts == (6, 3)


@pytest.mark.parametrize(
    "bad", [(-1, 1000, [1]), (100, -1, [1]), (100, 10_001, [1]), (100, 1000, []), (100, 1000, [0])]
)
def test_bad_splits_are_refused(bad: tuple[int, int, list[int]]) -> None:
    with pytest.raises(MoneyError):
        split_pot(*bad)


@pytest.mark.parametrize(
    ("text", "cents"),
    [("25", 2500), ("25.00", 2500), ("$25.50", 2550), ("0.01", 1), ("2500c", 2500), ("1c", 1)],
)
def test_parse_amount(text: str, cents: int) -> None:
    assert parse_amount(text) == cents


@pytest.mark.parametrize(
    "text",
    [
        *("0", "0.00", "-5", "1.5", "1.234", "1e3", "abc", "", "0c", "-1c", "1.0c", " nan"),
        # `mesa cashier`: no float forms, and no digits but ASCII ones.
        *("1e2", "100.0", "1e2c", "100.0c", "\uff11\uff10\uff10", "\uff11\uff10\uff10c"),
    ],
)
def test_parse_amount_refuses(text: str) -> None:
    with pytest.raises(MoneyError):
        parse_amount(text)


@given(st.integers(min_value=1, max_value=10**13))
def test_parse_format_round_trip(cents: int) -> None:
    assert parse_amount(format_cents(cents)) == cents


def test_commission_shard_is_stable_and_spread() -> None:
    shards = {commission_shard(f"match-{i}") for i in range(400)}
    assert shards == set(range(16))
    assert commission_shard("m1") == commission_shard("m1")
    assert commission_for(999, 1000) == 99
