"""The public transparency log, no account needed, in the ecosystem's formats (C2SP).

- GET /log/key: the log's verifier key, signed-note format `<origin>+<hash>+<base64 key>`;
- GET /log/checkpoint: the latest checkpoint (C2SP tlog-checkpoint signed note, with the
  witnesses' cosignature lines);
- GET /log/checkpoints?after=ID&limit=N: every checkpoint ever signed, oldest first (JSON);
- GET /log/tile/<L>/<N>[.p/<W>] and /log/tile/entries/<N>[.p/<W>]: C2SP tlog-tiles, height 8;
- GET /log/witnesses: the witnesses the operator pushes checkpoints to (informational: a
  verifier's policy pins its own witness keys and quorum);
- GET /log/transcripts[?match_id=M], /log/transcripts/<deal id>, /log/keys,
  /log/proofs/inclusion, /log/proofs/consistency: the open audit (players as per-match
  pseudonyms); bulk export stays with auditor accounts under /api/audit/;
- GET /log/voids?days=N: voided deals counted by UTC day and cause;
- GET /log/receipts/<deal id>: a deal's seed receipt (docs/fairness.md 4.7), public from the
  moment the commit phase closes (it holds commitments only, never a seed).

docs/fairness.md section 9 is the normative description. Tiles never change once served (a
partial tile of width W is the first W hashes of the full one), so they are cached for a year.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Request, Response, get
from litestar.params import FromPath, Parameter

from api.backends import call, get_backends
from api.guards import PUBLIC
from api.openapi_errors import READ_ERRORS
from api.routes_audit import checked_deal_id, checked_match_id
from services.common.errors import ServiceError
from services.engine.audit_contract import (
    CheckpointNotes,
    ConsistencyProof,
    InclusionProof,
    KeyList,
    LogBlob,
    LogText,
    TranscriptList,
    VoidCounts,
)

TEXT = "text/plain"  # Litestar adds "; charset=utf-8"
BINARY = "application/octet-stream"
IMMUTABLE = "public, max-age=31536000, immutable"
# A checkpoint changes every few seconds while the log grows.
FRESH = "public, max-age=5"
MAX_TILE_PATH = 200
Size = Annotated[int, Parameter(ge=0, le=2**40)]


def _text(body: str, cache: str) -> Response[str]:
    return Response(body, media_type=TEXT, headers={"cache-control": cache})


@get("/log/key", tags=["log"], responses=READ_ERRORS, media_type=TEXT, opt=PUBLIC)
async def log_key(request: Request[Any, Any, Any]) -> Response[str]:
    """The log's signed-note verifier key (its name is the log's origin)."""
    engine = get_backends(request.app.state).engine
    key = await call("engine", engine.get("/internal/audit/log/key", LogText))
    return _text(key.text, "public, max-age=300")


@get("/log/checkpoint", tags=["log"], responses=READ_ERRORS, media_type=TEXT, opt=PUBLIC)
async def log_checkpoint(request: Request[Any, Any, Any]) -> Response[str]:
    """The latest checkpoint: a C2SP tlog-checkpoint signed note, with cosignatures."""
    engine = get_backends(request.app.state).engine
    cp = await call("engine", engine.get("/internal/audit/log/checkpoint", LogText))
    return _text(cp.text, FRESH)


@get("/log/checkpoints", tags=["log"], responses=READ_ERRORS, opt=PUBLIC)
async def log_checkpoints(
    request: Request[Any, Any, Any],
    after: Annotated[int, Parameter(ge=0, le=2**62)] = 0,
    limit: Annotated[int, Parameter(ge=1, le=1000)] = 100,
) -> Response[CheckpointNotes]:
    """Every checkpoint the log signed, oldest first, after the id `after` (paging)."""
    engine = get_backends(request.app.state).engine
    notes = await call(
        "engine",
        engine.get(
            "/internal/audit/log/checkpoints", CheckpointNotes, {"after": after, "limit": limit}
        ),
    )
    return Response(notes, headers={"cache-control": FRESH})


@get("/log/tile/{path:path}", tags=["log"], responses=READ_ERRORS, media_type=BINARY, opt=PUBLIC)
async def log_tile(request: Request[Any, Any, Any], path: FromPath[str]) -> Response[bytes]:
    """A hash tile or an entry bundle (C2SP tlog-tiles)."""
    rest = path.lstrip("/")
    if not rest or len(rest) > MAX_TILE_PATH:
        raise ServiceError(400, "bad_tile", "not a tile path")
    engine = get_backends(request.app.state).engine
    blob = await call(
        "engine", engine.get("/internal/audit/log/tile", LogBlob, {"path": "tile/" + rest})
    )
    return Response(
        blob.data,
        media_type=BINARY,
        headers={"cache-control": IMMUTABLE},
    )


class WitnessInfo(msgspec.Struct, frozen=True):
    name: str
    key: str  # C2SP signed-note verifier key, cosignature/v1
    url: str  # C2SP tlog-witness submission prefix


class WitnessList(msgspec.Struct, frozen=True):
    witnesses: list[WitnessInfo]


@get("/log/witnesses", tags=["log"], responses=READ_ERRORS, opt=PUBLIC)
async def log_witnesses(request: Request[Any, Any, Any]) -> Response[WitnessList]:
    """The witnesses this log submits its checkpoints to (MESA_WITNESSES). Informational:
    which cosignatures a verifier requires is its own pinned policy, not this list."""
    configured = request.app.state.settings.witnesses
    out = [WitnessInfo(name=k.split("+", 1)[0], key=k, url=u) for k, u in configured]
    return Response(WitnessList(witnesses=out), headers={"cache-control": "public, max-age=300"})


@get("/log/receipts/{deal_id:path}", tags=["log"], responses=READ_ERRORS, opt=PUBLIC)
async def seed_receipt(request: Request[Any, Any, Any], deal_id: FromPath[str]) -> Response[Any]:
    """The deal's seed receipt: every seat's logged seed commitment, with its inclusion proof
    against a signed checkpoint."""
    deal = checked_deal_id(deal_id.lstrip("/"))
    engine = get_backends(request.app.state).engine
    doc = await call("engine", engine.get(f"/internal/audit/receipts/{deal}", dict[str, Any]))
    return Response(doc, headers={"cache-control": FRESH})


@get("/log/voids", tags=["log"], responses=READ_ERRORS, opt=PUBLIC)
async def void_counts(
    request: Request[Any, Any, Any], days: Annotated[int, Parameter(ge=1, le=3660)] = 366
) -> Response[VoidCounts]:
    """Voided deals by UTC day and cause (docs/fairness.md 4.3), newest day first."""
    engine = get_backends(request.app.state).engine
    counts = await call("engine", engine.get("/internal/audit/voids", VoidCounts, {"days": days}))
    return Response(counts, headers={"cache-control": "public, max-age=60"})


# ------------------------------------------------------------------ open audit (no account)


@get("/log/transcripts", tags=["log"], responses=READ_ERRORS, opt=PUBLIC)
async def public_transcripts(
    request: Request[Any, Any, Any],
    match_id: Annotated[str | None, Parameter(max_length=128)] = None,
    limit: Annotated[int, Parameter(ge=1, le=50)] = 20,
    after: Annotated[int | None, Parameter(ge=0, le=2**40)] = None,
) -> TranscriptList:
    """Finished hands, newest first, a page at a time (`after`: the previous page's `next`);
    players appear as per-match pseudonyms. Auditor accounts export in bulk through
    /api/audit/."""
    params: dict[str, Any] = {"limit": limit}
    if after is not None:
        params["after"] = after
    if match_id is not None:
        params["match_id"] = checked_match_id(match_id)
    engine = get_backends(request.app.state).engine
    return await call("engine", engine.get("/internal/audit/transcripts", TranscriptList, params))


@get("/log/transcripts/{deal_id:path}", tags=["log"], responses=READ_ERRORS, opt=PUBLIC)
async def public_transcript(
    request: Request[Any, Any, Any], deal_id: FromPath[str]
) -> Response[Any]:
    """A finished hand's transcript (docs/fairness.md section 6), or an opening draw's."""
    deal = checked_deal_id(deal_id.lstrip("/"))
    engine = get_backends(request.app.state).engine
    doc: dict[str, Any] = await call(
        "engine", engine.get(f"/internal/audit/transcripts/{deal}", dict[str, Any])
    )
    # its checkpoint moves on as the log grows
    return Response(doc, headers={"cache-control": "public, max-age=60"})


@get("/log/keys", tags=["log"], responses=READ_ERRORS, opt=PUBLIC)
async def public_keys(request: Request[Any, Any, Any]) -> KeyList:
    """Every operator key published (raw hex and PEM); trust follows docs/fairness.md 4.6."""
    engine = get_backends(request.app.state).engine
    return await call("engine", engine.get("/internal/audit/keys", KeyList))


@get("/log/proofs/inclusion", tags=["log"], responses=READ_ERRORS, opt=PUBLIC)
async def public_inclusion(
    request: Request[Any, Any, Any], leaf_index: Size, tree_size: Size
) -> InclusionProof:
    engine = get_backends(request.app.state).engine
    params = {"leaf_index": leaf_index, "tree_size": tree_size}
    return await call(
        "engine", engine.get("/internal/audit/proofs/inclusion", InclusionProof, params)
    )


@get("/log/proofs/consistency", tags=["log"], responses=READ_ERRORS, opt=PUBLIC)
async def public_consistency(
    request: Request[Any, Any, Any], first: Size, second: Size
) -> ConsistencyProof:
    engine = get_backends(request.app.state).engine
    params = {"first": first, "second": second}
    return await call(
        "engine", engine.get("/internal/audit/proofs/consistency", ConsistencyProof, params)
    )


ROUTES = [
    public_transcripts,
    public_transcript,
    public_keys,
    public_inclusion,
    public_consistency,
    void_counts,
    seed_receipt,
    log_key,
    log_checkpoint,
    log_checkpoints,
    log_tile,
    log_witnesses,
]
