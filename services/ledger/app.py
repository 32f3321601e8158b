"""The ledger service: the internal HTTP front over the ``ledger`` library.

Each write is one SQL function call; the table's money (holds, releases, starts, settlements,
voids) goes through the group commit (`ledger.batch`), which runs operations that arrive
together in one transaction. The JSON document the function returns is passed through to the
caller unchanged. A background task seals the hash chain.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from litestar import Litestar, MediaType, Response, get, post
from litestar.datastructures import State
from litestar.params import FromPath, FromQuery, JSONBody, Parameter
from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from ledger import chain, closing, integrity_reads, reports, settlement
from ledger.batch import GroupCommit
from ledger.errors import LedgerError
from ledger.ops import Ledger, Seat, Winner
from services.common.app import create_service_app
from services.common.auth import (
    ENGINE,
    GATEWAY,
    INTEGRITY,
    MATCHMAKING,
    callers_opt,
)
from services.common.config import Settings
from services.common.errors import ServiceError
from services.common.logging import get_logger
from services.common.metrics import (
    LEDGER_POSTINGS,
    OUTSTANDING_HOLDS,
    RECONCILIATION_DISCREPANCIES,
    REGISTRY,
    child,
)
from services.common.secret_file import SecretFileError, read_secret
from services.ledger.contract import (
    MAX_ACTIVITY_DAYS,
    MAX_ACTIVITY_WINDOWS,
    MAX_INTEGRITY_PAGE,
    MAX_JOURNAL_PAGE,
    MAX_POTS_PAGE,
    MAX_STATEMENT_PAGE,
    SETTLEMENT_BODY_BYTES,
    AccountOpened,
    CashierMovePage,
    CloseAction,
    CloseKey,
    DepositRequest,
    HoldRequest,
    OpenAccount,
    ReleaseRequest,
    ReversalRequest,
    SettledPotPage,
    SettleMatchRequest,
    SettlementUpload,
    StartMatchRequest,
    VoidMatchRequest,
    WalletBalance,
    WithdrawRequest,
)

log = get_logger()
# Once a second. More often splits the same work into shorter bursts, but gives the sealer more
# chances to find no gap between posting transactions and queue for the chain lock, holding new
# postings behind it (four times a second showed no measurable gain).
SEAL_INTERVAL_S = 1.0


class _GroupCommitCollector(Collector):
    """The group commit's counters, read at scrape time: operations over calls is the mean
    number of operations a database transaction carried."""

    def __init__(self) -> None:
        self.group: GroupCommit | None = None

    def collect(self) -> Iterator[Metric]:
        group = self.group
        calls = CounterMetricFamily(
            "mesa_ledger_commit_calls", "Database calls that ran posting operations"
        )
        operations = CounterMetricFamily(
            "mesa_ledger_commit_operations", "Posting operations run through the group commit"
        )
        calls.add_metric([], group.calls if group else 0)
        operations.add_metric([], group.operations if group else 0)
        yield calls
        yield operations


_GROUP_COMMIT_METRICS = _GroupCommitCollector()
REGISTRY.register(_GROUP_COMMIT_METRICS)


def _ledger(state: State) -> Ledger:
    ledger: Ledger = state.ledger
    return ledger


def _json(raw: str) -> Response[bytes]:
    return Response(raw.encode(), media_type=MediaType.JSON)


# Who may move a player's money in and out: only the gateway, whose cashier (api/cashier.py)
# checks identity, region, limits, cool-off and holds under the player's lock and audits it.
CASHIER_DESK = callers_opt(GATEWAY)


async def _posted(state: State, operation: str, args: tuple[Any, ...]) -> Response[bytes]:
    """The posting's result document, passed through to the caller as it is."""
    return Response(await _post(state, operation, args), media_type=MediaType.JSON)


class _Replay(msgspec.Struct):
    """The one field of a posting's result the service reads (a replay is not a new posting)."""

    replayed: bool = False


def _refusal(exc: LedgerError, operation: str) -> ServiceError:
    if exc.status >= 500:
        log.error("ledger_error", code=exc.code, detail=exc.detail, operation=operation)
        return ServiceError(503 if exc.status == 503 else 500, exc.code, exc.detail)
    return ServiceError(exc.status, exc.code, exc.detail)


async def _post(state: State, operation: str, args: tuple[Any, ...]) -> bytes:
    """Run one posting operation: its result document, or a ServiceError with its refusal."""
    group: GroupCommit = state.group_commit
    try:
        raw = await group.call(operation, *args)
    except LedgerError as exc:
        raise _refusal(exc, operation) from None
    if not msgspec.json.decode(raw, type=_Replay).replayed:
        child(LEDGER_POSTINGS, operation).inc()
    return raw.encode()


@post("/v1/deposits", status_code=200, opt=CASHIER_DESK)
async def deposit(state: State, data: JSONBody[DepositRequest]) -> Response[bytes]:
    args = _ledger(state).deposit_args(
        data.idempotency_key, data.player, data.amount, data.currency, data.reference
    )
    return await _posted(state, "deposit", args)


@post("/v1/withdrawals", status_code=200, opt=CASHIER_DESK)
async def withdraw(state: State, data: JSONBody[WithdrawRequest]) -> Response[bytes]:
    args = _ledger(state).withdraw_args(
        data.idempotency_key, data.player, data.amount, data.currency, data.reference
    )
    return await _posted(state, "withdraw", args)


async def _replayed(state: State, args: tuple[Any, ...]) -> Response[bytes]:
    """The first answer to a posting's key and request (`args`), or 404 `not_posted`."""
    try:
        raw = await _ledger(state).prior(args[0], args[1])
    except LedgerError as exc:
        raise _refusal(exc, "replay") from None
    if raw is None:
        raise ServiceError(404, "not_posted", "nothing was posted under this idempotency key")
    return _json(raw)


# A retry's answer before its checks: the gateway asks whether a cashier key was posted
# already, so a limit that now counts the first posting does not refuse its retry. Reads only.
@post("/v1/deposits/replay", status_code=200, opt=callers_opt(GATEWAY))
async def deposit_replay(state: State, data: JSONBody[DepositRequest]) -> Response[bytes]:
    args = _ledger(state).deposit_args(
        data.idempotency_key, data.player, data.amount, data.currency, data.reference
    )
    return await _replayed(state, args)


@post("/v1/withdrawals/replay", status_code=200, opt=callers_opt(GATEWAY))
async def withdraw_replay(state: State, data: JSONBody[WithdrawRequest]) -> Response[bytes]:
    args = _ledger(state).withdraw_args(
        data.idempotency_key, data.player, data.amount, data.currency, data.reference
    )
    return await _replayed(state, args)


# A correction is posted only for an approved refund proposal (api/refunds.py: proposed, then
# approved by another finance user), so only the gateway asks for one.
@post("/v1/reversals", status_code=200, opt=callers_opt(GATEWAY))
async def reverse(state: State, data: JSONBody[ReversalRequest]) -> Response[bytes]:
    args = _ledger(state).reverse_args(data.idempotency_key, data.entry_id, data.reference)
    return await _posted(state, "reverse", args)


# The table's money (holds, releases, match start, settlement, void) goes through the group
# commit like the cashier's; each route accepts only the service that runs that step.


@post("/v1/holds", status_code=200, opt=callers_opt(MATCHMAKING))
async def hold(state: State, data: JSONBody[HoldRequest]) -> Response[bytes]:
    args = _ledger(state).hold_args(
        data.idempotency_key,
        data.player,
        data.reservation_id,
        data.amount,
        data.currency,
        data.table_id,
    )
    return await _posted(state, "hold", args)


@post("/v1/holds/release", status_code=200, opt=callers_opt(MATCHMAKING))
async def release(state: State, data: JSONBody[ReleaseRequest]) -> Response[bytes]:
    return await _posted(
        state, "release", _ledger(state).release_args(data.idempotency_key, data.reservation_id)
    )


# start_match's refusals about a seat's hold (ledger/sql/start_match.sql).
HOLD_REFUSALS = frozenset({"unknown_hold", "hold_player_mismatch", "wrong_currency", "hold_closed"})


@post("/v1/matches/start", status_code=200, opt=callers_opt(MATCHMAKING))
async def start_match(state: State, data: JSONBody[StartMatchRequest]) -> Response[bytes]:
    seats = [Seat(s.seat, s.player, s.reservation_id) for s in data.seats]
    args = _ledger(state).start_args(
        data.idempotency_key, data.match_id, data.tier, data.variant, seats, data.currency
    )
    try:
        return await _posted(state, "start", args)
    except ServiceError as exc:
        if exc.code in HOLD_REFUSALS:
            # Which seats' holds cannot be staked, as data: matchmaking drops those seats.
            held = await _ledger(state).unusable_holds(seats, data.currency)
            exc.refs = {"reservations": held}
        raise


@post("/v1/matches/settle", status_code=200, opt=callers_opt(ENGINE))
async def settle_match(state: State, data: JSONBody[SettleMatchRequest]) -> Response[bytes]:
    settings: Settings = state.settings
    winners = [Winner(w.player, w.shares) for w in data.winners]
    args = _ledger(state).settle_args(
        data.idempotency_key, data.match_id, winners, settings.commission_rate_bp
    )
    return await _posted(state, "settle", args)


@post("/v1/matches/void", status_code=200, opt=callers_opt(ENGINE, MATCHMAKING))
async def void_match(state: State, data: JSONBody[VoidMatchRequest]) -> Response[bytes]:
    args = _ledger(state).void_args(data.idempotency_key, data.match_id, data.reason)
    return await _posted(state, "void", args)


# Reads: the gateway's player and finance screens.
WALLET_READERS = callers_opt(GATEWAY)
REPORT_READERS = callers_opt(GATEWAY)


@post("/v1/accounts", status_code=200, opt=CASHIER_DESK)
async def open_account(state: State, data: JSONBody[OpenAccount]) -> AccountOpened:
    """Open a player's wallet (the gateway, when a player registers); idempotent."""
    try:
        opened = await _ledger(state).open_wallet(data.player, data.currency)
    except LedgerError as exc:
        if exc.status >= 500:
            log.error("ledger_error", code=exc.code, detail=exc.detail, operation="open_wallet")
            raise ServiceError(503 if exc.status == 503 else 500, exc.code, exc.detail) from None
        raise ServiceError(exc.status, exc.code, exc.detail) from None
    return AccountOpened(
        player=opened.player,
        account=opened.account,
        currency=opened.currency,
        opened=opened.opened,
    )


@get("/v1/wallets/{player:str}", opt=WALLET_READERS)
async def wallet(player: FromPath[str], state: State) -> WalletBalance:
    found = await _ledger(state).wallet_balance(player)
    if found is None:
        raise ServiceError(404, "unknown_account", f"no wallet for player {player}")
    balance, currency, version = found
    return WalletBalance(
        player=player,
        account="wallet:" + player,
        currency=currency,
        balance=balance,
        version=version,
    )


# --- finance reports ---------------------------------------------------------------------


def _parse_time(name: str, raw: str | None) -> dt.datetime | None:
    if raw is None or raw == "":
        return None
    try:
        value = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise ServiceError(400, "invalid_time", f"{name} must be an ISO 8601 time") from None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def _parse_date(name: str, raw: str | None) -> dt.date | None:
    if raw is None or raw == "":
        return None
    try:
        return dt.date.fromisoformat(raw)
    except ValueError:
        raise ServiceError(400, "invalid_date", f"{name} must be YYYY-MM-DD") from None


def _rows(rows: list[dict[str, Any]], fmt: str) -> Response[Any]:
    if fmt == "csv":
        return Response(reports.to_csv(rows), media_type="text/csv")
    if fmt != "json":
        raise ServiceError(400, "invalid_format", "format must be json or csv")
    return _json(reports.to_json(rows))


@get("/v1/reports/trial-balance", opt=REPORT_READERS)
async def trial_balance_report(
    state: State, at: FromQuery[str | None] = None, format: FromQuery[str] = "json"
) -> Response[Any]:
    when = _parse_time("at", at)
    async with _ledger(state).pool.acquire() as conn:
        report = await reports.trial_balance(conn, when)
    if format == "csv":
        return _rows(report["accounts"], "csv")
    return _json(reports.to_json(report))


Label = Annotated[str | None, Parameter(min_length=1, max_length=64)]


@get("/v1/reports/pots", opt=REPORT_READERS)
async def pots_report(
    state: State,
    status: FromQuery[str | None] = None,
    after: Annotated[str | None, Parameter(min_length=1, max_length=128)] = None,
    limit: Annotated[int, Parameter(ge=1, le=MAX_POTS_PAGE)] = MAX_POTS_PAGE,
    format: FromQuery[str] = "json",
    day: FromQuery[str | None] = None,
    tier: Label = None,
    variant: Label = None,
) -> Response[Any]:
    """One page of pots, oldest first, after the pot of match `after`; a page shorter than
    `limit` is the last. `day` (of closing, UTC), `tier` and `variant` narrow it."""
    if status not in (None, "open", "settled", "voided"):
        raise ServiceError(400, "invalid_status", "status must be open, settled or voided")
    async with _ledger(state).pool.acquire() as conn:
        rows = await reports.pots(
            conn,
            status,
            after=after,
            limit=limit,
            day=_parse_date("day", day),
            tier=tier,
            variant=variant,
        )
    return _rows(rows, format)


@get("/v1/reports/matches/{match_id:str}", opt=REPORT_READERS)
async def match_report(state: State, match_id: FromPath[str]) -> Response[Any]:
    """A match's money: its pot, stakes, and the entries (with postings) that moved it."""
    if not 1 <= len(match_id) <= 128:
        raise ServiceError(400, "invalid_request", "match id: 1 to 128 characters")
    async with _ledger(state).pool.acquire() as conn:
        report = await reports.match(conn, match_id)
    if report is None:
        raise ServiceError(404, "unknown_match", f"no pot for match {match_id}")
    return _json(reports.to_json(report))


@get("/v1/reports/entries/{entry_id:int}", opt=REPORT_READERS)
async def entry_report(state: State, entry_id: FromPath[int]) -> Response[Any]:
    """One journal entry with its postings."""
    if not 1 <= entry_id <= 2**62:
        raise ServiceError(400, "invalid_request", "entry id out of range")
    async with _ledger(state).pool.acquire() as conn:
        report = await reports.entry(conn, entry_id)
    if report is None:
        raise ServiceError(404, "unknown_entry", f"no entry {entry_id}")
    return _json(reports.to_json(report))


@get("/v1/reports/commission", opt=REPORT_READERS)
async def commission_report(
    state: State,
    by: FromQuery[str] = "day,tier,variant",
    since: FromQuery[str | None] = None,
    until: FromQuery[str | None] = None,
    format: FromQuery[str] = "json",
) -> Response[Any]:
    dims = tuple(d for d in by.split(",") if d)
    if any(d not in ("day", "tier", "variant") for d in dims):
        raise ServiceError(400, "invalid_grouping", "by is a comma list of day, tier, variant")
    async with _ledger(state).pool.acquire() as conn:
        rows = await reports.commission(
            conn, dims, _parse_date("since", since), _parse_date("until", until)
        )
    return _rows(rows, format)


@get("/v1/reports/statements/{player:str}", opt=REPORT_READERS)
async def statement_report(
    player: FromPath[str],
    state: State,
    since: FromQuery[str | None] = None,
    until: FromQuery[str | None] = None,
    after: Annotated[int, Parameter(ge=0, le=2**62)] = 0,
    limit: Annotated[int, Parameter(ge=1, le=MAX_STATEMENT_PAGE)] = MAX_STATEMENT_PAGE,
    format: FromQuery[str] = "json",
) -> Response[Any]:
    """One page of the wallet's lines after version `after` (`next`: the page after)."""
    async with _ledger(state).pool.acquire() as conn:
        report = await reports.statement(
            conn,
            player,
            _parse_time("since", since),
            _parse_time("until", until),
            after=after,
            limit=limit,
        )
    if report is None:
        raise ServiceError(404, "unknown_account", f"no wallet for player {player}")
    if format == "csv":
        return _rows(report["lines"], "csv")
    return _json(reports.to_json(report))


@get("/v1/reports/balance", opt=REPORT_READERS)
async def balance_report(
    state: State, account: FromQuery[str], at: FromQuery[str]
) -> Response[Any]:
    when = _parse_time("at", at)
    if when is None:
        raise ServiceError(400, "invalid_time", "at is required")
    async with _ledger(state).pool.acquire() as conn:
        balance = await reports.balance_at(conn, account, when)
    if balance is None:
        raise ServiceError(404, "unknown_account", f"no account {account}")
    return _json(reports.to_json({"account": account, "at": when, "balance": balance}))


def _journal_cursor(raw: str | None) -> tuple[int, int]:
    if raw is None or raw == "":
        return (0, 0)
    entry, _, leg = raw.partition(":")
    if not (entry.isdigit() and leg.isdigit() and len(entry) <= 18 and len(leg) <= 4):
        raise ServiceError(400, "invalid_cursor", "after is ENTRY:LEG (a page's next)")
    return int(entry), int(leg)


@get("/v1/reports/journal", opt=REPORT_READERS)
async def journal_report(
    state: State,
    since: FromQuery[str | None] = None,
    until: FromQuery[str | None] = None,
    after: FromQuery[str | None] = None,
    limit: Annotated[int, Parameter(ge=1, le=MAX_JOURNAL_PAGE)] = MAX_JOURNAL_PAGE,
    format: FromQuery[str] = "json",
) -> Response[Any]:
    """One page of postings after `after` (ENTRY:LEG), as {rows, next} or as CSV rows."""
    cursor = _journal_cursor(after)
    async with _ledger(state).pool.acquire() as conn:
        rows = await reports.journal(
            conn,
            _parse_time("since", since),
            _parse_time("until", until),
            after=cursor,
            limit=limit + 1,
        )
    more = len(rows) > limit
    rows = rows[:limit]
    if format == "csv":
        return Response(reports.to_csv(rows, list(reports.JOURNAL_COLUMNS)), media_type="text/csv")
    if format != "json":
        raise ServiceError(400, "invalid_format", "format must be json or csv")
    last = rows[-1] if rows else None
    page = {"rows": rows, "next": f"{last['entry_id']}:{last['leg']}" if more and last else None}
    # compact: a page is read by a program (the gateway's export), not by a person
    return Response(msgspec.json.encode(page), media_type=MediaType.JSON)


@get("/v1/reports/reconcile", opt=REPORT_READERS)
async def reconcile_report(state: State, date: FromQuery[str | None] = None) -> Response[Any]:
    async with _ledger(state).pool.acquire() as conn:
        report = await reports.reconcile(conn, _parse_date("date", date))
    return _json(reports.to_json(report))


@get("/v1/reports/chain", opt=REPORT_READERS)
async def chain_report(state: State) -> Response[Any]:
    async with _ledger(state).pool.acquire() as conn:
        await chain.seal(conn)
        report = await chain.verify(conn)
    return _json(reports.to_json(report.as_dict()))


# --- the daily close ----------------------------------------------------------------------


def _day(raw: str) -> dt.date:
    if len(raw) != 10:
        raise ServiceError(400, "invalid_date", "day must be YYYY-MM-DD")
    found = _parse_date("day", raw)
    if found is None:
        raise ServiceError(400, "invalid_date", "day must be YYYY-MM-DD")
    if not closing.FIRST_DAY <= found <= closing.LAST_DAY:
        raise ServiceError(
            400, "invalid_date", f"day must be {closing.FIRST_DAY} to {closing.LAST_DAY}"
        )
    return found


def _now(state: State) -> dt.datetime:
    now: dt.datetime = state.clock()
    return now


def _refused(exc: LedgerError, operation: str) -> ServiceError:
    if exc.status >= 500:
        log.error("ledger_error", code=exc.code, detail=exc.detail, operation=operation)
    return ServiceError(exc.status, exc.code, exc.detail)


def _signing_key(state: State) -> Ed25519PrivateKey:
    settings: Settings = state.settings
    path = settings.report_key_file
    if path is None:
        raise ServiceError(503, "no_report_key", "MESA_REPORT_KEY_FILE is not set")
    try:
        return closing.load_signing_key(read_secret(path))
    except (OSError, SecretFileError, ValueError) as exc:
        raise ServiceError(503, "no_report_key", f"report key {path}: {exc}"[:200]) from None


# A proposal or approval carries up to MAX_CLOSE_ALERTS alerts (about 330 bytes each at most):
# more than the services' default body limit.
CLOSE_MAX_BODY_BYTES = 2 * 1024 * 1024


def _integrity(data: CloseAction) -> dict[str, Any]:
    """The day's integrity alerts a proposal or an approval must carry (the report's section)."""
    if data.integrity is None:
        raise ServiceError(
            400, "integrity_summary_required", "a close carries the day's integrity alerts"
        )
    found: dict[str, Any] = msgspec.to_builtins(data.integrity)
    return found


@get("/v1/closes", opt=REPORT_READERS)
async def closes(state: State) -> Response[Any]:
    async with _ledger(state).pool.acquire() as conn:
        return _json(reports.to_json(await closing.listing(conn)))


@get("/v1/closes/key", opt=REPORT_READERS)
async def close_key(state: State) -> CloseKey:
    public = _signing_key(state).public_key()
    pem = public.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode()
    return CloseKey(
        algorithm="Ed25519",
        public_key=closing.public_key_hex(public),
        pem=pem,
        format=closing.FORMAT,
    )


@get("/v1/closes/{day:str}", opt=REPORT_READERS)
async def close_of_day(day: FromPath[str], state: State) -> Response[Any]:
    async with _ledger(state).pool.acquire() as conn:
        found = await closing.get(conn, _day(day))
    if found is None:
        raise ServiceError(404, "unknown_close", f"{day} is neither proposed nor closed")
    return _json(reports.to_json(found))


@get("/v1/closes/{day:str}/draft", opt=REPORT_READERS)
async def close_draft(day: FromPath[str], state: State) -> Response[Any]:
    try:
        report = await closing.draft(_ledger(state).pool, _day(day), _now(state))
    except LedgerError as exc:
        raise _refused(exc, "close_draft") from None
    return _json(reports.to_json(report))


@post(
    "/v1/closes/{day:str}/propose",
    status_code=200,
    opt=REPORT_READERS,
    request_max_body_size=CLOSE_MAX_BODY_BYTES,
)
async def close_propose(
    day: FromPath[str], state: State, data: JSONBody[CloseAction]
) -> Response[Any]:
    try:
        found = await closing.propose(
            _ledger(state).pool, _day(day), data.actor, _now(state), _integrity(data)
        )
    except LedgerError as exc:
        raise _refused(exc, "close_propose") from None
    log.info("day_close_proposed", day=day, actor=data.actor)
    return _json(reports.to_json(found))


@post(
    "/v1/closes/{day:str}/approve",
    status_code=200,
    opt=REPORT_READERS,
    request_max_body_size=CLOSE_MAX_BODY_BYTES,
)
async def close_approve(
    day: FromPath[str], state: State, data: JSONBody[CloseAction]
) -> Response[Any]:
    the_day = _day(day)
    key = _signing_key(state)
    try:
        found = await closing.approve(
            _ledger(state).pool, the_day, data.actor, _now(state), key, _integrity(data)
        )
    except LedgerError as exc:
        raise _refused(exc, "close_approve") from None
    log.info("day_closed", day=day, actor=data.actor)
    return _json(reports.to_json(found))


@post("/v1/closes/{day:str}/withdraw", status_code=200, opt=REPORT_READERS)
async def close_withdraw(
    day: FromPath[str], state: State, data: JSONBody[CloseAction]
) -> Response[Any]:
    try:
        found = await closing.withdraw(_ledger(state).pool, _day(day))
    except LedgerError as exc:
        raise _refused(exc, "close_withdraw") from None
    log.info("day_close_withdrawn", day=day, actor=data.actor)
    return _json(reports.to_json(found))


CLOSE_ROUTES = [
    closes,
    close_key,
    close_of_day,
    close_draft,
    close_propose,
    close_approve,
    close_withdraw,
]


@get("/v1/players/{player:str}/activity", opt=REPORT_READERS)
async def player_activity(
    player: FromPath[str],
    state: State,
    since: Annotated[list[str], Parameter(min_items=1, max_items=MAX_ACTIVITY_WINDOWS)],
) -> Response[Any]:
    """A player's deposits and net loss since each `since` (the gateway's limits): read on
    every paid seat and deposit of a player with limits, so bounded to a few recent windows."""
    now = dt.datetime.now(dt.UTC)
    sinces: list[dt.datetime] = []
    for raw in since:
        when = _parse_time("since", raw)
        # a minute's grace for a caller's clock a little ahead of this one
        ahead = when is not None and when > now + dt.timedelta(minutes=1)
        if when is None or ahead or now - when > dt.timedelta(days=MAX_ACTIVITY_DAYS):
            raise ServiceError(
                400,
                "invalid_time",
                f"since must be a time within the last {MAX_ACTIVITY_DAYS} days",
            )
        sinces.append(when)
    async with _ledger(state).pool.acquire() as conn:
        report = await reports.player_activity(conn, player, sinces)
    if report is None:
        raise ServiceError(404, "unknown_account", f"no wallet for player {player}")
    return _json(reports.to_json(report))


# --- integrity scan reads ------------------------------------------------------------------

# Who runs the integrity scan: the gateway's background task and `mesa integrity scan`.
INTEGRITY_READERS = callers_opt(GATEWAY, INTEGRITY)


def _since(raw: str) -> dt.datetime:
    when = _parse_time("since", raw)
    if when is None:
        raise ServiceError(400, "invalid_time", "since is required")
    return when


@get("/v1/integrity/pots", opt=INTEGRITY_READERS)
async def integrity_pots(
    state: State,
    since: Annotated[str, Parameter(min_length=1, max_length=40)],
    after: Annotated[int, Parameter(ge=0, le=2**62)] = 0,
    limit: Annotated[int, Parameter(ge=1, le=MAX_INTEGRITY_PAGE)] = MAX_INTEGRITY_PAGE,
) -> Response[bytes]:
    """Settled pots since `since` after settlement entry `after`, oldest first, with each
    seat's stake and payout; `next` is the `after` of the next page."""
    async with _ledger(state).pool.acquire() as conn:
        pots = await integrity_reads.settled_pots(conn, _since(since), after, limit)
    page = {"pots": pots, "next": pots[-1]["close_entry_id"] if len(pots) == limit else None}
    return Response(
        msgspec.json.encode(msgspec.convert(page, SettledPotPage)), media_type=MediaType.JSON
    )


@get("/v1/integrity/cashier", opt=INTEGRITY_READERS)
async def integrity_cashier(
    state: State,
    since: Annotated[str, Parameter(min_length=1, max_length=40)],
    after: Annotated[int, Parameter(ge=0, le=2**62)] = 0,
    limit: Annotated[int, Parameter(ge=1, le=MAX_INTEGRITY_PAGE)] = MAX_INTEGRITY_PAGE,
) -> Response[bytes]:
    """Deposits and withdrawals since `since` after entry `after`, oldest first."""
    async with _ledger(state).pool.acquire() as conn:
        moves = await integrity_reads.cashier_moves(conn, _since(since), after, limit)
    page = {"moves": moves, "next": moves[-1]["entry_id"] if len(moves) == limit else None}
    return Response(
        msgspec.json.encode(msgspec.convert(page, CashierMovePage)), media_type=MediaType.JSON
    )


# --- settlement files (ledger/settlement.py) -----------------------------------------------

MAX_SETTLEMENT_LIST = 50


@post(
    "/v1/settlements",
    status_code=200,
    opt=REPORT_READERS,
    request_max_body_size=SETTLEMENT_BODY_BYTES,
)
async def import_settlement(state: State, data: JSONBody[SettlementUpload]) -> Response[Any]:
    """Import a settlement file: its match, or `refused` with each wrong line (nothing kept).
    The same file again answers the first import (`replayed`)."""
    content = data.content.encode()
    if len(content) > settlement.MAX_FILE_BYTES:
        raise ServiceError(
            413, "file_too_large", f"a settlement file is at most {settlement.MAX_FILE_BYTES} bytes"
        )
    async with _ledger(state).pool.acquire() as conn:
        try:
            result = await settlement.import_file(conn, content, data.filename)
        except settlement.Refused as refused:
            answer = {"refused": True, "errors": refused.errors}
            return Response(msgspec.json.encode(answer), media_type=MediaType.JSON)
    log.info(
        "settlement_imported",
        import_id=result["import_id"],
        lines=result["lines"],
        replayed=result["replayed"],
    )
    return Response(msgspec.json.encode(result), media_type=MediaType.JSON)


@get("/v1/settlements", opt=REPORT_READERS)
async def list_settlements(state: State) -> Response[Any]:
    async with _ledger(state).pool.acquire() as conn:
        rows = await settlement.list_imports(conn, MAX_SETTLEMENT_LIST)
    return Response(msgspec.json.encode(rows), media_type=MediaType.JSON)


@get("/v1/settlements/{import_id:int}", opt=REPORT_READERS)
async def get_settlement(state: State, import_id: FromPath[int]) -> Response[Any]:
    if not 1 <= import_id <= 2**62:
        raise ServiceError(400, "invalid_request", "import id out of range")
    async with _ledger(state).pool.acquire() as conn:
        result = await settlement.get_import(conn, import_id)
    if result is None:
        raise ServiceError(404, "unknown_settlement", f"no settlement import {import_id}")
    return Response(msgspec.json.encode(result), media_type=MediaType.JSON)


async def _sealer(app: Litestar) -> None:
    while True:
        await asyncio.sleep(SEAL_INTERVAL_S)
        try:
            async with _ledger(app.state).pool.acquire() as conn:
                await chain.seal(conn)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # keep sealing on the next tick
            log.warning("chain_seal_failed", error=str(exc))


# How often the service recounts the open holds (a read of the accounts) and reconciles the
# current UTC day (every check over the day's entries: Prometheus alerts on
# mesa_reconciliation_discrepancies > 0). Both are full reads, so the count runs every minute
# and the reconciliation every quarter of an hour, neither at start-up (a restarted service
# must not start with a burst of reads).
HOLDS_INTERVAL_S = 60.0
RECONCILE_EVERY = 15  # counts


# The count reads every account (holds stay as closed accounts), so it reads them in slices
# of ids with a pause between: in one statement it took 75 ms on a ledger of 774,081
# accounts, a burst beside the posting path once a minute that grows with the ledger. The
# slices are not one snapshot: a hold opened or closed during the count (a fraction of a
# second) may be counted as it was or as it became; the figure is a gauge.
HOLDS_SLICE_IDS = 20_000
HOLDS_SLICE_PAUSE_S = 0.005


async def count_open_holds(ledger: Ledger, slice_ids: int = HOLDS_SLICE_IDS) -> int:
    holds = 0
    async with ledger.pool.acquire() as conn:
        top = int(await conn.fetchval("SELECT coalesce(max(id), 0) FROM ledger.accounts"))
        after = 0
        while after < top:
            holds += int(
                await conn.fetchval(
                    "SELECT count(*) FROM ledger.accounts WHERE id > $1 AND id <= $2 "
                    "AND kind = 'hold' AND closed_at IS NULL AND balance > 0",
                    after,
                    after + slice_ids,
                )
            )
            after += slice_ids
            if after < top:
                await asyncio.sleep(HOLDS_SLICE_PAUSE_S)
    OUTSTANDING_HOLDS.set(holds)
    return holds


async def reconcile_today(ledger: Ledger) -> int:
    """Reconcile the current UTC day; set and return the number of discrepancies."""
    started = time.perf_counter()
    async with ledger.pool.acquire() as conn:
        report = await reports.reconcile(conn, dt.datetime.now(dt.UTC).date())
    found: list[str] = report["discrepancies"]
    RECONCILIATION_DISCREPANCIES.set(len(found))
    elapsed_ms = round((time.perf_counter() - started) * 1000)
    if found:
        log.error("reconciliation_discrepancies", count=len(found), first=found[0], ms=elapsed_ms)
    else:
        log.info("reconciliation_ok", ms=elapsed_ms)
    return len(found)


async def _auditor(app: Litestar) -> None:
    ticks = 0
    while True:
        await asyncio.sleep(HOLDS_INTERVAL_S)
        ticks += 1
        try:
            await count_open_holds(_ledger(app.state))
            if ticks % RECONCILE_EVERY == 0:
                await reconcile_today(_ledger(app.state))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # try again next time
            log.warning("ledger_audit_failed", error=str(exc))


def create_app(
    settings: Settings,
    *,
    pool_size: int = 20,
    seal_in_background: bool = True,
    clock: Callable[[], dt.datetime] | None = None,
) -> Litestar:
    """`clock`: what the daily close takes as now (tests close "today" with tomorrow's)."""

    async def open_ledger(app: Litestar) -> None:
        app.state.clock = clock or (lambda: dt.datetime.now(dt.UTC))
        app.state.ledger = await Ledger.connect(
            settings.database_url, min_size=2, max_size=pool_size, application_name="mesa-ledger"
        )
        # The service's one database path: postings, reports, the sealer and /health.
        app.state.db = app.state.ledger.pool
        app.state.group_commit = _GROUP_COMMIT_METRICS.group = GroupCommit(app.state.ledger)
        if seal_in_background:
            app.state.sealer = asyncio.create_task(_sealer(app))
            app.state.auditor = asyncio.create_task(_auditor(app))

    async def close_ledger(app: Litestar) -> None:
        for name in ("sealer", "auditor"):
            task: asyncio.Task[None] | None = app.state.get(name)
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        group: GroupCommit | None = app.state.get("group_commit")
        if group is not None:
            await group.close()
        ledger: Ledger | None = app.state.get("ledger")
        if ledger is not None:
            await ledger.close()

    return create_service_app(
        "ledger",
        settings,
        [
            deposit,
            withdraw,
            reverse,
            deposit_replay,
            withdraw_replay,
            hold,
            release,
            start_match,
            settle_match,
            void_match,
            open_account,
            wallet,
            trial_balance_report,
            pots_report,
            commission_report,
            statement_report,
            balance_report,
            journal_report,
            reconcile_report,
            chain_report,
            *CLOSE_ROUTES,
            player_activity,
            integrity_pots,
            integrity_cashier,
            match_report,
            entry_report,
            import_settlement,
            list_settlements,
            get_settlement,
        ],
        on_startup=[open_ledger],
        on_shutdown=[close_ledger],
        pool_size=None,
    )
