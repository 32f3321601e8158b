"""Wallet and statement (players), cashier and finance reports (finance role), all via the ledger.

Finance reads are passed through from the ledger service's reports; CSV exports are written here
from the same rows so the gateway never relays a non-JSON internal body. Statements are read
by pages (`after`/`limit`, `next` in the answer); the journal and statement exports stream,
one ledger page at a time, so neither side ever holds the whole journal.
"""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import date
from typing import Annotated, Any, Literal, NoReturn, TypeVar

import msgspec
from litestar import Request, Response, get, post
from litestar.params import FromPath, FromQuery, JSONBody, Parameter
from litestar.response import Stream

from api import cashier
from api.backends import call, get_backends
from api.cashier import CashierRequest, CashierResult, Wallet, open_wallet, wallet_of
from api.guards import CurrentSession, CurrentUser, GuardedController, requires_role
from api.openapi_errors import READ_ERRORS, WRITE_ERRORS
from services.common.errors import ServiceError
from services.common.logging import get_logger
from services.ledger.contract import (
    MAX_JOURNAL_PAGE,
    MAX_POTS_PAGE,
    MAX_STATEMENT_PAGE,
    JournalPage,
    JournalRow,
    StatementLine,
    StatementPage,
)

log = get_logger()

MAX_CSV_ROWS = 100_000
# Statement pages, as the ledger serves them (`next` continues after a wallet version).
PageSize = Annotated[int, Parameter(ge=1, le=MAX_STATEMENT_PAGE)]
Version = Annotated[int, Parameter(ge=0, le=2**62)]
# An export reads at most this many pages (10 million postings at the ledger's page size).
MAX_EXPORT_PAGES = 2_000


async def open_wallet_at_sign_up(state: Any, player: str) -> None:
    """At registration: a ledger that cannot be reached does not stop the sign-up; the
    wallet is opened again (idempotently) before the player's first deposit."""
    try:
        await open_wallet(state, player)
    except ServiceError as exc:
        log.warning("wallet_not_opened", player=player, code=exc.code)


def _date(name: str, raw: str | None) -> str | None:
    if raw is None or raw == "":
        return None
    try:
        return date.fromisoformat(raw).isoformat()
    except ValueError:
        raise ServiceError(400, "invalid_date", f"{name} must be YYYY-MM-DD") from None


def _params(**values: str | None) -> dict[str, str]:
    return {k: v for k, v in values.items() if v is not None}


async def _statement(
    state: Any,
    player: str,
    since: str | None,
    until: str | None,
    after: int = 0,
    limit: int = MAX_STATEMENT_PAGE,
) -> StatementPage:
    ledger = get_backends(state).ledger
    params: dict[str, Any] = _params(since=_date("since", since), until=_date("until", until))
    params.update(after=after, limit=limit)
    try:
        return await call(
            "ledger",
            ledger.get(f"/v1/reports/statements/{player}", StatementPage, params=params),
        )
    except ServiceError as exc:
        if exc.status == 404:
            return StatementPage(
                player=player,
                account=f"wallet:{player}",
                currency="USD",
                opening_balance=0,
                closing_balance=0,
                lines=[],
            )
        raise


# --- finance -------------------------------------------------------------------------------


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


def _csv_lines(rows: Sequence[Sequence[Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    for row in rows:
        writer.writerow([_cell(v) for v in row])
    return out.getvalue()


def _fields(kind: type[msgspec.Struct]) -> list[str]:
    return list(kind.__struct_fields__)


def _too_long(report: str) -> NoReturn:
    # Cut the download short (an incomplete body) rather than end a CSV that looks whole.
    log.error("export_too_long", report=report, pages=MAX_EXPORT_PAGES)
    raise ServiceError(
        413, "export_too_long", f"the {report} export is over {MAX_EXPORT_PAGES} pages"
    )


# One page of a report, whatever its shape (a ledger page Struct, or a list of rows).
P = TypeVar("P")


async def _paged_csv(
    report: str,
    header: Sequence[str],
    first: P,
    rows: Callable[[P], Sequence[Sequence[Any]]],
    following: Callable[[P], Awaitable[P | None]],
) -> AsyncIterator[str]:
    """A report as CSV, page by page from the ledger's cursor: one page in memory; an export
    longer than `MAX_EXPORT_PAGES` pages is cut short (`_too_long`)."""
    yield _csv_lines([header])
    page = first
    for _ in range(MAX_EXPORT_PAGES):
        yield _csv_lines(rows(page))
        after = await following(page)
        if after is None:
            return
        page = after
    _too_long(report)


def _journal_csv(ledger: Any, params: dict[str, str], first: JournalPage) -> AsyncIterator[str]:
    async def following(page: JournalPage) -> JournalPage | None:
        if page.next is None:
            return None
        query = {**params, "after": page.next, "limit": MAX_JOURNAL_PAGE}
        return await call("ledger", ledger.get("/v1/reports/journal", JournalPage, params=query))

    return _paged_csv(
        "journal",
        _fields(JournalRow),
        first,
        lambda page: [msgspec.structs.astuple(r) for r in page.rows],
        following,
    )


# The ledger's pots report, column by column (ledger/reports.py `pots`).
POT_COLUMNS = [
    "match_id",
    "tier",
    "variant",
    "currency",
    "status",
    "stake_total",
    "balance",
    "commission_rate_bp",
    "commission",
    "start_entry_id",
    "close_entry_id",
    "started_at",
    "closed_at",
    "ok",
]


def _pots_csv(ledger: Any, first: list[dict[str, Any]]) -> AsyncIterator[str]:
    """Every pot, oldest first; a page shorter than the page size is the last."""

    async def following(page: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        if len(page) < MAX_POTS_PAGE:
            return None
        query = {"after": str(page[-1]["match_id"]), "limit": MAX_POTS_PAGE}
        return await call(
            "ledger", ledger.get("/v1/reports/pots", list[dict[str, Any]], params=query)
        )

    return _paged_csv(
        "pots",
        POT_COLUMNS,
        first,
        lambda page: [[row.get(k) for k in POT_COLUMNS] for row in page],
        following,
    )


def _statement_csv(
    state: Any, player: str, since: str | None, until: str | None, first: StatementPage
) -> AsyncIterator[str]:
    async def following(page: StatementPage) -> StatementPage | None:
        if page.next is None:
            return None
        return await _statement(state, player, since, until, page.next)

    return _paged_csv(
        "statement",
        _fields(StatementLine),
        first,
        lambda page: [msgspec.structs.astuple(line) for line in page.lines],
        following,
    )


class PlayerController(GuardedController):
    """A player's own wallet and statement."""

    guards = [requires_role("player")]

    @get("/api/me/wallet", tags=["player"], responses=READ_ERRORS)
    async def my_wallet(self, user: CurrentUser, request: Request[Any, Any, Any]) -> Wallet:
        return await wallet_of(request.app.state, user.id)

    @get("/api/me/statement", tags=["player"], responses=READ_ERRORS)
    async def my_statement(
        self,
        user: CurrentUser,
        request: Request[Any, Any, Any],
        since: FromQuery[str | None] = None,
        until: FromQuery[str | None] = None,
        after: Version = 0,
        limit: PageSize = MAX_STATEMENT_PAGE,
    ) -> StatementPage:
        """Your wallet's movements with the running balance, a page at a time: the lines after
        wallet version `after`; `next` is the `after` of the next page (null on the last)."""
        return await _statement(request.app.state, user.id, since, until, after, limit)


class FinanceController(GuardedController):
    """Cashier and finance reports: finance only."""

    guards = [requires_role("finance")]

    @post("/api/finance/deposits", status_code=200, tags=["finance"], responses=WRITE_ERRORS)
    async def deposit(
        self,
        session: CurrentSession,
        request: Request[Any, Any, Any],
        data: JSONBody[CashierRequest],
    ) -> CashierResult:
        """Cashier deposit: external:cashier -> wallet:<player>. Refused 403 `deposit_limit`,
        `cooling_off` or a region code; 503 `cashier_busy` while another movement for him is
        in flight. A retry with a posted `idempotency_key` answers it (`replayed: true`)."""
        return await cashier.move(request.app.state, session.user, data, "deposit")

    @post("/api/finance/withdrawals", status_code=200, tags=["finance"], responses=WRITE_ERRORS)
    async def withdraw(
        self,
        session: CurrentSession,
        request: Request[Any, Any, Any],
        data: JSONBody[CashierRequest],
    ) -> CashierResult:
        """Cashier withdrawal: wallet:<player> -> external:cashier (never below zero). Refused
        403 `withdrawals_held` under a compliance hold; otherwise as a deposit."""
        return await cashier.move(request.app.state, session.user, data, "withdrawal")

    @get("/api/finance/trial-balance", tags=["finance"], responses=READ_ERRORS)
    async def trial_balance(self, request: Request[Any, Any, Any]) -> Any:
        ledger = get_backends(request.app.state).ledger
        return await call("ledger", ledger.get("/v1/reports/trial-balance", Any))

    @get("/api/finance/pots", tags=["finance"], responses=READ_ERRORS)
    async def pots(
        self,
        request: Request[Any, Any, Any],
        status: FromQuery[Literal["open", "settled", "voided"] | None] = None,
        after: Annotated[str | None, Parameter(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")] = None,
        limit: Annotated[int, Parameter(ge=1, le=MAX_POTS_PAGE)] = 200,
        day: FromQuery[str | None] = None,
        tier: Annotated[str | None, Parameter(pattern=r"^[A-Za-z0-9_.-]{1,64}$")] = None,
        variant: Annotated[str | None, Parameter(pattern=r"^[A-Za-z0-9_.-]{1,64}$")] = None,
    ) -> Any:
        """A page of pots, oldest first; the next page starts after the last row's match.
        `day` (UTC, of closing), `tier` and `variant`: the pots behind a commission line."""
        ledger = get_backends(request.app.state).ledger
        params = _params(
            status=status, after=after, day=_date("day", day), tier=tier, variant=variant
        )
        return await call(
            "ledger", ledger.get("/v1/reports/pots", Any, params={**params, "limit": limit})
        )

    @get("/api/finance/commission", tags=["finance"], responses=READ_ERRORS)
    async def commission(
        self,
        request: Request[Any, Any, Any],
        by: FromQuery[
            Literal[
                "day",
                "tier",
                "variant",
                "day,tier",
                "day,variant",
                "tier,variant",
                "day,tier,variant",
            ]
        ] = "day",
        since: FromQuery[str | None] = None,
        until: FromQuery[str | None] = None,
    ) -> Any:
        """Commission of settled pots by day, tier or variant (or two of them)."""
        ledger = get_backends(request.app.state).ledger
        params = _params(by=by, since=_date("since", since), until=_date("until", until))
        return await call("ledger", ledger.get("/v1/reports/commission", Any, params=params))

    @get("/api/finance/statements/{player:str}", tags=["finance"], responses=READ_ERRORS)
    async def statement(
        self,
        request: Request[Any, Any, Any],
        player: FromPath[str],
        since: FromQuery[str | None] = None,
        until: FromQuery[str | None] = None,
        after: Version = 0,
        limit: PageSize = MAX_STATEMENT_PAGE,
    ) -> StatementPage:
        """A player's statement, a page at a time (as `/api/me/statement`)."""
        if not msgspec_ok_player(player):
            raise ServiceError(400, "invalid_request", "player: 3 to 32 of a-z 0-9 _ . -")
        return await _statement(request.app.state, player, since, until, after, limit)

    @get("/api/finance/chain", tags=["finance"], responses=READ_ERRORS)
    async def chain(self, request: Request[Any, Any, Any]) -> Any:
        """Verify the journal's hash chain (seals new entries first)."""
        ledger = get_backends(request.app.state).ledger
        return await call("ledger", ledger.get("/v1/reports/chain", Any))

    @get(
        "/api/finance/export/{report:str}",
        tags=["finance"],
        media_type="text/csv; charset=utf-8",
        responses=READ_ERRORS,
    )
    async def export_csv(
        self,
        request: Request[Any, Any, Any],
        report: FromPath[Literal["pots", "commission", "journal", "trial-balance", "statement"]],
        player: FromQuery[str | None] = None,
        since: FromQuery[str | None] = None,
        until: FromQuery[str | None] = None,
    ) -> Response[str] | Stream:
        """CSV export of a finance report; the journal and statements stream page by page."""
        ledger = get_backends(request.app.state).ledger
        params = _params(since=_date("since", since), until=_date("until", until))
        name = f"mesa-{report}-{date.today().isoformat()}.csv"
        headers = {"Content-Disposition": f'attachment; filename="{name}"'}
        # The first page is read before the answer starts, so a refusal is still a clean 4xx/503;
        # a later page that fails cuts the download short (the client sees an incomplete body).
        if report == "journal":
            first = await call(
                "ledger",
                ledger.get(
                    "/v1/reports/journal",
                    JournalPage,
                    params={**params, "limit": MAX_JOURNAL_PAGE},
                ),
            )
            return Stream(
                _journal_csv(ledger, params, first),
                media_type="text/csv; charset=utf-8",
                headers=headers,
            )
        if report == "statement":
            if player is None or not msgspec_ok_player(player):
                raise ServiceError(400, "invalid_request", "player is required for a statement")
            page = await _statement(request.app.state, player, since, until)
            return Stream(
                _statement_csv(request.app.state, player, since, until, page),
                media_type="text/csv; charset=utf-8",
                headers=headers,
            )
        rows: list[dict[str, Any]]
        if report == "pots":
            pots_page = await call(
                "ledger",
                ledger.get(
                    "/v1/reports/pots", list[dict[str, Any]], params={"limit": MAX_POTS_PAGE}
                ),
            )
            return Stream(
                _pots_csv(ledger, pots_page), media_type="text/csv; charset=utf-8", headers=headers
            )
        if report == "commission":
            rows = await call(
                "ledger",
                ledger.get(
                    "/v1/reports/commission",
                    list[dict[str, Any]],
                    params={**params, "by": "day,tier,variant"},
                ),
            )
        else:
            tb = await call("ledger", ledger.get("/v1/reports/trial-balance", dict[str, Any]))
            rows = list(tb.get("accounts", []))
        return Response(to_csv(rows), media_type="text/csv; charset=utf-8", headers=headers)


ROUTES = [PlayerController, FinanceController]
