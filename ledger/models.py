"""Result documents of ledger operations (msgspec Structs; the service contract re-exports them)."""

from __future__ import annotations

import msgspec


class PostingOut(msgspec.Struct, frozen=True):
    leg: int
    account: str
    amount: int
    balance_after: int
    version_after: int


class Payout(msgspec.Struct, frozen=True):
    player: str
    amount: int


class EntryResult(msgspec.Struct, frozen=True, kw_only=True):
    """One posted journal entry. ``replayed`` is true when an idempotent retry returned it."""

    entry_id: int
    kind: str
    idempotency_key: str
    match_id: str | None = None
    reference: str | None = None
    created_at: str
    replayed: bool = False
    postings: list[PostingOut]
    player: str | None = None
    reservation_id: str | None = None
    hold_account: str | None = None
    pot_account: str | None = None
    pot: int | None = None
    tier: str | None = None
    variant: str | None = None
    commission: int | None = None
    commission_rate_bp: int | None = None
    payouts: list[Payout] | None = None
    reverses_entry_id: int | None = None
    reverses_kind: str | None = None


_decoder = msgspec.json.Decoder(EntryResult)


def decode_result(raw: str | bytes) -> EntryResult:
    return _decoder.decode(raw)
