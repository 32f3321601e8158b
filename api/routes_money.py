"""Wallet and statement (players), cashier and finance reports (finance role), all via the ledger.

Finance reads are passed through from the ledger service's reports; CSV exports are written here
from the same rows so the gateway never relays a non-JSON internal body.
"""

from __future__ import annotations

import csv
import io
import secrets
from datetime import date
from typing import Annotated, Any, Literal

import msgspec
from litestar import Request, Response, get, post
from litestar.params import FromPath, FromQuery, JSONBody

from api.backends import call, get_backends
from api.openapi_errors import READ_ERRORS, WRITE_ERRORS
from api.security import require
from services.common.errors import ServiceError
from services.ledger.contract import DepositRequest, EntryResult, WalletBalance, WithdrawRequest

PlayerName = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9_.-]{3,32}$")]
Reference = Annotated[str, msgspec.Meta(min_length=1, max_length=120, pattern=r"^[\x20-\x7e]+$")]
IdemKey = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.:-]{8,100}$")]
Cents = Annotated[int, msgspec.Meta(gt=0, le=10_000_000)]  # at most $100,000 per movement
MAX_CSV_ROWS = 100_000


class Wallet(msgspec.Struct, frozen=True):
    player: str
    currency: str
    balance: int


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


async def wallet_of(state: Any, player: str) -> Wallet:
    ledger = get_backends(state).ledger
    try:
        found = await call("ledger", ledger.get(f"/v1/wallets/{player}", WalletBalance))
    except ServiceError as exc:
        if exc.status == 404:
            return Wallet(player=player, currency="USD", balance=0)
        raise
    return Wallet(player=found.player, currency=found.currency, balance=found.balance)


def _date(name: str, raw: str | None) -> str | None:
    if raw is None or raw == "":
        return None
    try:
        return date.fromisoformat(raw).isoformat()
    except ValueError:
        raise ServiceError(400, "invalid_date", f"{name} must be YYYY-MM-DD") from None


def _params(**values: str | None) -> dict[str, str]:
    return {k: v for k, v in values.items() if v is not None}


@get("/api/me/wallet", tags=["player"], responses=READ_ERRORS)
async def my_wallet(request: Request[Any, Any, Any]) -> Wallet:
    session = await require(request, "player")
    return await wallet_of(request.app.state, session.user.id)


async def _statement(state: Any, player: str, since: str | None, until: str | None) -> Any:
    ledger = get_backends(state).ledger
    params = _params(since=_date("since", since), until=_date("until", until))
    try:
        return await call(
            "ledger", ledger.get(f"/v1/reports/statements/{player}", Any, params=params)
        )
    except ServiceError as exc:
        if exc.status == 404:
            return {
                "player": player,
                "account": f"wallet:{player}",
                "currency": "USD",
                "opening_balance": 0,
                "closing_balance": 0,
                "lines": [],
            }
        raise


@get("/api/me/statement", tags=["player"], responses=READ_ERRORS)
async def my_statement(
    request: Request[Any, Any, Any],
    since: FromQuery[str | None] = None,
    until: FromQuery[str | None] = None,
) -> Any:
    """Your wallet's movements with the running balance."""
    session = await require(request, "player")
    return await _statement(request.app.state, session.user.id, since, until)


# --- finance -------------------------------------------------------------------------------


async def _cashier(request: Request[Any, Any, Any], data: CashierRequest, kind: str) -> Any:
    session = await require(request, "finance")
    from api import accounts

    user = await accounts.get_user(request.app.state.db, data.player)
    if user is None or user.role != "player":
        raise ServiceError(404, "no_such_player", "no player with that name")
    key = f"gw-{kind}-{data.idempotency_key or secrets.token_hex(12)}"
    reference = f"{data.reference} (by {session.user.id})"[:200]
    ledger = get_backends(request.app.state).ledger
    body: Any
    path = "/v1/deposits" if kind == "deposit" else "/v1/withdrawals"
    if kind == "deposit":
        body = DepositRequest(
            idempotency_key=key, player=data.player, amount=data.amount, reference=reference
        )
    else:
        body = WithdrawRequest(
            idempotency_key=key, player=data.player, amount=data.amount, reference=reference
        )
    result = await call("ledger", ledger.post(path, body, EntryResult))
    wallet = await wallet_of(request.app.state, data.player)
    return CashierResult(
        player=data.player,
        amount=data.amount,
        kind=kind,
        balance=wallet.balance,
        entry_id=getattr(result, "entry_id", None),
        replayed=bool(getattr(result, "replayed", False)),
    )


@post("/api/finance/deposits", status_code=200, tags=["finance"], responses=WRITE_ERRORS)
async def deposit(request: Request[Any, Any, Any], data: JSONBody[CashierRequest]) -> CashierResult:
    """Cashier deposit: external:cashier -> wallet:<player>."""
    result: CashierResult = await _cashier(request, data, "deposit")
    return result


@post("/api/finance/withdrawals", status_code=200, tags=["finance"], responses=WRITE_ERRORS)
async def withdraw(
    request: Request[Any, Any, Any], data: JSONBody[CashierRequest]
) -> CashierResult:
    """Cashier withdrawal: wallet:<player> -> external:cashier (never below zero)."""
    result: CashierResult = await _cashier(request, data, "withdrawal")
    return result


@get("/api/finance/trial-balance", tags=["finance"], responses=READ_ERRORS)
async def trial_balance(request: Request[Any, Any, Any]) -> Any:
    await require(request, "finance")
    ledger = get_backends(request.app.state).ledger
    return await call("ledger", ledger.get("/v1/reports/trial-balance", Any))


@get("/api/finance/pots", tags=["finance"], responses=READ_ERRORS)
async def pots(
    request: Request[Any, Any, Any],
    status: FromQuery[Literal["open", "settled", "voided"] | None] = None,
) -> Any:
    await require(request, "finance")
    ledger = get_backends(request.app.state).ledger
    return await call("ledger", ledger.get("/v1/reports/pots", Any, params=_params(status=status)))


@get("/api/finance/commission", tags=["finance"], responses=READ_ERRORS)
async def commission(
    request: Request[Any, Any, Any],
    by: FromQuery[
        Literal["day", "tier", "variant", "day,tier", "day,variant", "tier,variant"]
    ] = "day",
    since: FromQuery[str | None] = None,
    until: FromQuery[str | None] = None,
) -> Any:
    """Commission of settled pots by day, tier or variant (or two of them)."""
    await require(request, "finance")
    ledger = get_backends(request.app.state).ledger
    params = _params(by=by, since=_date("since", since), until=_date("until", until))
    return await call("ledger", ledger.get("/v1/reports/commission", Any, params=params))


@get("/api/finance/statements/{player:str}", tags=["finance"], responses=READ_ERRORS)
async def statement(
    request: Request[Any, Any, Any],
    player: FromPath[str],
    since: FromQuery[str | None] = None,
    until: FromQuery[str | None] = None,
) -> Any:
    await require(request, "finance")
    if not msgspec_ok_player(player):
        raise ServiceError(400, "invalid_request", "player: 3 to 32 of a-z 0-9 _ . -")
    return await _statement(request.app.state, player, since, until)


@get("/api/finance/chain", tags=["finance"], responses=READ_ERRORS)
async def chain(request: Request[Any, Any, Any]) -> Any:
    """Verify the journal's hash chain (seals new entries first)."""
    await require(request, "finance")
    ledger = get_backends(request.app.state).ledger
    return await call("ledger", ledger.get("/v1/reports/chain", Any))


def msgspec_ok_player(player: str) -> bool:
    import re

    return re.fullmatch(r"[a-z0-9_.-]{3,32}", player) is not None


def to_csv(rows: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    columns: list[str] = []
    for row in rows:
        for key in row:
            if key not in columns:
                columns.append(key)
    writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    for row in rows[:MAX_CSV_ROWS]:
        writer.writerow({k: _cell(v) for k, v in row.items()})
    return out.getvalue()


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    # Spreadsheet formula injection: a cell never starts with = + - @ as text.
    if text[:1] in ("=", "+", "@") or (text[:1] == "-" and not _is_number(text)):
        return "'" + text
    return text


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@get(
    "/api/finance/export/{report:str}",
    tags=["finance"],
    media_type="text/csv; charset=utf-8",
    responses=READ_ERRORS,
)
async def export_csv(
    request: Request[Any, Any, Any],
    report: FromPath[Literal["pots", "commission", "journal", "trial-balance", "statement"]],
    player: FromQuery[str | None] = None,
    since: FromQuery[str | None] = None,
    until: FromQuery[str | None] = None,
) -> Response[str]:
    """CSV export of a finance report."""
    await require(request, "finance")
    ledger = get_backends(request.app.state).ledger
    params = _params(since=_date("since", since), until=_date("until", until))
    rows: list[dict[str, Any]]
    if report == "pots":
        rows = await call("ledger", ledger.get("/v1/reports/pots", list[dict[str, Any]]))
    elif report == "commission":
        rows = await call(
            "ledger",
            ledger.get(
                "/v1/reports/commission",
                list[dict[str, Any]],
                params={**params, "by": "day,tier,variant"},
            ),
        )
    elif report == "journal":
        rows = await call(
            "ledger", ledger.get("/v1/reports/journal", list[dict[str, Any]], params=params)
        )
    elif report == "trial-balance":
        tb = await call("ledger", ledger.get("/v1/reports/trial-balance", dict[str, Any]))
        rows = list(tb.get("accounts", []))
    else:
        if player is None or not msgspec_ok_player(player):
            raise ServiceError(400, "invalid_request", "player is required for a statement")
        st = await _statement(request.app.state, player, since, until)
        rows = list(st.get("lines", []))
    name = f"mesa-{report}-{date.today().isoformat()}.csv"
    return Response(
        to_csv(rows),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


ROUTES = [
    my_wallet,
    my_statement,
    deposit,
    withdraw,
    trial_balance,
    pots,
    commission,
    statement,
    chain,
    export_csv,
]
