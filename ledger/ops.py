"""Ledger operations: each is one SQL function call, i.e. one round trip and one transaction
(or one slot of a shared transaction, through `ledger.batch.GroupCommit`).

The functions (created by the migration) check idempotency, lock the accounts in ascending
id order, validate, write one journal entry with its postings and move the balances.
This module adds request hashing, error mapping and safe retries: every operation carries
an idempotency key, so retrying after a lost connection, a deadlock or a serialization
failure can never post twice.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import msgspec

from ledger.errors import LedgerError, LedgerUnavailable
from ledger.models import EntryResult, decode_result

APP_ROLE = "mesa_app"
MAX_ATTEMPTS = 6
_RETRY_SQLSTATES = {
    "40001",  # serialization_failure
    "40P01",  # deadlock_detected (cannot happen with sorted locking; retried anyway)
    "23505",  # unique_violation: a concurrent request with the same key or natural key won
    "57P01",  # admin_shutdown (backend terminated)
    "57P02",  # crash_shutdown
    "57P03",  # cannot_connect_now
    "08000",
    "08003",
    "08006",
}
_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.InterfaceError,
    asyncpg.exceptions.InternalClientError,
    ConnectionError,
    OSError,
    asyncio.TimeoutError,
)

# Set while an operation call holds a pooled connection (see ``_reset``).
_OPERATION_CALL: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "ledger_operation_call", default=False
)


async def _reset(conn: asyncpg.Connection) -> None:
    """Pool reset on release. asyncpg's default costs one more round trip per acquire
    (advisory unlock, CLOSE ALL, UNLISTEN, RESET ALL). An operation is one autocommit call of
    a function that leaves no session state (its locks are transaction-scoped, its settings
    function-local), so after one there is nothing to reset; asyncpg has already rolled back
    any open transaction. Every other use of the pool (reports, the chain sealer) gets the
    full reset."""
    if _OPERATION_CALL.get():
        return
    query = conn.get_reset_query()
    if query:
        await conn.execute(query)


SQL = {
    "deposit": "SELECT ledger.deposit($1, $2, $3, $4, $5, $6)::text",
    "withdraw": "SELECT ledger.withdraw($1, $2, $3, $4, $5, $6)::text",
    "hold": "SELECT ledger.hold($1, $2, $3, $4, $5, $6, $7)::text",
    "release": "SELECT ledger.release($1, $2, $3)::text",
    "start": "SELECT ledger.start_match($1, $2, $3, $4, $5, $6, $7, $8, $9)::text",
    "settle": "SELECT ledger.settle_match($1, $2, $3, $4, $5, $6)::text",
    "void": "SELECT ledger.void_match($1, $2, $3, $4)::text",
    "reverse": "SELECT ledger.reverse_entry($1, $2, $3, $4)::text",
    "open_wallet": "SELECT ledger.open_wallet($1, $2)::text",
    "replay": "SELECT ledger._replay($1, $2)::text",
}


def request_hash(operation: str, *params: Any) -> bytes:
    """SHA-256 over the canonical JSON of the operation name and its parameters."""
    return hashlib.sha256(msgspec.json.encode([operation, *params])).digest()


def plain_dsn(url: str) -> str:
    for prefix in ("postgresql+asyncpg://", "postgres+asyncpg://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix) :]
    return url


def map_error(exc: asyncpg.PostgresError) -> LedgerError:
    state = getattr(exc, "sqlstate", "") or ""
    message = getattr(exc, "message", str(exc))
    return map_sqlstate(state, message, getattr(exc, "detail", None) or message)


def map_sqlstate(state: str, message: str, detail: str) -> LedgerError:
    if state.startswith("LD") and state[2:].isdigit():
        return LedgerError(int(state[2:]), message, detail)
    if state == "23514":  # a CHECK constraint: the balance floor held even if a check was missed
        return LedgerError(422, "insufficient_funds", detail)
    if state == "22001" or state == "22P02":
        return LedgerError(400, "invalid_request", detail)
    return LedgerError(500, "ledger_error", f"{state}: {message}")


class WalletOpened(msgspec.Struct, frozen=True):
    player: str
    account: str
    currency: str
    opened: bool  # false: it was open already


@dataclass(frozen=True, slots=True)
class Seat:
    seat: int
    player: str
    reservation_id: str


@dataclass(frozen=True, slots=True)
class Winner:
    player: str
    shares: int = 1


class Ledger:
    """Posting operations over an asyncpg pool whose sessions run as ``mesa_app``."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        # What runs an operation: this one alone, or a `ledger.batch.GroupCommit`'s `call`.
        self.runner: Callable[..., Awaitable[str]] = self.call_raw

    @classmethod
    async def connect(
        cls,
        database_url: str,
        *,
        min_size: int = 2,
        max_size: int = 20,
        application_name: str = "mesa-ledger",
        as_app_role: bool = True,
    ) -> Ledger:
        settings = {"application_name": application_name}
        if as_app_role:
            settings["role"] = APP_ROLE
        pool = await asyncpg.create_pool(
            plain_dsn(database_url),
            min_size=min_size,
            max_size=max_size,
            server_settings=settings,
            command_timeout=30,
            reset=_reset,
        )
        return cls(pool)

    async def close(self) -> None:
        await self.pool.close()

    async def call_raw(self, operation: str, *args: Any) -> str:
        """Run one operation function and return its result document as JSON text."""
        sql = SQL[operation]
        delay = 0.005
        last: BaseException | None = None
        token = _OPERATION_CALL.set(True)
        try:
            for _attempt in range(MAX_ATTEMPTS):
                try:
                    async with self.pool.acquire() as conn:
                        raw: str = await conn.fetchval(sql, *args)
                    return raw
                except asyncpg.PostgresError as exc:
                    state = getattr(exc, "sqlstate", "") or ""
                    if state not in _RETRY_SQLSTATES:
                        raise map_error(exc) from None
                    last = exc
                except _CONNECTION_ERRORS as exc:
                    last = exc
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)
        finally:
            _OPERATION_CALL.reset(token)
        if isinstance(last, asyncpg.PostgresError) and last.sqlstate == "23505":
            raise LedgerError(409, "conflict", str(last)) from None
        raise LedgerUnavailable(f"database unavailable: {type(last).__name__}: {last}")

    async def prior(self, key: str, digest: bytes) -> str | None:
        """The first answer to the posting made under `key` (`replayed: true`), as JSON text;
        None when nothing was posted under it. Reads only. 409 `idempotency_key_reused` when
        `key` posted another request than the one `digest` hashes (see `*_args`)."""
        raw: str | None = await self.call_raw("replay", key, digest)
        return raw

    async def _call(self, operation: str, *args: Any) -> EntryResult:
        return decode_result(await self.runner(operation, *args))

    # --- the operations -------------------------------------------------------------------

    def deposit_args(
        self, key: str, player: str, amount: int, currency: str, reference: str
    ) -> tuple[Any, ...]:
        digest = request_hash("deposit", player, amount, currency, reference)
        return (key, digest, player, amount, currency, reference)

    async def open_wallet(self, player: str, currency: str = "USD") -> WalletOpened:
        """Open wallet:<player> (at sign-up). Idempotent: opening an open wallet changes
        nothing (`opened` false); 422 `wrong_currency` when it is kept in another currency.
        Every posting to a wallet never opened is refused with 404 `unknown_account`."""
        raw = await self.call_raw("open_wallet", player, currency)
        return msgspec.json.decode(raw, type=WalletOpened)

    async def deposit(
        self, key: str, player: str, amount: int, currency: str = "USD", reference: str = ""
    ) -> EntryResult:
        """Cashier deposit: external:cashier -> wallet:<player> (opened by `open_wallet`)."""
        return await self._call(
            "deposit", *self.deposit_args(key, player, amount, currency, reference)
        )

    def withdraw_args(
        self, key: str, player: str, amount: int, currency: str, reference: str
    ) -> tuple[Any, ...]:
        digest = request_hash("withdraw", player, amount, currency, reference)
        return (key, digest, player, amount, currency, reference)

    async def withdraw(
        self, key: str, player: str, amount: int, currency: str = "USD", reference: str = ""
    ) -> EntryResult:
        """Cashier withdrawal: wallet:<player> -> external:cashier."""
        return await self._call(
            "withdraw", *self.withdraw_args(key, player, amount, currency, reference)
        )

    def hold_args(
        self, key: str, player: str, reservation_id: str, amount: int, currency: str, table_id: str
    ) -> tuple[Any, ...]:
        digest = request_hash("hold", player, reservation_id, amount, currency, table_id)
        return (key, digest, player, reservation_id, amount, currency, table_id)

    async def hold(
        self,
        key: str,
        player: str,
        reservation_id: str,
        amount: int,
        currency: str = "USD",
        table_id: str = "",
    ) -> EntryResult:
        """Reserve a stake for one seat: wallet:<player> -> hold:<reservation_id>."""
        return await self._call(
            "hold", *self.hold_args(key, player, reservation_id, amount, currency, table_id)
        )

    def release_args(self, key: str, reservation_id: str) -> tuple[Any, ...]:
        return (key, request_hash("release", reservation_id), reservation_id)

    async def release(self, key: str, reservation_id: str) -> EntryResult:
        """Give a hold back: hold:<reservation_id> -> wallet, and close the hold."""
        return await self._call("release", *self.release_args(key, reservation_id))

    def start_args(
        self,
        key: str,
        match_id: str,
        tier: str,
        variant: str,
        seats: Sequence[Seat],
        currency: str,
    ) -> tuple[Any, ...]:
        ordered = sorted(seats, key=lambda s: s.seat)
        seat_list = [[s.seat, s.player, s.reservation_id] for s in ordered]
        digest = request_hash("start", match_id, tier, variant, currency, seat_list)
        return (
            key,
            digest,
            match_id,
            tier,
            variant,
            currency,
            [s.seat for s in ordered],
            [s.player for s in ordered],
            [s.reservation_id for s in ordered],
        )

    async def start_match(
        self,
        key: str,
        match_id: str,
        tier: str,
        variant: str,
        seats: Sequence[Seat],
        currency: str = "USD",
    ) -> EntryResult:
        """Every hold into pot:<match_id>, all or nothing; the holds are closed."""
        return await self._call(
            "start", *self.start_args(key, match_id, tier, variant, seats, currency)
        )

    def settle_args(
        self, key: str, match_id: str, winners: Sequence[Winner], rate_bp: int
    ) -> tuple[Any, ...]:
        winner_list = [[w.player, w.shares] for w in winners]
        digest = request_hash("settle", match_id, winner_list, rate_bp)
        return (
            key,
            digest,
            match_id,
            [w.player for w in winners],
            [w.shares for w in winners],
            rate_bp,
        )

    async def settle_match(
        self, key: str, match_id: str, winners: Sequence[Winner], rate_bp: int
    ) -> EntryResult:
        """Empty the pot: commission to a house shard, the rest to the winners; close it."""
        return await self._call("settle", *self.settle_args(key, match_id, winners, rate_bp))

    def void_args(self, key: str, match_id: str, reason: str) -> tuple[Any, ...]:
        return (key, request_hash("void", match_id, reason), match_id, reason)

    async def void_match(self, key: str, match_id: str, reason: str = "") -> EntryResult:
        """Every stake back to the wallet it came from; the pot is closed."""
        return await self._call("void", *self.void_args(key, match_id, reason))

    def reverse_args(self, key: str, entry_id: int, reference: str) -> tuple[Any, ...]:
        return (key, request_hash("reverse", entry_id, reference), entry_id, reference)

    async def reverse(self, key: str, entry_id: int, reference: str = "") -> EntryResult:
        """Correct a cashier deposit or withdrawal with one reversing entry (at most once):
        the same accounts with the amounts negated; the reversed entry is left as posted."""
        return await self._call("reverse", *self.reverse_args(key, entry_id, reference))

    # --- small reads used by the service ----------------------------------------------------

    async def wallet_balance(self, player: str) -> tuple[int, str, int] | None:
        """(balance, currency, version) of wallet:<player>, or None."""
        async with self.pool.acquire() as conn:
            row = await conn.fetchrow(
                "SELECT balance, currency, version FROM ledger.accounts WHERE code = $1",
                "wallet:" + player,
            )
        if row is None:
            return None
        return int(row["balance"]), str(row["currency"]), int(row["version"])

    async def unusable_holds(self, seats: list[Seat], currency: str) -> list[str]:
        """The reservations among `seats` whose hold cannot be staked now: missing, another
        player's, in another currency, released or empty (what start_match refuses)."""
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(
                """
                SELECT d.reservation FROM unnest($1::text[], $2::text[]) AS d(reservation, player)
                LEFT JOIN ledger.accounts a ON a.code = 'hold:' || d.reservation AND a.kind = 'hold'
                WHERE a.id IS NULL OR a.player <> d.player OR a.currency <> $3
                   OR a.closed_at IS NOT NULL OR a.balance <= 0
                """,
                [s.reservation_id for s in seats],
                [s.player for s in seats],
                currency,
            )
        return [str(r["reservation"]) for r in rows]

    async def account(self, code: str) -> dict[str, Any] | None:
        async with self.pool.acquire() as conn:
            row = await conn.fetchrow(
                "SELECT code, kind, currency, balance, version, closed_at IS NOT NULL AS closed "
                "FROM ledger.accounts WHERE code = $1",
                code,
            )
        return None if row is None else dict(row)
