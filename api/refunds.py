"""Refund proposals, the one way a cashier entry is corrected: support (`POST
/api/support/refunds`) or finance (`POST /api/finance/refunds`) proposes reversing one deposit
or withdrawal of a player's statement; a finance user who is not the proposer approves it, and
only then does the gateway ask the ledger for the reversal, or rejects it. No command or other
route posts a reversal (the ledger's `/v1/reversals` answers the gateway alone). A refund is nothing but the ledger's reversal, so it
is refused exactly where the ledger refuses one (only cashier deposits and withdrawals, at
most once, `docs/howto/reverse-an-entry.md`), with the ledger's code.

The ledger call's idempotency key is derived from the proposal (`refund-proposal:<id>`), and
the approval holds the proposal's row lock across it, so a retried or concurrent approval is
one reversal, and a rejection cannot race an approval.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
import sqlalchemy as sa
from litestar import Request, get, post
from litestar.params import FromPath, FromQuery, JSONBody, Parameter
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from api import staff_audit
from api.accounts import User
from api.backends import call, get_backends
from api.guards import CurrentUser, GuardedController, requires_role
from api.openapi_errors import READ_ERRORS, WRITE_ERRORS
from api.routes_money import _statement
from api.schema import disputes, refund_proposals, users
from api.staff_audit import Reason
from services.common.errors import ServiceError
from services.ledger.contract import EntryResult, ReversalRequest, StatementLine

# The kinds of entry the ledger reverses (ledger/sql/reverse_entry.sql).
REVERSIBLE_KINDS = ("deposit", "withdrawal")
# How far back in a statement an entry is looked for (1000 lines a page).
MAX_STATEMENT_PAGES = 50
MAX_PENDING_PER_PLAYER = 20
MAX_PAGE = 100
# The staff audit log's area of a proposal, by the proposer's role.
PROPOSER_AREAS = {"support": "support", "finance": "finance"}


class ProposeRefund(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    player: Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9_.-]{3,32}$")]
    entry_id: Annotated[int, msgspec.Meta(gt=0, le=2**62)]
    reason: Reason
    dispute_id: Annotated[int, msgspec.Meta(gt=0, le=2**62)] | None = None


class Decision(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    reason: Reason


class Proposal(msgspec.Struct, frozen=True):
    id: int
    player: str
    entry_id: int
    entry_kind: str
    amount: int
    currency: str
    dispute_id: int | None
    reason: str
    status: str
    proposed_by: str
    proposed_at: datetime
    decided_by: str | None
    decided_at: datetime | None
    decision_reason: str | None
    reversal_entry_id: int | None


def idempotency_key(proposal_id: int) -> str:
    return f"refund-proposal:{proposal_id}"


def _reason(text: str) -> str:
    """A reason as it is kept: stripped, and never blank (the table and the audit log refuse
    a blank one, which must be the caller's 400, not a 500)."""
    kept = text.strip()
    if not kept:
        raise ServiceError(400, "invalid_request", "reason: write why (it is not blank)")
    return kept


def reversal_of(proposal_id: int, entry_id: int, player: str, reason: str) -> ReversalRequest:
    """The ledger's request for a proposal's reversal, built from the proposal alone (its
    reason, not the approver's): any approval of it, retried after a lost answer by whoever,
    is the same request and replays the posting. The approver's reason is in the audit log."""
    return ReversalRequest(
        idempotency_key=idempotency_key(proposal_id),
        entry_id=entry_id,
        reference=f"correction {proposal_id} for {player}: {reason}"[:200],
    )


def _proposal(row: Any) -> Proposal:
    return Proposal(**dict(row))


async def proposals_of(
    conn: AsyncConnection,
    *,
    player: str | None = None,
    status: str | None = None,
    before: int | None = None,
    limit: int = MAX_PAGE,
) -> list[Proposal]:
    query = sa.select(refund_proposals).order_by(refund_proposals.c.id.desc()).limit(limit)
    if player is not None:
        query = query.where(refund_proposals.c.player == player)
    if status is not None:
        query = query.where(refund_proposals.c.status == status)
    if before is not None:
        query = query.where(refund_proposals.c.id < before)
    return [_proposal(r) for r in (await conn.execute(query)).mappings().all()]


async def _find_line(state: Any, player: str, entry_id: int) -> tuple[StatementLine, str]:
    """The player's statement line of `entry_id` and the wallet's currency, or 404."""
    after = 0
    for _ in range(MAX_STATEMENT_PAGES):
        page = await _statement(state, player, None, None, after)
        for line in page.lines:
            if line.entry_id == entry_id:
                return line, page.currency
        if page.next is None:
            break
        after = page.next
    raise ServiceError(
        404, "entry_not_in_statement", f"entry {entry_id} is not in {player}'s statement"
    )


async def propose(state: Any, user: User, data: ProposeRefund) -> Proposal:
    reason = _reason(data.reason)
    area = PROPOSER_AREAS.get(user.role)
    if area is None:
        raise ServiceError(403, "forbidden", "only support or finance proposes a correction")
    async with state.db.connect() as conn:
        player = (
            await conn.execute(
                sa.select(users.c.id).where(users.c.id == data.player, users.c.role == "player")
            )
        ).scalar_one_or_none()
    if player is None:
        raise ServiceError(404, "no_such_player", "no player with that name")
    line, currency = await _find_line(state, data.player, data.entry_id)
    if line.kind not in REVERSIBLE_KINDS:
        # The ledger's own refusal, said before anyone has to decide on it.
        raise ServiceError(
            422,
            "entry_not_reversible",
            f"entry {data.entry_id} is a {line.kind}; only cashier deposits and withdrawals "
            "are reversed (match money is corrected by release, void and settle)",
        )
    db = state.db
    try:
        async with db.begin() as conn:
            if data.dispute_id is not None:
                owner = (
                    await conn.execute(
                        sa.select(disputes.c.player).where(disputes.c.id == data.dispute_id)
                    )
                ).scalar_one_or_none()
                if owner != data.player:
                    raise ServiceError(404, "no_such_dispute", "no such dispute of this player")
            pending = (
                await conn.execute(
                    sa.select(sa.func.count()).where(
                        refund_proposals.c.player == data.player,
                        refund_proposals.c.status == "proposed",
                    )
                )
            ).scalar_one()
            if pending >= MAX_PENDING_PER_PLAYER:
                raise ServiceError(
                    409, "too_many_proposals", "this player has too many pending proposals"
                )
            row = (
                (
                    await conn.execute(
                        sa.insert(refund_proposals)
                        .values(
                            player=data.player,
                            entry_id=data.entry_id,
                            entry_kind=line.kind,
                            amount=line.amount,
                            currency=currency,
                            dispute_id=data.dispute_id,
                            reason=reason,
                            proposed_by=user.id,
                        )
                        .returning(*refund_proposals.c)
                    )
                )
                .mappings()
                .one()
            )
            await staff_audit.record(
                conn,
                user,
                f"{area}.refund_propose",
                f"user:{data.player}",
                reason,
                {
                    "refund_id": row["id"],
                    "entry_id": data.entry_id,
                    "entry_kind": line.kind,
                    "amount": line.amount,
                    "currency": currency,
                },
            )
    except IntegrityError as exc:
        if "refund_proposals_one_per_entry" in str(exc.orig):
            raise ServiceError(
                409, "refund_already_proposed", "this entry already has a live refund proposal"
            ) from None
        raise
    return _proposal(row)


async def _locked(conn: AsyncConnection, proposal_id: int) -> Any:
    row = (
        (
            await conn.execute(
                sa.select(refund_proposals)
                .where(refund_proposals.c.id == proposal_id)
                .with_for_update()
            )
        )
        .mappings()
        .first()
    )
    if row is None:
        raise ServiceError(404, "no_such_refund", "no refund proposal with that id")
    return row


def _check_decider(row: Any, user: User) -> None:
    if row["proposed_by"] == user.id:
        raise ServiceError(
            403, "proposer_cannot_decide", "a refund is decided by someone other than its proposer"
        )


async def approve(state: Any, user: User, proposal_id: int, reason: str) -> Proposal:
    reason = _reason(reason)
    async with state.db.begin() as conn:
        row = await _locked(conn, proposal_id)
        # The proposer is refused even once it is decided: his "approval" is never an answer.
        _check_decider(row, user)
        if row["status"] == "approved":
            # A retried approval: the reversal was posted once; nothing changes.
            return _proposal(row)
        if row["status"] != "proposed":
            raise ServiceError(409, "refund_decided", f"the proposal was {row['status']}")
        reversal = reversal_of(proposal_id, row["entry_id"], row["player"], row["reason"])
        key = reversal.idempotency_key
        ledger = get_backends(state).ledger
        # The proposal stays locked (and proposed) while the ledger posts; a refusal leaves it
        # proposed, and a retry after a lost answer replays the same reversal.
        result = await call("ledger", ledger.post("/v1/reversals", reversal, EntryResult))
        updated = (
            (
                await conn.execute(
                    sa.update(refund_proposals)
                    .where(refund_proposals.c.id == proposal_id)
                    .values(
                        status="approved",
                        decided_by=user.id,
                        decided_at=sa.func.now(),
                        decision_reason=reason,
                        reversal_entry_id=result.entry_id,
                    )
                    .returning(*refund_proposals.c)
                )
            )
            .mappings()
            .one()
        )
        await staff_audit.record(
            conn,
            user,
            "finance.refund_approve",
            f"user:{row['player']}",
            reason,
            {
                "refund_id": proposal_id,
                "entry_id": row["entry_id"],
                "amount": row["amount"],
                "idempotency_key": key,
                "reversal_entry_id": result.entry_id,
                "replayed": result.replayed,
            },
        )
    return _proposal(updated)


async def reject(state: Any, user: User, proposal_id: int, reason: str) -> Proposal:
    reason = _reason(reason)
    async with state.db.begin() as conn:
        row = await _locked(conn, proposal_id)
        if row["status"] != "proposed":
            raise ServiceError(409, "refund_decided", f"the proposal was {row['status']}")
        _check_decider(row, user)
        updated = (
            (
                await conn.execute(
                    sa.update(refund_proposals)
                    .where(refund_proposals.c.id == proposal_id)
                    .values(
                        status="rejected",
                        decided_by=user.id,
                        decided_at=sa.func.now(),
                        decision_reason=reason,
                    )
                    .returning(*refund_proposals.c)
                )
            )
            .mappings()
            .one()
        )
        await staff_audit.record(
            conn,
            user,
            "finance.refund_reject",
            f"user:{row['player']}",
            reason,
            {"refund_id": proposal_id, "entry_id": row["entry_id"], "amount": row["amount"]},
        )
    return _proposal(updated)


RefundId = Annotated[int, Parameter(ge=1, le=2**62)]


class RefundDecisionController(GuardedController):
    """Finance proposes corrections and decides proposals (never the proposer his own)."""

    guards = [requires_role("finance")]

    @get("/api/finance/refunds", tags=["finance"], responses=READ_ERRORS)
    async def list_refunds(
        self,
        request: Request[Any, Any, Any],
        status: FromQuery[Literal["proposed", "approved", "rejected"] | None] = "proposed",
        before: Annotated[int | None, Parameter(ge=1, le=2**62)] = None,
    ) -> list[Proposal]:
        """Refund proposals newest first, 100 at most (`before`: the last one's id)."""
        async with request.app.state.db.connect() as conn:
            return await proposals_of(conn, status=status, before=before)

    @post("/api/finance/refunds", status_code=201, tags=["finance"], responses=WRITE_ERRORS)
    async def propose_refund(
        self,
        user: CurrentUser,
        request: Request[Any, Any, Any],
        data: JSONBody[ProposeRefund],
    ) -> Proposal:
        """Propose reversing one cashier deposit or withdrawal of the player's statement (with
        or without a dispute); another finance user decides. Nothing moves until then."""
        return await propose(request.app.state, user, data)

    @post(
        "/api/finance/refunds/{refund_id:int}/approve",
        status_code=200,
        tags=["finance"],
        responses=WRITE_ERRORS,
    )
    async def approve_refund(
        self,
        user: CurrentUser,
        request: Request[Any, Any, Any],
        refund_id: FromPath[RefundId],
        data: JSONBody[Decision],
    ) -> Proposal:
        """Approve: the ledger reverses the entry (once, whatever the retries)."""
        return await approve(request.app.state, user, refund_id, data.reason)

    @post(
        "/api/finance/refunds/{refund_id:int}/reject",
        status_code=200,
        tags=["finance"],
        responses=WRITE_ERRORS,
    )
    async def reject_refund(
        self,
        user: CurrentUser,
        request: Request[Any, Any, Any],
        refund_id: FromPath[RefundId],
        data: JSONBody[Decision],
    ) -> Proposal:
        """Reject: nothing moves; the proposal keeps the reason."""
        return await reject(request.app.state, user, refund_id, data.reason)


ROUTES = [RefundDecisionController]
