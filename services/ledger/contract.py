"""The ledger service's internal API contract: request and response Structs.

Every write carries an ``idempotency_key`` (1..200 chars). Retrying the same request with the
same key returns the first result (``replayed: true``); reusing a key for a different request
is refused with 409 ``idempotency_key_reused``. Amounts are integer cents; currency is an
ISO 4217 code (the ledger keeps USD accounts).

Endpoints (all need a service credential; 4xx bodies are ``{"error": code, "detail": text}``):

    POST /v1/deposits                      DepositRequest   -> EntryResult  (cashier)
    POST /v1/withdrawals                   WithdrawRequest  -> EntryResult  (cashier)
    POST /v1/deposits/replay               DepositRequest   -> EntryResult  (gateway; reads
    POST /v1/withdrawals/replay            WithdrawRequest  -> EntryResult   only: the first
                                           answer to this key, `replayed: true`; 404
                                           `not_posted`; 409 `idempotency_key_reused`)
    POST /v1/holds                         HoldRequest      -> EntryResult  (matchmaking)
    POST /v1/holds/release                 ReleaseRequest   -> EntryResult  (matchmaking)
    POST /v1/matches/start                 StartMatchRequest -> EntryResult (matchmaking)
    POST /v1/matches/settle                SettleMatchRequest -> EntryResult (engine)
    POST /v1/matches/void                  VoidMatchRequest -> EntryResult  (engine/matchmaking)
    POST /v1/reversals                     ReversalRequest  -> EntryResult  (cashier corrections)
    GET  /v1/wallets/{player}              -> WalletBalance
    GET  /v1/reports/trial-balance[?at=ISO]
    GET  /v1/reports/pots[?status=open|settled|voided][&format=csv]
    GET  /v1/reports/commission[?by=day,tier,variant][&since=&until=][&format=csv]
    POST /v1/accounts                      OpenAccount      -> AccountOpened (gateway)
    GET  /v1/reports/statements/{player}[?since=&until=][&after=VERSION&limit=N][&format=csv]
                                           -> StatementPage (lines after wallet version VERSION)
    GET  /v1/reports/balance?account=CODE&at=ISO
    GET  /v1/reports/journal[?since=&until=][&after=ENTRY:LEG&limit=N][&format=csv]
                                           -> JournalPage (postings after ENTRY:LEG)

Long lists are pages: at most `MAX_STATEMENT_PAGE` lines / `MAX_JOURNAL_PAGE` postings
(`limit`, default the maximum); `next` is the `after` of the next page, null on the last.
    GET  /v1/reports/reconcile[?date=YYYY-MM-DD]   (each check's discrepancies and their refs)
    GET  /v1/reports/chain                 (verify the hash chain)

The daily close (gateway only; `actor` is the finance user the gateway's session names):

    GET  /v1/closes                        -> {closes: [...], next_day}
    GET  /v1/closes/key                    -> CloseKey (the report signing key's public half)
    GET  /v1/closes/{day}                  -> the day's proposal or close (404 unknown_close)
    GET  /v1/closes/{day}/draft            -> the report a proposal would carry now
    POST /v1/closes/{day}/propose          CloseAction (with `integrity`, the day's alerts as
                                           the gateway read them; 400
                                           integrity_summary_required / invalid_integrity_summary;
                                           bodies up to 2 MiB) -> the proposal
    POST /v1/closes/{day}/approve          CloseAction (with `integrity`) -> the close
                                           (409 same_approver,
                                           409 report_changed)
    POST /v1/closes/{day}/withdraw         CloseAction -> the withdrawn proposal
    GET  /v1/players/{player}/activity?since=ISO[&since=ISO...]
                                           -> PlayerActivity (deposits and net loss since each
                                              time; at most MAX_ACTIVITY_WINDOWS, none older
                                              than MAX_ACTIVITY_DAYS; gateway)
For the integrity scan (the gateway, `mesa integrity scan`), oldest first, a page at a time:

    GET  /v1/integrity/pots?since=ISO[&after=ENTRY][&limit=N]     -> SettledPotPage
                                           (settled pots: each seat's player, stake, payout)
    GET  /v1/integrity/cashier?since=ISO[&after=ENTRY][&limit=N]  -> CashierMovePage
                                           (deposits and withdrawals not reversed)
    GET  /v1/reports/pots[?day=&tier=&variant=]    (the pots behind a commission line)
    GET  /v1/reports/matches/{match_id}    (a match's pot, stakes and entries)
    GET  /v1/reports/entries/{entry_id}    (one entry with its postings)
    POST /v1/settlements                   SettlementUpload -> the import's result, or
                                           {"refused": true, "errors": [{line, error}]}
    GET  /v1/settlements                   (the latest imports, newest first)
    GET  /v1/settlements/{import_id}       (one import's result)
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from ledger.models import EntryResult, Payout, PostingOut
from services.common.http import FILL_FIRST

# With several ledger replicas (`mesa up --ledgers N`, MESA_LEDGER_URL comma-separated), a
# caller fills one replica up to this many requests in flight before it sends to the next;
# the client's routing rule owns the number (`services.common.http.FILL_FIRST`).
REPLICA_FILL = FILL_FIRST["ledger"]

MAX_STATEMENT_PAGE = 1000
MAX_JOURNAL_PAGE = 5000
MAX_POTS_PAGE = 1000
MAX_ACTIVITY_WINDOWS = 3
MAX_ACTIVITY_DAYS = 31
MAX_INTEGRITY_PAGE = 1000

__all__ = [
    "MAX_ACTIVITY_DAYS",
    "MAX_ACTIVITY_WINDOWS",
    "MAX_INTEGRITY_PAGE",
    "CashierMove",
    "CashierMovePage",
    "PotSeat",
    "SettledPot",
    "SettledPotPage",
    "MAX_CLOSE_ALERTS",
    "MAX_CLOSE_ALERT_KINDS",
    "MAX_JOURNAL_PAGE",
    "MAX_POTS_PAGE",
    "MAX_STATEMENT_PAGE",
    "REPLICA_FILL",
    "SETTLEMENT_BODY_BYTES",
    "SETTLEMENT_FILE_CHARS",
    "AccountOpened",
    "CloseAction",
    "CloseAlert",
    "CloseAlertCount",
    "CloseIntegrity",
    "CloseKey",
    "SettlementUpload",
    "JournalPage",
    "JournalRow",
    "OpenAccount",
    "StatementLine",
    "StatementPage",
    "DepositRequest",
    "EntryResult",
    "HoldRequest",
    "Payout",
    "PlayerActivity",
    "PostingOut",
    "ReleaseRequest",
    "ReversalRequest",
    "SeatStake",
    "SettleMatchRequest",
    "StartMatchRequest",
    "VoidMatchRequest",
    "WalletBalance",
    "WindowActivity",
    "WinnerShare",
    "WithdrawRequest",
]

MAX_CENTS = 10**13  # one hundred billion dollars: anything above is a bug, not a bet

Key = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
PlayerId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.@:-]{1,64}$")]
RefId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]
Cents = Annotated[int, msgspec.Meta(gt=0, le=MAX_CENTS)]
Currency = Annotated[str, msgspec.Meta(pattern=r"^[A-Z]{3}$")]
Label = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
Text = Annotated[str, msgspec.Meta(max_length=200)]


class DepositRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    idempotency_key: Key
    player: PlayerId
    amount: Cents
    reference: Text
    currency: Currency = "USD"


class WithdrawRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    idempotency_key: Key
    player: PlayerId
    amount: Cents
    reference: Text
    currency: Currency = "USD"


class HoldRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Reserve ``amount`` of ``player``'s wallet for one seat; one hold per reservation."""

    idempotency_key: Key
    player: PlayerId
    reservation_id: RefId
    amount: Cents
    table_id: Text = ""
    currency: Currency = "USD"


class ReleaseRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    idempotency_key: Key
    reservation_id: RefId


class SeatStake(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    seat: Annotated[int, msgspec.Meta(ge=0, le=16)]
    player: PlayerId
    reservation_id: RefId


class StartMatchRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Move every seat's hold into the match's pot, all or nothing (once per match)."""

    idempotency_key: Key
    match_id: RefId
    tier: Label
    variant: Label
    seats: Annotated[list[SeatStake], msgspec.Meta(min_length=2, max_length=16)]
    currency: Currency = "USD"


class WinnerShare(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    player: PlayerId
    shares: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 1


class SettleMatchRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Empty the pot: ``pot * rate_bp // 10000`` to the house, the rest to the winners in
    proportion to their shares (largest remainder; leftover cents by seat order)."""

    idempotency_key: Key
    match_id: RefId
    winners: Annotated[list[WinnerShare], msgspec.Meta(min_length=1, max_length=16)]


class VoidMatchRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Refund every stake of an unfinished match to the wallet it came from."""

    idempotency_key: Key
    match_id: RefId
    reason: Text = ""


class ReversalRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Correct a cashier deposit or withdrawal: one new entry with its postings negated.

    An entry is reversed at most once (409 ``entry_already_reversed``); 404 ``unknown_entry``;
    422 ``entry_not_reversible`` for holds, starts, settlements, voids and reversals;
    422 ``insufficient_funds`` when the wallet no longer holds a deposit being reversed.
    """

    idempotency_key: Key
    entry_id: Annotated[int, msgspec.Meta(gt=0, le=2**63 - 1)]
    reference: Text


class WalletBalance(msgspec.Struct, frozen=True):
    player: str
    account: str
    currency: str
    balance: int
    version: int


class OpenAccount(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Open a player's wallet (at sign-up); opening an open wallet changes nothing. Every
    posting to a wallet that was never opened is refused with 404 ``unknown_account``."""

    player: PlayerId
    currency: Currency = "USD"


class AccountOpened(msgspec.Struct, frozen=True):
    player: str
    account: str
    currency: str
    opened: bool  # false: it was open already


class StatementLine(msgspec.Struct, frozen=True):
    entry_id: int
    created_at: str
    kind: str
    match_id: str | None
    reference: str | None
    amount: int
    balance: int
    version: int
    # the match's pot, for a line of a match: its stake tier, variant, seats staked and the
    # house commission (None until the pot is settled)
    tier: str | None = None
    variant: str | None = None
    seats: int | None = None
    commission: int | None = None


class StatementPage(msgspec.Struct, frozen=True):
    """A page of a wallet's statement; the balances are those of the whole period."""

    player: str
    account: str
    currency: str
    opening_balance: int
    closing_balance: int
    lines: list[StatementLine]
    next: int | None = None


class JournalRow(msgspec.Struct, frozen=True):
    entry_id: int
    created_at: str
    kind: str
    idempotency_key: str
    match_id: str | None
    reference: str | None
    leg: int
    account: str
    amount: int
    currency: str
    balance_after: int
    version_after: int


class JournalPage(msgspec.Struct, frozen=True):
    rows: list[JournalRow]
    next: str | None = None  # "ENTRY:LEG" of the last row, when more follow


MAX_CLOSE_ALERTS = 5000  # alerts listed in a day's report; beyond, only counted (`truncated`)
MAX_CLOSE_ALERT_KINDS = 100
CloseAlertPlayer = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.@:-]{1,64}$")]
CloseAlertKind = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9_]{0,39}$")]


class CloseAlert(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One integrity alert raised on the day, as the gateway attests it for the report."""

    id: Annotated[int, msgspec.Meta(ge=1)]
    kind: CloseAlertKind
    player: CloseAlertPlayer
    counterpart: CloseAlertPlayer | None
    # fixed precision, as text: the signed document holds no floats
    score: Annotated[str, msgspec.Meta(pattern=r"^-?[0-9]{1,20}\.[0-9]{4}$")]
    raised_at: Annotated[
        str,
        msgspec.Meta(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z$"),
    ]


class CloseAlertCount(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    kind: CloseAlertKind
    count: Annotated[int, msgspec.Meta(ge=1, le=10_000_000)]


class CloseIntegrity(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The day's integrity alerts, read by the gateway from the integrity store (the ledger
    cannot read it): listed by id up to `MAX_CLOSE_ALERTS`, `truncated` more beyond, and
    counted by kind (all of them, sorted by kind)."""

    alerts: Annotated[list[CloseAlert], msgspec.Meta(max_length=MAX_CLOSE_ALERTS)]
    by_kind: Annotated[list[CloseAlertCount], msgspec.Meta(max_length=MAX_CLOSE_ALERT_KINDS)]
    truncated: Annotated[int, msgspec.Meta(ge=0, le=10_000_000)] = 0


class CloseAction(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Who proposes, approves or withdraws a day's close (the gateway's user id); a proposal
    and an approval carry the day's integrity alerts (required there, ignored by withdraw)."""

    actor: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    integrity: CloseIntegrity | None = None


class CloseKey(msgspec.Struct, frozen=True):
    """The public half of the key that signs closed days' reports (Ed25519)."""

    algorithm: str
    public_key: str  # 32 bytes, hex
    pem: str
    format: str  # the signed document's format (`mesa-day-close-v1`)


class WindowActivity(msgspec.Struct, frozen=True):
    """A player's money since `since`: cashier deposits into his wallet, and his net loss at
    the tables (stakes held minus payouts, refunds and released holds; negative when he won)."""

    since: str
    deposits: int
    net_loss: int


class PlayerActivity(msgspec.Struct, frozen=True):
    player: str
    currency: str
    windows: list[WindowActivity]  # in the order of the `since` values asked


class PotSeat(msgspec.Struct, frozen=True):
    seat: int
    player: str
    stake: int
    payout: int  # what the settlement paid this seat's wallet (0: lost)


class SettledPot(msgspec.Struct, frozen=True):
    match_id: str
    tier: str
    variant: str
    currency: str
    closed_at: str  # ISO 8601, UTC
    close_entry_id: int
    seats: list[PotSeat]


class SettledPotPage(msgspec.Struct, frozen=True):
    pots: list[SettledPot]
    next: int | None = None  # the `after` of the next page (a close entry id)


class CashierMove(msgspec.Struct, frozen=True):
    entry_id: int
    kind: str  # deposit | withdrawal
    player: str
    amount: int  # positive cents
    currency: str
    created_at: str  # ISO 8601, UTC


class CashierMovePage(msgspec.Struct, frozen=True):
    moves: list[CashierMove]
    next: int | None = None  # the `after` of the next page (an entry id)


# A settlement file as text (ledger/settlement.py checks it line by line); its bytes in UTF-8
# are at most `ledger.settlement.MAX_FILE_BYTES`.
SETTLEMENT_FILE_CHARS = 1024 * 1024
# The upload's JSON (the file escaped, with its name) may be larger than the file.
SETTLEMENT_BODY_BYTES = 3 * 1024 * 1024


class SettlementUpload(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    filename: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    content: Annotated[str, msgspec.Meta(max_length=SETTLEMENT_FILE_CHARS)]
