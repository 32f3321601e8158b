"""Pure money math for the ledger: integer cents only, never floats, never ``round()``.

The same algorithm is implemented in SQL (``ledger.split_pot``) for the one-round-trip
settlement path; the tests check that both agree.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

BP_DENOMINATOR = 10_000
COMMISSION_SHARDS = 16

_AMOUNT_RE = re.compile(r"^(?P<units>[0-9]{1,13})(?:\.(?P<cents>[0-9]{2}))?$")


class MoneyError(ValueError):
    """An amount or split request that cannot be honoured; ``code`` is machine-readable."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Split:
    """How a pot is emptied: the commission plus one payout per winner (in the given order)."""

    pot: int
    commission: int
    payouts: tuple[int, ...]


def commission_for(pot: int, rate_bp: int) -> int:
    """``pot * rate_bp // 10000``: the house's cut, rounded down to the cent."""
    if pot < 0:
        raise MoneyError("invalid_amount", "pot must not be negative")
    if not 0 <= rate_bp <= BP_DENOMINATOR:
        raise MoneyError("invalid_rate", "commission rate must be within 0..10000 bp")
    return pot * rate_bp // BP_DENOMINATOR


def largest_remainder(total: int, shares: list[int]) -> list[int]:
    """Split ``total`` cents in proportion to ``shares`` (largest-remainder / Hamilton method).

    Every winner first gets ``total * share // sum(shares)``; the cents left over (fewer than
    the number of winners) go one each to the largest remainders, ties broken by position:
    callers pass winners in seat order, so the odd cent goes to the lower seat.
    """
    if total < 0:
        raise MoneyError("invalid_amount", "amount to split must not be negative")
    if not shares:
        raise MoneyError("no_winners", "a split needs at least one winner")
    if any(s <= 0 for s in shares):
        raise MoneyError("invalid_shares", "every share must be a positive integer")
    weight = sum(shares)
    base = [total * s // weight for s in shares]
    remainders = [total * s % weight for s in shares]
    leftover = total - sum(base)
    order = sorted(range(len(shares)), key=lambda i: (-remainders[i], i))
    for i in order[:leftover]:
        base[i] += 1
    return base


def split_pot(pot: int, rate_bp: int, shares: list[int]) -> Split:
    """Commission first, then the rest to the winners; the parts add up to ``pot`` exactly."""
    commission = commission_for(pot, rate_bp)
    payouts = largest_remainder(pot - commission, shares)
    return Split(pot=pot, commission=commission, payouts=tuple(payouts))


def commission_shard(match_id: str, shards: int = COMMISSION_SHARDS) -> int:
    """The house-commission sub-account for a match: the first byte of SHA-256(match id).

    The SQL side computes ``get_byte(sha256(convert_to(match_id, 'UTF8')), 0) % 16``.
    """
    return hashlib.sha256(match_id.encode()).digest()[0] % shards


def parse_amount(text: str) -> int:
    """Parse a cashier amount into cents without floats.

    ``25`` and ``25.00`` are dollars (2500 cents); ``2500c`` is cents. Zero, negative,
    more than two decimals or anything else is refused.
    """
    raw = text.strip()
    if raw.endswith("c"):
        digits = raw[:-1]
        if not digits.isascii() or not digits.isdigit() or len(digits) > 15:
            raise MoneyError("invalid_amount", f"not an amount in cents: {text!r}")
        cents = int(digits)
    else:
        if raw.startswith("$"):
            raw = raw[1:]
        match = _AMOUNT_RE.match(raw)
        if match is None:
            raise MoneyError(
                "invalid_amount",
                f"not an amount: {text!r} (use dollars like 25 or 25.00, or cents like 2500c)",
            )
        cents = int(match["units"]) * 100 + int(match["cents"] or "0")
    if cents <= 0:
        raise MoneyError("invalid_amount", "amount must be positive")
    return cents


def format_cents(cents: int) -> str:
    """``-1234`` -> ``-12.34`` (for human-readable reports; exports keep integer cents)."""
    sign = "-" if cents < 0 else ""
    units, rest = divmod(abs(cents), 100)
    return f"{sign}{units}.{rest:02d}"
