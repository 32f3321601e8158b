"""Auditors (and players, for their own hands): transcripts, checkpoints, proofs, public keys.

A transcript is only served once its hand is over (the engine refuses earlier), so no hidden
tile or unrevealed seed leaves through here. Players see the transcripts of matches they sat
at; auditors see every one; finance and admin see none.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from litestar import Request, get
from litestar.params import FromPath, FromQuery, Parameter

from api.backends import call, get_backends
from api.openapi_errors import READ_ERRORS
from api.security import require
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


def _deal(deal_id: str) -> str:
    if DEAL_ID_RE.match(deal_id) is None:
        raise ServiceError(400, "invalid_request", "bad deal id")
    return deal_id


@get("/api/history", tags=["player"], responses=READ_ERRORS)
async def my_history(
    request: Request[Any, Any, Any],
    match_id: FromQuery[str | None] = None,
    after: OptionalSize = None,
) -> TranscriptList:
    """Your finished hands (newest first), optionally of one match; 100 a page (`after`: the
    previous page's `next`)."""
    session = await require(request, "player")
    params: dict[str, Any] = {"player": session.user.id, "limit": 100}
    if after is not None:
        params["after"] = after
    if match_id is not None:
        if MATCH_ID_RE.match(match_id) is None:
            raise ServiceError(400, "invalid_request", "bad match id")
        params["match_id"] = match_id
    engine = get_backends(request.app.state).engine
    return await call("engine", engine.get("/internal/audit/transcripts", TranscriptList, params))


@get("/api/transcripts/{deal_id:path}", tags=["audit"], responses=READ_ERRORS)
async def transcript(request: Request[Any, Any, Any], deal_id: FromPath[str]) -> Any:
    """A finished hand's transcript (docs/fairness.md, section 6)."""
    session = await require(request, "player", "auditor")
    deal = _deal(deal_id.lstrip("/"))
    engine = get_backends(request.app.state).engine
    doc: dict[str, Any] = await call(
        "engine", engine.get(f"/internal/audit/transcripts/{deal}", dict[str, Any])
    )
    if session.user.role == "player":
        seats = doc.get("commitment", {}).get("record", {}).get("seats", [])
        if not any(isinstance(s, dict) and s.get("player") == session.user.id for s in seats):
            raise ServiceError(404, "unknown_deal", "no such finished hand of yours")
    return doc


@get("/api/audit/transcripts", tags=["audit"], responses=READ_ERRORS)
async def transcripts(
    request: Request[Any, Any, Any],
    match_id: FromQuery[str | None] = None,
    player: FromQuery[str | None] = None,
    after: OptionalSize = None,
    limit: Annotated[int, Parameter(ge=1, le=200)] = 50,
) -> TranscriptList:
    """Finished hands, newest first (filter by match or player), a page at a time (`after`:
    the previous page's `next`)."""
    await require(request, "auditor")
    params: dict[str, Any] = {"limit": limit}
    if after is not None:
        params["after"] = after
    if match_id is not None:
        if MATCH_ID_RE.match(match_id) is None:
            raise ServiceError(400, "invalid_request", "bad match id")
        params["match_id"] = match_id
    if player is not None:
        if re.fullmatch(r"[a-z0-9_.-]{3,32}", player) is None:
            raise ServiceError(400, "invalid_request", "bad player")
        params["player"] = player
    engine = get_backends(request.app.state).engine
    return await call("engine", engine.get("/internal/audit/transcripts", TranscriptList, params))


@get("/api/audit/checkpoint", tags=["audit"], responses=READ_ERRORS)
async def checkpoint(request: Request[Any, Any, Any]) -> SignedEnvelope:
    """The latest signed checkpoint of the transparency log."""
    await require(request, "auditor", "player")
    engine = get_backends(request.app.state).engine
    return await call("engine", engine.get("/internal/audit/checkpoint", SignedEnvelope))


@get("/api/audit/proofs/inclusion", tags=["audit"], responses=READ_ERRORS)
async def inclusion(
    request: Request[Any, Any, Any], leaf_index: Size, tree_size: Size
) -> InclusionProof:
    await require(request, "auditor")
    engine = get_backends(request.app.state).engine
    params = {"leaf_index": leaf_index, "tree_size": tree_size}
    return await call(
        "engine", engine.get("/internal/audit/proofs/inclusion", InclusionProof, params)
    )


@get("/api/audit/proofs/deal/{deal_id:path}", tags=["audit"], responses=READ_ERRORS)
async def deal_inclusion(
    request: Request[Any, Any, Any], deal_id: FromPath[str], tree_size: OptionalSize = None
) -> InclusionProof:
    """Inclusion proof of a deal's commitment (against `tree_size`, default: latest)."""
    await require(request, "auditor")
    deal = _deal(deal_id.lstrip("/"))
    params = {} if tree_size is None else {"tree_size": tree_size}
    engine = get_backends(request.app.state).engine
    return await call(
        "engine", engine.get(f"/internal/audit/proofs/deal/{deal}", InclusionProof, params)
    )


@get("/api/audit/proofs/consistency", tags=["audit"], responses=READ_ERRORS)
async def consistency(
    request: Request[Any, Any, Any], first: Size, second: Size
) -> ConsistencyProof:
    await require(request, "auditor")
    engine = get_backends(request.app.state).engine
    params = {"first": first, "second": second}
    return await call(
        "engine", engine.get("/internal/audit/proofs/consistency", ConsistencyProof, params)
    )


@get("/api/audit/keys", tags=["audit"], responses=READ_ERRORS)
async def keys(request: Request[Any, Any, Any]) -> KeyList:
    """The operator's public keys (raw hex and PEM), with their key ids."""
    await require(request, "auditor", "player")
    engine = get_backends(request.app.state).engine
    return await call("engine", engine.get("/internal/audit/keys", KeyList))


@get("/api/audit/orphans", tags=["audit"], responses=READ_ERRORS)
async def orphans(request: Request[Any, Any, Any]) -> OrphanList:
    """Commitments not (yet) followed by exactly one result or void record."""
    await require(request, "auditor")
    engine = get_backends(request.app.state).engine
    return await call("engine", engine.get("/internal/audit/orphans", OrphanList))


@get("/api/audit/leaves", tags=["audit"], responses=READ_ERRORS)
async def leaves(
    request: Request[Any, Any, Any],
    start: Size = 0,
    end: Size = 100,
) -> LeafList:
    """Raw log leaves [start, end) (at most 1000) for auditors who mirror the log."""
    await require(request, "auditor")
    if end < start or end - start > 1000:
        raise ServiceError(400, "bad_range", "0 <= end - start <= 1000")
    engine = get_backends(request.app.state).engine
    params = {"start": start, "end": end}
    return await call("engine", engine.get("/internal/audit/leaves", LeafList, params))


ROUTES = [
    my_history,
    transcript,
    transcripts,
    checkpoint,
    inclusion,
    deal_inclusion,
    consistency,
    keys,
    orphans,
    leaves,
]
