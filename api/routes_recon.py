"""Reconciliation on the finance page: every check of `mesa finance reconcile` with the rows
behind each discrepancy, the drill-down from a commission figure to a hand, and the import
of a payment processor's settlement file matched against the cashier's entries.

Finance reads the hand transcripts of the matches it drills into through the one transcript
route, `/api/transcripts/...` (api.routes_audit.TranscriptController).
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

import msgspec
from litestar import Request, Response, get, post
from litestar.params import FromPath, FromQuery, JSONBody, Parameter

from api import staff_audit
from api.backends import call, get_backends
from api.guards import CurrentSession, GuardedController, requires_role
from api.openapi_errors import READ_ERRORS, WRITE_ERRORS
from api.routes_audit import checked_match_id
from api.staff_audit import Reason
from services.common.errors import ServiceError
from services.common.logging import get_logger
from services.engine.audit_contract import TranscriptList
from services.ledger.contract import (
    SETTLEMENT_BODY_BYTES,
    SETTLEMENT_FILE_CHARS,
    SettlementUpload,
)

log = get_logger()

# The hands of one match the drill-down lists (a match is a few dozen hands).
MAX_MATCH_HANDS = 200


class SettlementImport(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    filename: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    # the file's text, as the page read it
    content: Annotated[str, msgspec.Meta(max_length=SETTLEMENT_FILE_CHARS)]
    reason: Reason


class LineError(msgspec.Struct, frozen=True):
    line: int
    error: str


class SettlementRefusal(msgspec.Struct, frozen=True):
    """A refused settlement file: every wrong line (line 1 is the header; 0: the whole file)."""

    error: str
    detail: str
    errors: list[LineError]


class _LedgerRefusal(msgspec.Struct, frozen=True):
    refused: bool = False
    errors: list[LineError] = []


def _day(raw: str | None) -> str | None:
    if raw is None:
        return None
    try:
        return dt.date.fromisoformat(raw).isoformat()
    except ValueError:
        raise ServiceError(400, "invalid_date", "date must be YYYY-MM-DD") from None


class ReconcileController(GuardedController):
    """Reconciliation, drill-down and settlement files: finance only."""

    guards = [requires_role("finance")]

    @get("/api/finance/reconcile", tags=["finance"], responses=READ_ERRORS)
    async def reconcile(
        self, request: Request[Any, Any, Any], date: FromQuery[str | None] = None
    ) -> Any:
        """Every reconciliation check for one UTC day (`date`) or for all time, each with its
        discrepancies and, in the same order, `refs` naming the rows behind them."""
        params = {"date": d} if (d := _day(date)) else None
        ledger = get_backends(request.app.state).ledger
        return await call("ledger", ledger.get("/v1/reports/reconcile", Any, params=params))

    @get("/api/finance/matches/{match_id:str}", tags=["finance"], responses=READ_ERRORS)
    async def match(self, request: Request[Any, Any, Any], match_id: FromPath[str]) -> Any:
        """A match's money (pot, stakes, the entries that moved it) and its finished hands."""
        backends = get_backends(request.app.state)
        found: dict[str, Any] = await call(
            "ledger",
            backends.ledger.get(
                f"/v1/reports/matches/{checked_match_id(match_id)}", dict[str, Any]
            ),
        )
        params = {"match_id": match_id, "limit": MAX_MATCH_HANDS}
        try:
            hands = await call(
                "engine",
                backends.engine.get("/internal/audit/transcripts", TranscriptList, params),
            )
        except ServiceError as exc:
            # the money stands on its own; the page says the hands could not be read
            found["transcripts"] = None
            found["transcripts_error"] = exc.code
        else:
            found["transcripts"] = msgspec.to_builtins(hands.transcripts)
        return found

    @get("/api/finance/entries/{entry_id:int}", tags=["finance"], responses=READ_ERRORS)
    async def entry(
        self,
        request: Request[Any, Any, Any],
        entry_id: Annotated[int, Parameter(ge=1, le=2**62)],
    ) -> Any:
        """One journal entry with its postings."""
        ledger = get_backends(request.app.state).ledger
        return await call("ledger", ledger.get(f"/v1/reports/entries/{entry_id}", Any))

    @post(
        "/api/finance/settlements",
        status_code=200,
        tags=["finance"],
        responses=WRITE_ERRORS,
        request_max_body_size=SETTLEMENT_BODY_BYTES,
    )
    async def import_settlement(
        self,
        session: CurrentSession,
        request: Request[Any, Any, Any],
        data: JSONBody[SettlementImport],
    ) -> Any:
        """Import a processor's settlement file (CSV `reference,amount,currency,date`) and match
        it against the cashier's deposits and withdrawals. A malformed file is refused whole
        (422 with each wrong line) and changes nothing; the same file again answers the first
        import (`replayed: true`)."""
        ledger = get_backends(request.app.state).ledger
        upload = SettlementUpload(filename=data.filename, content=data.content)
        answer: dict[str, Any] = await call(
            "ledger", ledger.post("/v1/settlements", upload, dict[str, Any])
        )
        if answer.get("refused"):
            refusal = msgspec.convert(answer, _LedgerRefusal)
            first = refusal.errors[0] if refusal.errors else LineError(0, "refused")
            return Response(
                SettlementRefusal(
                    error="invalid_settlement_file",
                    detail=f"{len(refusal.errors)} errors; line {first.line}: {first.error}",
                    errors=refusal.errors,
                ),
                status_code=422,
            )
        await staff_audit.record(
            request.app.state.db,
            session.user,
            "finance.settlement_import",
            f"settlement:{answer['import_id']}",
            data.reason,
            {
                "filename": data.filename,
                "lines": answer.get("lines"),
                "matched": answer.get("matched"),
                "amount_differences": len(answer.get("amount_differences") or ()),
                "unmatched_file": len(answer.get("unmatched_file") or ()),
                "unmatched_ledger": len(answer.get("unmatched_ledger") or ()),
                "replayed": bool(answer.get("replayed")),
            },
        )
        return answer

    @get("/api/finance/settlements", tags=["finance"], responses=READ_ERRORS)
    async def settlements(self, request: Request[Any, Any, Any]) -> Any:
        """The latest settlement imports, newest first, with their counts."""
        ledger = get_backends(request.app.state).ledger
        return await call("ledger", ledger.get("/v1/settlements", Any))

    @get("/api/finance/settlements/{import_id:int}", tags=["finance"], responses=READ_ERRORS)
    async def settlement(
        self,
        request: Request[Any, Any, Any],
        import_id: Annotated[int, Parameter(ge=1, le=2**62)],
    ) -> Any:
        """One settlement import's match: differences and unmatched items on either side."""
        ledger = get_backends(request.app.state).ledger
        return await call("ledger", ledger.get(f"/v1/settlements/{import_id}", Any))


ROUTES = [ReconcileController]
