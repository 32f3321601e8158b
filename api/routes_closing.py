"""The daily close with four eyes (finance role): draft, propose, approve, withdraw, and the
closed day's signed report as JSON, CSV, XLSX and a printable page.

The ledger owns the books and the rules (days in order, the approver not the proposer, the
report recomputed at approval); the gateway names the acting finance user from the session,
never from the body, and writes a staff audit row for each change. The formats other than JSON
are rendered here from the signed document, so every figure in them is one the signature
covers (docs/explanation/daily-close.md).
"""

from __future__ import annotations

import datetime as dt
import html
import io
import re
from typing import Any, Literal

import msgspec
from litestar import Request, Response, get, post
from litestar.params import FromPath, FromQuery, JSONBody

from api import staff_audit
from api.backends import call, get_backends
from api.guards import CurrentSession, GuardedController, requires_role
from api.integrity import close_summary
from api.openapi_errors import READ_ERRORS, WRITE_ERRORS
from api.routes_money import _cell, _csv_lines
from api.staff_audit import Reason
from services.common.errors import ServiceError
from services.ledger.contract import CloseAction, CloseIntegrity, CloseKey

DAY_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
# the days the ledger closes (ledger.closing's bounds)
FIRST_DAY = dt.date(2000, 1, 1)
LAST_DAY = dt.date(9000, 12, 31)

CSV_COLUMNS = (
    "section",
    "item",
    "currency",
    "count",
    "amount",
    "opening",
    "movement",
    "closing",
    "matches",
    "pot_total",
    "commission",
    "ok",
    "kind",
    "player",
    "counterpart",
    "score",
    "raised_at",
)
# the sheets of the integrity sections hold only their own columns
ALERT_COLUMNS = ("item", "kind", "player", "counterpart", "score", "raised_at")
COUNT_COLUMNS = ("item", "count")


class CloseRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    reason: Reason


def _day(raw: str) -> str:
    if DAY_RE.match(raw) is None:
        raise ServiceError(400, "invalid_date", "day must be YYYY-MM-DD")
    return raw


# --- rendering the signed document ----------------------------------------------------------


def report_rows(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The document as flat rows (one section column): what the CSV and the XLSX hold."""
    report = document["report"]
    rows: list[dict[str, Any]] = [
        {"section": "close", "item": "day", "amount": document["day"]},
        {"section": "close", "item": "proposed_by", "amount": document.get("proposed_by")},
        {"section": "close", "item": "proposed_at", "amount": document.get("proposed_at")},
        {"section": "close", "item": "approved_by", "amount": document.get("approved_by")},
        {"section": "close", "item": "approved_at", "amount": document.get("approved_at")},
        {"section": "close", "item": "public_key", "amount": document.get("public_key")},
    ]
    for b in report["balances"]:
        rows.append(
            {
                "section": "balances",
                "item": b["kind"],
                "currency": b["currency"],
                "opening": b["opening"],
                "movement": b["movement"],
                "closing": b["closing"],
            }
        )
    for a in report["activity"]:
        rows.append(
            {
                "section": "activity",
                "item": a["line"],
                "currency": a["currency"],
                "count": a["count"],
                "amount": a["amount"],
            }
        )
    for p in report["pots_settled"]:
        rows.append(
            {
                "section": "pots_settled",
                "item": "settled",
                "currency": p["currency"],
                "matches": p["count"],
                "pot_total": p["pot_total"],
                "commission": p["commission"],
            }
        )
    for c in report["commission"]:
        rows.append(
            {
                "section": "commission",
                "item": f"{c['tier']}/{c['variant']}",
                "currency": c["currency"],
                "matches": c["matches"],
                "pot_total": c["pot_total"],
                "commission": c["commission"],
            }
        )
    for e in report["entries"]:
        rows.append({"section": "entries", "item": e["kind"], "count": e["count"]})
    rows.append({"section": "reconciliation", "item": "all", "ok": report["reconciliation"]["ok"]})
    for check in report["reconciliation"]["checks"]:
        rows.append(
            {
                "section": "reconciliation",
                "item": check["check"],
                "count": check["discrepancy_count"],
                "ok": check["ok"],
            }
        )
    head = report["chain_head"]
    rows.append({"section": "chain_head", "item": "entry_id", "amount": head["entry_id"]})
    rows.append({"section": "chain_head", "item": "chain_hash", "amount": head["chain_hash"]})
    integrity = report.get("integrity_alerts")
    if isinstance(integrity, dict):
        for item in ("total", "truncated"):
            rows.append({"section": "integrity_summary", "item": item, "count": integrity[item]})
        for k in integrity["by_kind"]:
            rows.append({"section": "integrity_by_kind", "item": k["kind"], "count": k["count"]})
        for a in integrity["alerts"]:
            rows.append({"section": "integrity_alerts", "item": a["id"], **_alert_cells(a)})
    return rows


def _alert_cells(alert: dict[str, Any]) -> dict[str, Any]:
    return {c: alert[c] for c in ALERT_COLUMNS[1:]}


def render_csv(signed: dict[str, Any]) -> str:
    lines: list[list[Any]] = [list(CSV_COLUMNS)]
    for row in report_rows(signed["document"]):
        lines.append([_value(row.get(c)) for c in CSV_COLUMNS])
    lines.append(
        ["signature", "ed25519", "", "", signed["signature"]] + [""] * (len(CSV_COLUMNS) - 5)
    )
    return _csv_lines(lines)


def _value(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else value


def render_xlsx(signed: dict[str, Any]) -> bytes:
    """One sheet per section, amounts as integer cents (numbers, not text)."""
    from openpyxl import Workbook

    book = Workbook()
    first = book.active
    if first is not None:
        book.remove(first)
    sheets: dict[str, Any] = {}
    for row in report_rows(signed["document"]):
        section = row["section"]
        columns = _sheet_columns(section)
        sheet = sheets.get(section)
        if sheet is None:
            sheet = sheets[section] = book.create_sheet(section[:31])
            sheet.append(list(columns))
        sheet.append([_xlsx_value(row.get(c)) for c in columns])
    signature = book.create_sheet("signature")
    signature.append(["algorithm", "signature", "public_key"])
    signature.append(["ed25519", signed["signature"], signed["document"].get("public_key")])
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def _sheet_columns(section: str) -> tuple[str, ...]:
    if section == "integrity_alerts":
        return ALERT_COLUMNS
    if section.startswith("integrity_"):
        return COUNT_COLUMNS
    return CSV_COLUMNS[1 : CSV_COLUMNS.index("ok") + 1]


def _xlsx_value(value: Any) -> Any:
    if value is None or isinstance(value, bool | int):
        return value
    # a text starting with = would be stored as a formula
    return _cell(value)


def _money(cents: Any) -> str:
    if not isinstance(cents, int):
        return ""
    sign = "-" if cents < 0 else ""
    return f"{sign}{abs(cents) // 100:,}.{abs(cents) % 100:02d}"


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th scope='col'>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _alerts_html(integrity: Any) -> str:
    if not isinstance(integrity, dict):
        return ""
    parts = [
        "<h2>Integrity alerts raised this day</h2>",
        f"<p>{int(integrity['total'])} alerts, as the gateway read them from the integrity "
        "store at the close (their later status is not part of the report).</p>",
        _table(["Kind", "Alerts"], [[k["kind"], k["count"]] for k in integrity["by_kind"]]),
    ]
    if integrity["alerts"]:
        parts.append(
            _table(
                ["Alert", "Kind", "Player", "Counterpart", "Score", "Raised at (UTC)"],
                [
                    [
                        a["id"],
                        a["kind"],
                        a["player"],
                        a["counterpart"] or "",
                        a["score"],
                        a["raised_at"],
                    ]
                    for a in integrity["alerts"]
                ],
            )
        )
    if integrity["truncated"]:
        parts.append(f"<p>{int(integrity['truncated'])} more not listed.</p>")
    return "".join(parts)


def render_html(signed: dict[str, Any]) -> str:
    """A printable page (no scripts): every value escaped, amounts in units with cents."""
    doc = signed["document"]
    report = doc["report"]
    e = html.escape
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>Mesa daily close {e(doc['day'])}</title>",
        "<link rel='stylesheet' href='/close-report.css'></head><body><main>",
        f"<h1>Daily close {e(doc['day'])} (UTC)</h1>",
        "<dl>",
        f"<dt>Proposed by</dt><dd>{e(str(doc.get('proposed_by')))} at "
        f"{e(str(doc.get('proposed_at')))}</dd>",
        f"<dt>Approved by</dt><dd>{e(str(doc.get('approved_by')))} at "
        f"{e(str(doc.get('approved_at')))}</dd>",
        f"<dt>Reconciliation</dt><dd>{'ok' if report['reconciliation']['ok'] else 'DISCREPANCIES'}"
        "</dd>",
        f"<dt>Chain head</dt><dd><code>{e(report['chain_head']['chain_hash'])}</code> "
        f"(entry {e(str(report['chain_head']['entry_id']))})</dd>",
        "</dl>",
        "<h2>Balances by account class</h2>",
        _table(
            ["Class", "Currency", "Opening", "Movement", "Closing"],
            [
                [
                    b["kind"],
                    b["currency"],
                    _money(b["opening"]),
                    _money(b["movement"]),
                    _money(b["closing"]),
                ]
                for b in report["balances"]
            ],
        ),
        "<h2>Activity</h2>",
        _table(
            ["Line", "Currency", "Count", "Amount"],
            [
                [a["line"], a["currency"], a["count"], _money(a["amount"])]
                for a in report["activity"]
            ],
        ),
        "<h2>Pots settled</h2>",
        _table(
            ["Currency", "Matches", "Pots", "Commission"],
            [
                [p["currency"], p["count"], _money(p["pot_total"]), _money(p["commission"])]
                for p in report["pots_settled"]
            ],
        ),
        "<h2>Commission by tier and game</h2>",
        _table(
            ["Tier", "Game", "Currency", "Matches", "Pots", "Commission"],
            [
                [
                    c["tier"],
                    c["variant"],
                    c["currency"],
                    c["matches"],
                    _money(c["pot_total"]),
                    _money(c["commission"]),
                ]
                for c in report["commission"]
            ],
        ),
        "<h2>Reconciliation checks</h2>",
        _table(
            ["Check", "Result", "Discrepancies"],
            [
                [c["check"], "ok" if c["ok"] else "FAILED", "; ".join(c["discrepancies"])]
                for c in report["reconciliation"]["checks"]
            ],
        ),
        _alerts_html(report.get("integrity_alerts")),
        "<h2>Signature</h2>",
        f"<p>Ed25519 over the canonical JSON of the document. Public key "
        f"<code>{e(str(doc.get('public_key')))}</code>; signature "
        f"<code>{e(signed['signature'])}</code>. Check the JSON download with "
        "<code>mesa finance verify-report FILE --public-key KEY</code>.</p>",
        "</main></body></html>",
    ]
    return "".join(parts)


# --- routes ---------------------------------------------------------------------------------


async def _closed(request: Request[Any, Any, Any], day: str) -> dict[str, Any]:
    ledger = get_backends(request.app.state).ledger
    found: dict[str, Any] = await call("ledger", ledger.get(f"/v1/closes/{day}", dict[str, Any]))
    signed = found.get("signed")
    if found.get("status") != "closed" or not isinstance(signed, dict):
        raise ServiceError(409, "day_not_closed", f"{day} is proposed, not closed yet")
    return {
        "document": signed["document"],
        "signature": signed["signature"],
        "public_key": signed["document"].get("public_key"),
    }


async def _alerts(request: Request[Any, Any, Any], day: str) -> CloseIntegrity:
    try:
        the_day = dt.date.fromisoformat(day)
    except ValueError:
        raise ServiceError(400, "invalid_date", "day must be YYYY-MM-DD") from None
    if not FIRST_DAY <= the_day <= LAST_DAY:
        raise ServiceError(400, "invalid_date", f"day must be {FIRST_DAY} to {LAST_DAY}")
    return await close_summary(request.app.state.db, the_day)


class ClosingController(GuardedController):
    """Close a day with four eyes, and the closed days' signed reports: finance only."""

    guards = [requires_role("finance")]

    @get("/api/finance/closes", tags=["finance"], responses=READ_ERRORS)
    async def closes(self, request: Request[Any, Any, Any]) -> Any:
        """Proposed and closed days, newest first, and the next day to close."""
        ledger = get_backends(request.app.state).ledger
        return await call("ledger", ledger.get("/v1/closes", Any))

    @get("/api/finance/closes/key", tags=["finance"], responses=READ_ERRORS)
    async def close_key(self, request: Request[Any, Any, Any]) -> CloseKey:
        """The public key that verifies closed days' reports."""
        ledger = get_backends(request.app.state).ledger
        return await call("ledger", ledger.get("/v1/closes/key", CloseKey))

    @get("/api/finance/closes/{day:str}/draft", tags=["finance"], responses=READ_ERRORS)
    async def draft(self, request: Request[Any, Any, Any], day: FromPath[str]) -> Any:
        """The report a proposal of the day would carry now (a closed day: its report)."""
        ledger = get_backends(request.app.state).ledger
        report = await call("ledger", ledger.get(f"/v1/closes/{_day(day)}/draft", Any))
        if isinstance(report, dict) and "integrity_alerts" not in report:
            # not proposed yet: the alerts a proposal would carry now
            summary = await _alerts(request, day)
            section = msgspec.to_builtins(summary)
            section["total"] = len(summary.alerts) + summary.truncated  # as the ledger adds it
            report["integrity_alerts"] = section
        return report

    @get("/api/finance/closes/{day:str}", tags=["finance"], responses=READ_ERRORS)
    async def close_of_day(self, request: Request[Any, Any, Any], day: FromPath[str]) -> Any:
        ledger = get_backends(request.app.state).ledger
        return await call("ledger", ledger.get(f"/v1/closes/{_day(day)}", Any))

    @get("/api/finance/closes/{day:str}/report", tags=["finance"], responses=READ_ERRORS)
    async def report(
        self,
        request: Request[Any, Any, Any],
        day: FromPath[str],
        format: FromQuery[Literal["json", "csv", "xlsx", "html"]] = "json",
    ) -> Response[Any]:
        """The closed day's signed report: JSON (what is signed), CSV, XLSX or printable HTML."""
        signed = await _closed(request, _day(day))
        name = f"mesa-close-{day}"
        attach = {"Content-Disposition": f'attachment; filename="{name}.{format}"'}
        if format == "csv":
            return Response(
                render_csv(signed), media_type="text/csv; charset=utf-8", headers=attach
            )
        if format == "xlsx":
            return Response(
                render_xlsx(signed),
                media_type="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
                headers=attach,
            )
        if format == "html":
            return Response(render_html(signed), media_type="text/html; charset=utf-8")
        return Response(msgspec.json.encode(signed), media_type="application/json", headers=attach)

    @post(
        "/api/finance/closes/{day:str}/propose",
        status_code=200,
        tags=["finance"],
        responses=WRITE_ERRORS,
    )
    async def propose(
        self,
        session: CurrentSession,
        request: Request[Any, Any, Any],
        day: FromPath[str],
        data: JSONBody[CloseRequest],
    ) -> Any:
        """Propose closing the day with the report as it stands; another finance user approves."""
        return await _act(request, session.user, _day(day), "propose", data.reason)

    @post(
        "/api/finance/closes/{day:str}/approve",
        status_code=200,
        tags=["finance"],
        responses=WRITE_ERRORS,
    )
    async def approve(
        self,
        session: CurrentSession,
        request: Request[Any, Any, Any],
        day: FromPath[str],
        data: JSONBody[CloseRequest],
    ) -> Any:
        """Approve (close) a day another finance user proposed; the report is recomputed."""
        return await _act(request, session.user, _day(day), "approve", data.reason)

    @post(
        "/api/finance/closes/{day:str}/withdraw",
        status_code=200,
        tags=["finance"],
        responses=WRITE_ERRORS,
    )
    async def withdraw(
        self,
        session: CurrentSession,
        request: Request[Any, Any, Any],
        day: FromPath[str],
        data: JSONBody[CloseRequest],
    ) -> Any:
        """Withdraw a pending proposal (any finance user)."""
        return await _act(request, session.user, _day(day), "withdraw", data.reason)


async def _act(request: Request[Any, Any, Any], user: Any, day: str, verb: str, reason: str) -> Any:
    ledger = get_backends(request.app.state).ledger
    action = CloseAction(actor=user.id)
    if verb in ("propose", "approve"):
        # the ledger signs the day's alerts as attested here (it cannot read the store)
        action = CloseAction(actor=user.id, integrity=await _alerts(request, day))
    result: dict[str, Any] = await call(
        "ledger", ledger.post(f"/v1/closes/{day}/{verb}", action, dict[str, Any])
    )
    detail: dict[str, Any] = {"status": result.get("status")}
    report = result.get("report")
    if isinstance(report, dict):
        detail["chain_head"] = report.get("chain_head")
        detail["reconciliation_ok"] = report.get("reconciliation", {}).get("ok")
        detail["integrity_alerts"] = (report.get("integrity_alerts") or {}).get("total")
    await staff_audit.record(
        request.app.state.db, user, f"finance.close_{verb}", f"day:{day}", reason, detail
    )
    return result


ROUTES = [ClosingController]
