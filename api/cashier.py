"""The cashier: the one checked path by which money enters or leaves a player's wallet.

`move` is what `POST /api/finance/deposits|withdrawals` call, and nothing else posts a cashier
movement (the operator CLI no longer does). In order, under the player's cashier lock:

1. the player exists and is a player;
2. a verified adult in an allowed region (api/identity.py);
3. a deposit: not cooling off, within his deposit limits (`api.limits.check_deposit`);
   a withdrawal: no compliance hold (integrity's `active_hold`);
4. the ledger posts it (a retry of a key it already posted is answered with its first
   posting, `replayed: true`); the staff audit line commits with the lock's transaction.

A retry refused by 2 or 3 is asked of the ledger before it is refused: if the key was posted,
the first request passed these checks when it was made, and a window that now counts it
must not refuse its retry: the answer is the ledger's replay.

The lock (`lock_player`) is held from the checks through the ledger's answer, so two
deposits at the same instant cannot both pass a limit that only one fits, and a compliance
hold (which takes the same lock, api/routes_integrity.py) is placed either before a
withdrawal's check or after its posting, never in between. The player's own limit changes and
cool-off take it too (api/routes_limits.py): a deposit posts before a lower limit or after it.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

import msgspec
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from api import accounts, limits, player_lock, staff_audit
from api.accounts import User
from api.backends import call, get_backends
from api.eligibility import refuse
from integrity import store as integrity_store
from services.common.errors import ServiceError
from services.common.http import InternalClient
from services.ledger.contract import (
    AccountOpened,
    DepositRequest,
    EntryResult,
    OpenAccount,
    WalletBalance,
    WithdrawRequest,
)

Kind = Literal["deposit", "withdrawal"]
PlayerName = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9_.-]{3,32}$")]
Reference = Annotated[str, msgspec.Meta(min_length=1, max_length=120, pattern=r"^[\x20-\x7e]+$")]
IdemKey = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.:-]{8,100}$")]
Cents = Annotated[int, msgspec.Meta(gt=0, le=10_000_000)]  # at most $100,000 per movement

# How long a movement waits for the player's lock (another movement for him, or a compliance
# hold, is in flight) before it is refused 503 `cashier_busy`. The holder keeps it for at
# most its checks and one ledger call (the internal client's 10 s timeout).
LOCK_WAIT_MS = 5_000
_PATHS: dict[Kind, str] = {"deposit": "/v1/deposits", "withdrawal": "/v1/withdrawals"}


class CashierRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    player: PlayerName
    amount: Cents
    reference: Reference
    # The page sends one per click; a retry with the same key is not a second movement.
    idempotency_key: IdemKey | None = None


class CashierResult(msgspec.Struct, frozen=True):
    player: str
    amount: int
    kind: str
    balance: int
    entry_id: int | None
    replayed: bool


class Wallet(msgspec.Struct, frozen=True):
    player: str
    currency: str
    balance: int


async def wallet_of(state: Any, player: str) -> Wallet:
    ledger = get_backends(state).ledger
    try:
        found = await call("ledger", ledger.get(f"/v1/wallets/{player}", WalletBalance))
    except ServiceError as exc:
        if exc.status == 404:
            return Wallet(player=player, currency="USD", balance=0)
        raise
    return Wallet(player=found.player, currency=found.currency, balance=found.balance)


async def open_wallet(state: Any, player: str) -> None:
    """Open the player's ledger wallet (idempotent): the ledger takes no money for a player
    whose wallet was never opened."""
    ledger = get_backends(state).ledger
    await call("ledger", ledger.post("/v1/accounts", OpenAccount(player=player), AccountOpened))


def lock_key(player: str) -> int:
    """The player's cashier lock: a signed 64-bit advisory lock key (api.player_lock)."""
    return player_lock.player_key(player, b"mesa-cashier")


async def lock_player(conn: AsyncConnection, player: str) -> None:
    """Take the player's cashier lock in `conn`'s transaction, until it commits or rolls back
    (api.player_lock says why an advisory lock). The wait is bounded: 503 `cashier_busy`,
    and nothing has changed."""
    busy = ServiceError(
        503, "cashier_busy", "another movement for this player is in progress; try again"
    )
    await player_lock.lock_keys(conn, [lock_key(player)], LOCK_WAIT_MS, busy)


@asynccontextmanager
async def player_locked(db: AsyncEngine, player: str) -> AsyncIterator[AsyncConnection]:
    """A transaction holding the player's cashier lock; it commits on leaving."""
    async with db.begin() as conn:
        await lock_player(conn, player)
        yield conn


async def _replay(ledger: InternalClient, kind: Kind, body: Any) -> EntryResult | None:
    """The ledger's first answer to this key (None: nothing was posted under it). The same
    key with another amount, player or reference is refused 409 `idempotency_key_reused`."""
    try:
        return await call("ledger", ledger.post(f"{_PATHS[kind]}/replay", body, EntryResult))
    except ServiceError as exc:
        if exc.status == 404 and exc.code == "not_posted":
            return None
        raise


async def _check(state: Any, conn: AsyncConnection, data: CashierRequest, kind: Kind) -> None:
    """Every refusal of a new movement, read inside the player's lock."""
    # Money moves only for a verified adult placed in an allowed region; staff act for him,
    # so he is placed by the provider from his own last device check, not by this request.
    refusal = await get_backends(state).place.paid_play_refusal(state.db, data.player, None)
    if refusal is not None:
        raise refuse(refusal, for_partner=False)
    if kind == "deposit":
        await limits.check_deposit(conn, get_backends(state).ledger, data.player, data.amount)
    elif await integrity_store.active_hold(conn, data.player) is not None:
        raise ServiceError(403, "withdrawals_held", "compliance holds this player's withdrawals")


async def move(state: Any, actor: User, data: CashierRequest, kind: Kind) -> CashierResult:
    """Post a cashier deposit or withdrawal for `actor` (a finance user), checked and audited."""
    user = await accounts.get_user(state.db, data.player)
    if user is None or user.role != "player":
        raise ServiceError(404, "no_such_player", "no player with that name")
    key = f"gw-{kind}-{data.idempotency_key or secrets.token_hex(12)}"
    ledger = get_backends(state).ledger
    # The ledger keeps the cashier's reference as typed (the processor's settlement file
    # carries the same one); who recorded the movement is in the staff audit log below.
    body: DepositRequest | WithdrawRequest
    if kind == "deposit":
        body = DepositRequest(
            idempotency_key=key, player=data.player, amount=data.amount, reference=data.reference
        )
    else:
        body = WithdrawRequest(
            idempotency_key=key, player=data.player, amount=data.amount, reference=data.reference
        )
    async with player_locked(state.db, data.player) as conn:
        try:
            await _check(state, conn, data, kind)
        except ServiceError:
            # A retry of a movement already posted passed these checks when it was made (a
            # window that now counts it must not refuse it): the ledger's first answer. Only
            # a key the caller chose can be a retry, and only a refused one needs the lookup:
            # a retry that passes is replayed by the posting itself.
            result = None if data.idempotency_key is None else await _replay(ledger, kind, body)
            if result is None:
                raise
        else:
            if kind == "deposit":
                # players who registered before wallets were opened at sign-up (or while the
                # ledger was unreachable) get theirs now: he exists, checked above
                await open_wallet(state, data.player)
            result = await call("ledger", ledger.post(_PATHS[kind], body, EntryResult))
        await staff_audit.record(
            conn,
            actor,
            f"finance.{kind}",
            f"user:{data.player}",
            data.reference,
            {
                "amount": data.amount,
                "idempotency_key": key,
                "entry_id": result.entry_id,
                "replayed": result.replayed,
            },
        )
    wallet = await wallet_of(state, data.player)
    return CashierResult(
        player=data.player,
        amount=data.amount,
        kind=kind,
        balance=wallet.balance,
        entry_id=result.entry_id,
        replayed=result.replayed,
    )
