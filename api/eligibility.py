"""The one check before a player is seated or his money is held: `check_may_sit`.

Every gateway path that seats a player or asks for a hold on his wallet (quick join, private
table, join by code, CPU tables, an accepted invitation or rematch) calls it for
each player it seats, just before asking matchmaking. It checks, in order:

1. consent: the acting user is the player himself, or the player accepted (in his own session)
   the invitation the acting user, one of its players, is now accepting (api/invitations.py);
2. the player exists and has the `player` role;
3. the account is not locked (locked players sit nowhere, free tables included);
4. at paid tiers: a verified adult, one account per person, in an allowed region without a
   VPN or remote desktop (api/identity.py), not self-excluded, not cooling off, the stake
   cannot take him past a loss limit (`api.limits.seat_refusal`), and his ledger balance
   covers the stake;
5. a player who sits only with random opponents (api.player_prefs) takes only a seat the
   quick-join queue or a CPU table gives him (`random_seat=True`): `random_only` otherwise.
   Limits, cool-off and the preference are one read of the player's settings row.

A paid seating runs this check and its matchmaking join inside `seating_lock`: the seated
players' seating locks, so two seatings of one player at once (two tabs, two invitations)
are checked one after the other, the second one seeing the first one's hold.

Refusals are 403 with a machine-readable code (503 `identity_unavailable` when the identity or
location provider gave no trustworthy answer: nobody is seated on a doubtful one). When the
refused player is not the acting user, the code is `partner_unavailable` whatever the reason,
so nobody learns another player's account status or balance.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Protocol

import msgspec
from sqlalchemy.ext.asyncio import AsyncEngine

from api import accounts, identity, limits, player_lock
from api.accounts import User
from api.backends import Backends, call
from services.common.db import DEFAULT_POOL_SIZE
from services.common.errors import ServiceError
from services.common.http import InternalClient
from services.ledger.contract import WalletBalance
from services.matchmaking.contract import KindList

FREE_TIER = "free"
# How long a paid seating waits for its players' seating locks (another seating of one of them
# is between its check and matchmaking's answer) before it is refused 503 `seating_busy`. The
# holder keeps them for its checks and one matchmaking join (the internal client's 10 s
# timeout); a quick join holds them for a few milliseconds.
SEAT_LOCK_WAIT_MS = 5_000
# Seatings holding a locked connection at once, per gateway database pool. Each holder needs a
# second pooled connection for its checks' reads (pool 10 + 10 overflow): without a bound, a
# burst of paid seatings could hold every connection and wait for one until the pool's timeout.
MAX_LOCKED_SEATINGS = DEFAULT_POOL_SIZE
_slots: weakref.WeakKeyDictionary[AsyncEngine, asyncio.Semaphore] = weakref.WeakKeyDictionary()


class Invitation(Protocol):
    """What the consent rule needs from an invitation (api.invitations.Invitation)."""

    def player_ids(self) -> list[str]: ...

    def accepted_by(self, player: str) -> bool: ...


def is_paid(tier: str | None) -> bool:
    """`None` is a private table joined by code, whose tier only matchmaking knows: paid."""
    return tier != FREE_TIER


def account_refusal(user: User, tier: str | None, now: datetime | None = None) -> str | None:
    """Why this account may not sit at `tier` (a refusal code), or None; no I/O."""
    moment = now or datetime.now(UTC)
    if user.role != "player":
        return "not_a_player"
    if user.status == "locked":
        return "account_locked"
    if user.status not in ("active", "self_excluded"):
        return "account_locked"
    if not is_paid(tier):
        return None
    if not user.may_play_paid(moment):
        return "self_excluded"
    return None


_DETAILS = {
    "not_a_player": "only players sit at tables",
    "account_locked": "this account is locked",
    "self_excluded": "you are self-excluded from paid tables",
    "cooling_off": "you are cooling off from paid tables",
    "loss_limit": "this stake could take you past your loss limit",
    "insufficient_funds": "your balance does not cover the stake",
    "not_your_seat": "only the player himself may take his seat",
    "partner_unavailable": "your partner cannot sit at this table now",
    "random_only": "you chose to sit only with random opponents (quick join)",
    **identity.DETAILS,
}
# Refusals that are a provider's failure rather than the player's state: retry later.
_STATUSES = {"identity_unavailable": 503}


def refuse(code: str, *, for_partner: bool, detail: str | None = None) -> ServiceError:
    if for_partner:
        code, detail = "partner_unavailable", None
    return ServiceError(
        _STATUSES.get(code, 403), code, detail or _DETAILS.get(code, "you may not sit here")
    )


class Eligible(msgspec.Struct, frozen=True):
    """Who may sit, and what the check read about him that the seating path needs next."""

    user: User
    # seat him only from the quick-join queue, at an unlisted table (api.player_prefs)
    random_opponents_only: bool


async def wallet_balance(ledger: InternalClient, player: str) -> int:
    """The player's available balance (holds already taken off) as the ledger reports it."""
    try:
        found = await call("ledger", ledger.get(f"/v1/wallets/{player}", WalletBalance))
    except ServiceError as exc:
        if exc.status == 404:
            return 0
        raise
    return found.balance


def seat_lock_key(player: str) -> int:
    """The player's seating lock, a sibling of his cashier lock (api.cashier.lock_key) rather
    than the same key: what a seat's check must see settled is only what another seating
    changes (a held stake counts as lost; the balance the stake is held from), while a
    deposit or withdrawal changes no loss figure and the ledger refuses a hold its balance
    does not cover by itself. So a seating never waits for the finance desk or a compliance
    review, nor a deposit for a seating."""
    return player_lock.player_key(player, b"mesa-seating")


def _busy() -> ServiceError:
    return ServiceError(
        503, "seating_busy", "another seating for this player is in progress; try again"
    )


@asynccontextmanager
async def seating_lock(
    db: AsyncEngine, players: Iterable[str], tier: str | None
) -> AsyncIterator[None]:
    """Hold the seating locks of every player a paid seating seats, from before his
    `check_may_sit` until matchmaking has answered the join (and placed the holds).

    The locks are transaction-level advisory locks on a connection of the gateway's database,
    taken in one fixed order (api.player_lock), so two invitations with players in common
    cannot deadlock. The wait is bounded: 503 `seating_busy`, nothing checked or held. A free
    table holds no money: no lock, nothing to wait for."""
    if not is_paid(tier):
        yield
        return
    slots = _slots.get(db)
    if slots is None:
        slots = _slots[db] = asyncio.Semaphore(MAX_LOCKED_SEATINGS)
    try:
        await asyncio.wait_for(slots.acquire(), SEAT_LOCK_WAIT_MS / 1000)
    except TimeoutError:
        raise _busy() from None
    try:
        async with db.begin() as conn:
            keys = [seat_lock_key(p) for p in players]
            await player_lock.lock_keys(conn, keys, SEAT_LOCK_WAIT_MS, _busy())
            yield
    finally:
        slots.release()


async def check_may_sit(
    db: AsyncEngine,
    backends: Backends,
    player_id: str,
    acting: User,
    kind: str | None,
    tier: str | None,
    *,
    invitation: Invitation | None = None,
    random_seat: bool = False,
    client_address: str | None = None,
) -> Eligible:
    """Raise a 403 unless `player_id` may be seated (and held the stake) by `acting` now.

    `kind` and `tier` None: a private table joined by code, whose tier only matchmaking
    knows; it counts as paid and its balance is left to the ledger's hold, which refuses an
    uncovered stake by itself. The account is checked before any internal call.
    `client_address`: the acting player's request address, used to locate him (another
    player is located by the provider from his own last device check).
    """
    own = player_id == acting.id
    if not own:
        consented = (
            invitation is not None
            and acting.id in invitation.player_ids()
            and invitation.accepted_by(player_id)
        )
        if not consented:
            raise refuse("not_your_seat", for_partner=False)
    # Read again here, not taken from a session or an earlier read: a lock or a
    # self-exclusion counts from the moment it is set.
    user = await accounts.get_user(db, player_id)
    if user is None:
        raise refuse("partner_unavailable", for_partner=True)
    code = account_refusal(user, tier)
    detail: str | None = None
    # The player's own settings row (limits, cool-off, seating preference): one read.
    mine = await limits.limits_of(db, player_id) if code is None else None
    if mine is not None and is_paid(tier):
        code = await backends.place.paid_play_refusal(
            db, player_id, client_address if own else None
        )
    if code is None and mine is not None and is_paid(tier):
        stake_cents: int | None = None
        if kind is not None and tier is not None:
            stake_cents, _pairs = stake_of(await backends.kinds(), kind, tier)
        refusal = await limits.seat_refusal(backends, mine, stake_cents)
        if refusal is not None:
            code, detail = refusal
        elif stake_cents and await wallet_balance(backends.ledger, player_id) < stake_cents:
            code = "insufficient_funds"
    if code is None and mine is not None and not random_seat and mine.random_opponents_only:
        code = "random_only"
    if code is not None:
        raise refuse(code, for_partner=not own, detail=detail)
    if mine is None:  # read above whenever no refusal came before it
        raise RuntimeError("the player's settings were not read")
    return Eligible(user=user, random_opponents_only=mine.random_opponents_only)


def stake_of(kinds: KindList, kind: str, tier: str) -> tuple[int, bool]:
    """(stake in cents, pairs kind) of `kind` at `tier` from matchmaking's KindList."""
    for info in kinds.kinds:
        if info.kind == kind:
            for offered in info.tiers:
                if offered.tier == tier:
                    return int(offered.stake_cents), bool(info.pairs)
            raise ServiceError(400, "tier_not_offered", f"{kind} is not offered at {tier}")
    raise ServiceError(404, "unknown_kind", "no such table kind")
