"""Auditors (and players, for their own hands): transcripts, checkpoints, proofs, public keys.

A transcript is only served once its hand is over (the engine refuses earlier), so no hidden
tile or unrevealed seed leaves through here. Players see the transcripts of matches they sat
at; auditors see every one; finance reads those of the matches it reconciles through its own
route (api/routes_recon.py); admin sees none.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from litestar import Request, get
from litestar.params import FromPath, FromQuery, Parameter

from api.backends import call, get_backends
from api.guards import CurrentUser, GuardedController, requires_role
from api.openapi_errors import READ_ERRORS
from services.common.errors import ServiceError
from services.engine.audit_contract import (
    ConsistencyProof,
    InclusionProof,
    KeyList,
    LeafList,
    OrphanList,
    SignedEnvelope,
    TranscriptList,
)

DEAL_ID_RE = re.compile(r"^[A-Za-z0-9._/-]{1,128}$")
MATCH_ID_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
# Query parameters: Litestar documents and enforces `Parameter` constraints (not msgspec.Meta).
Size = Annotated[int, Parameter(ge=0, le=2**40)]
OptionalSize = Annotated[int | None, Parameter(ge=0, le=2**40)]


def checked_deal_id(deal_id: str) -> str:
    if DEAL_ID_RE.fullmatch(deal_id) is None:
        raise ServiceError(400, "invalid_request", "bad deal id")
    return deal_id


def checked_match_id(match_id: str) -> str:
    if MATCH_ID_RE.fullmatch(match_id) is None:
        raise ServiceError(400, "invalid_request", "bad match id")
    return match_id


class HistoryController(GuardedController):
    """A player's own finished hands."""

    guards = [requires_role("player")]

    @get("/api/history", tags=["player"], responses=READ_ERRORS)
    async def my_history(
        self,
        user: CurrentUser,
        request: Request[Any, Any, Any],
        match_id: FromQuery[str | None] = None,
        after: OptionalSize = None,
    ) -> TranscriptList:
        """Your finished hands (newest first), optionally of one match; 100 a page (`after`: the
        previous page's `next`)."""
        params: dict[str, Any] = {"player": user.id, "limit": 100}
        if after is not None:
            params["after"] = after
        if match_id is not None:
            params["match_id"] = checked_match_id(match_id)
        engine = get_backends(request.app.state).engine
        return await call(
            "engine", engine.get("/internal/audit/transcripts", TranscriptList, params)
        )


class TranscriptController(GuardedController):
    """A finished hand's transcript: players their own; auditors, compliance (the hands an
    alert points to) and finance (the hands behind a pot it drills into) any."""

    guards = [requires_role("player", "auditor", "compliance", "finance")]

    @get("/api/transcripts/{deal_id:path}", tags=["audit"], responses=READ_ERRORS)
    async def transcript(
        self, user: CurrentUser, request: Request[Any, Any, Any], deal_id: FromPath[str]
    ) -> Any:
        """A finished hand's transcript (docs/fairness.md, section 6)."""
        deal = checked_deal_id(deal_id.lstrip("/"))
        engine = get_backends(request.app.state).engine
        doc: dict[str, Any] = await call(
            "engine", engine.get(f"/internal/audit/transcripts/{deal}", dict[str, Any])
        )
        if user.role == "player":
            # the log names seats by pseudonyms: ask the engine whether this hand was his
            params = {"player": user.id, "match_id": deal.rsplit("/", 1)[0], "limit": 200}
            mine = await call(
                "engine", engine.get("/internal/audit/transcripts", TranscriptList, params)
            )
            if not any(x.deal_id == deal for x in mine.transcripts):
                raise ServiceError(404, "unknown_deal", "no such finished hand of yours")
        return doc


class VerifierController(GuardedController):
    """What players and auditors both check: the checkpoint and the keys."""

    guards = [requires_role("player", "auditor", "compliance")]

    @get("/api/audit/checkpoint", tags=["audit"], responses=READ_ERRORS)
    async def checkpoint(self, request: Request[Any, Any, Any]) -> SignedEnvelope:
        """The latest signed checkpoint of the transparency log."""
        engine = get_backends(request.app.state).engine
        return await call("engine", engine.get("/internal/audit/checkpoint", SignedEnvelope))

    @get("/api/audit/keys", tags=["audit"], responses=READ_ERRORS)
    async def keys(self, request: Request[Any, Any, Any]) -> KeyList:
        """The operator's public keys (raw hex and PEM), with their key ids."""
        engine = get_backends(request.app.state).engine
        return await call("engine", engine.get("/internal/audit/keys", KeyList))


class AuditController(GuardedController):
    """The transparency log's proofs and listings: auditors (and compliance officers, who list
    the hands of an alert's matches)."""

    guards = [requires_role("auditor", "compliance")]

    @get("/api/audit/transcripts", tags=["audit"], responses=READ_ERRORS)
    async def transcripts(
        self,
        request: Request[Any, Any, Any],
        match_id: FromQuery[str | None] = None,
        player: FromQuery[str | None] = None,
        after: OptionalSize = None,
        limit: Annotated[int, Parameter(ge=1, le=200)] = 50,
    ) -> TranscriptList:
        """Finished hands, newest first (filter by match or player), a page at a time (`after`:
        the previous page's `next`)."""
        params: dict[str, Any] = {"limit": limit}
        if after is not None:
            params["after"] = after
        if match_id is not None:
            params["match_id"] = checked_match_id(match_id)
        if player is not None:
            if re.fullmatch(r"[a-z0-9_.-]{3,32}", player) is None:
                raise ServiceError(400, "invalid_request", "bad player")
            params["player"] = player
        engine = get_backends(request.app.state).engine
        return await call(
            "engine", engine.get("/internal/audit/transcripts", TranscriptList, params)
        )

    @get("/api/audit/proofs/inclusion", tags=["audit"], responses=READ_ERRORS)
    async def inclusion(
        self, request: Request[Any, Any, Any], leaf_index: Size, tree_size: Size
    ) -> InclusionProof:
        engine = get_backends(request.app.state).engine
        params = {"leaf_index": leaf_index, "tree_size": tree_size}
        return await call(
            "engine", engine.get("/internal/audit/proofs/inclusion", InclusionProof, params)
        )

    @get("/api/audit/proofs/deal/{deal_id:path}", tags=["audit"], responses=READ_ERRORS)
    async def deal_inclusion(
        self,
        request: Request[Any, Any, Any],
        deal_id: FromPath[str],
        tree_size: OptionalSize = None,
    ) -> InclusionProof:
        """Inclusion proof of a deal's commitment (against `tree_size`, default: latest)."""
        deal = checked_deal_id(deal_id.lstrip("/"))
        params = {} if tree_size is None else {"tree_size": tree_size}
        engine = get_backends(request.app.state).engine
        return await call(
            "engine", engine.get(f"/internal/audit/proofs/deal/{deal}", InclusionProof, params)
        )

    @get("/api/audit/proofs/consistency", tags=["audit"], responses=READ_ERRORS)
    async def consistency(
        self, request: Request[Any, Any, Any], first: Size, second: Size
    ) -> ConsistencyProof:
        engine = get_backends(request.app.state).engine
        params = {"first": first, "second": second}
        return await call(
            "engine", engine.get("/internal/audit/proofs/consistency", ConsistencyProof, params)
        )

    @get("/api/audit/orphans", tags=["audit"], responses=READ_ERRORS)
    async def orphans(self, request: Request[Any, Any, Any]) -> OrphanList:
        """Commitments not (yet) followed by exactly one result or void record."""
        engine = get_backends(request.app.state).engine
        return await call("engine", engine.get("/internal/audit/orphans", OrphanList))

    @get("/api/audit/leaves", tags=["audit"], responses=READ_ERRORS)
    async def leaves(
        self,
        request: Request[Any, Any, Any],
        start: Size = 0,
        end: Size = 100,
    ) -> LeafList:
        """Raw log leaves [start, end) (at most 1000) for auditors who mirror the log."""
        if end < start or end - start > 1000:
            raise ServiceError(400, "bad_range", "0 <= end - start <= 1000")
        engine = get_backends(request.app.state).engine
        params = {"start": start, "end": end}
        return await call("engine", engine.get("/internal/audit/leaves", LeafList, params))


ROUTES = [HistoryController, TranscriptController, VerifierController, AuditController]
