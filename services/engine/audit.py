"""Read-only audit routes over the fairness log (schema `fairness`), for the gateway.

Contract: services/engine/audit_contract.py. Everything here only reads: log leaves, proofs,
checkpoints, keys, orphans; transcripts of finished hands come from the engine
(`state.engine.transcript(deal_id)` when the runtime offers it), never for a live hand.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import asyncpg
import msgspec
from litestar import get
from litestar.datastructures import State
from litestar.params import FromPath, FromQuery, Parameter

from fairness.flow import DRAW_PURPOSES
from fairness.keys import load_operator_key
from fairness.log_store import LogError, LogStore
from fairness.shuffle import deal as shuffle_deal
from fairness.tlog import (
    TILE_WIDTH,
    NoteError,
    parse_tile_path,
)
from fairness.transcript import RECEIPT_FORMAT, TRANSCRIPT_FORMAT, Receipt, Transcript
from services.common.auth import GATEWAY, callers_opt
from services.common.errors import ServiceError
from services.engine.audit_contract import (
    MAX_LEAVES_PAGE,
    MAX_TRANSCRIPTS_PAGE,
    CheckpointNote,
    CheckpointNotes,
    ConsistencyProof,
    InclusionProof,
    KeyList,
    LeafList,
    LeafOut,
    LogBlob,
    LogText,
    OrphanList,
    OrphanOut,
    PublicKey,
    SignedEnvelope,
    TranscriptList,
    TranscriptSummary,
    VoidCount,
    VoidCounts,
)
from services.engine.rules.model import HandResult
from services.engine.rules.replay import result_json

DEAL_ID_RE = re.compile(r"^[A-Za-z0-9._/-]{1,128}$")
MATCH_ID_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
PLAYER_RE = re.compile(r"^[A-Za-z0-9_.@:-]{1,64}$")
Size = Annotated[int, Parameter(ge=0, le=2**40)]
# Hands still in play are not orphans: only commitments older than this are reported.
ORPHAN_GRACE = timedelta(hours=1)
MAX_EVENT_PAGES = 200
# Auditors and players read the log through the gateway, which checks their role.
AUDIT_READERS = callers_opt(GATEWAY)


def _store(state: State) -> LogStore:
    store: LogStore | None = state.get("audit_store")
    if store is None:
        settings = state.settings
        try:
            key = load_operator_key(settings.operator_key_file)
        except ValueError as exc:
            raise ServiceError(503, "no_operator_key", str(exc)[:200]) from None
        pool: asyncpg.Pool = state.db
        store = LogStore(pool, key, settings.log_origin)
        state.audit_store = store
    return store


def _deal(deal_id: str) -> str:
    deal = deal_id.lstrip("/")
    if DEAL_ID_RE.match(deal) is None:
        raise ServiceError(400, "invalid_request", "bad deal id")
    return deal


def _summary(idx: int, data: bytes, closed: bool) -> TranscriptSummary:
    record = json.loads(data)["record"]
    deal_id = str(record.get("deal_id", ""))
    seats = record.get("seats") or []
    return TranscriptSummary(
        deal_id=deal_id,
        match_id=deal_id.rsplit("/", 1)[0] if "/" in deal_id else None,
        table_id=record.get("table_id"),
        variant=str(record.get("variant", "")),
        players=[s.get("player") if isinstance(s, dict) else None for s in seats],
        leaf_index=idx,
        closed=closed,
    )


@get("/internal/audit/transcripts", opt=AUDIT_READERS)
async def list_transcripts(
    state: State,
    match_id: FromQuery[str | None] = None,
    player: FromQuery[str | None] = None,
    after: Annotated[int | None, Parameter(ge=0, le=2**40)] = None,
    limit: Annotated[int, Parameter(ge=1, le=MAX_TRANSCRIPTS_PAGE)] = 50,
) -> TranscriptList:
    """Finished hands (a result record follows the commitment), newest first; a page at a
    time: those below leaf index `after` (`next` of the previous page)."""
    if match_id is not None and MATCH_ID_RE.match(match_id) is None:
        raise ServiceError(400, "invalid_request", "bad match id")
    if player is not None and PLAYER_RE.match(player) is None:
        raise ServiceError(400, "invalid_request", "bad player")
    # seats are pseudonyms in the log: a player's hands are found through the engine's matches
    seats_filter = json.dumps({"spec": {"seats": [{"player_id": player}]}}) if player else None
    pool: asyncpg.Pool = state.db
    rows = await pool.fetch(
        "SELECT c.idx, c.leaf_data FROM fairness.leaves c"
        " WHERE c.type = 'commitment'"
        "   AND EXISTS (SELECT 1 FROM fairness.leaves r WHERE r.deal_id = c.deal_id"
        "               AND r.type = 'result')"
        "   AND (CAST($1 AS text) IS NULL OR c.deal_id LIKE $1"
        "        OR convert_from(c.leaf_data, 'UTF8')::jsonb -> 'record' ->> 'table_id'"
        "           = $2)"
        "   AND (CAST($3 AS text) IS NULL OR EXISTS ("
        "        SELECT 1 FROM engine.matches m"
        "        WHERE c.deal_id LIKE replace(m.match_id, '%', '') || '/%'"
        "          AND m.spec @> CAST($3 AS jsonb)))"
        "   AND (CAST($4 AS bigint) IS NULL OR c.idx < $4)"
        " ORDER BY c.idx DESC LIMIT $5",
        None if match_id is None else match_id.replace("%", "") + "/%",
        match_id,
        seats_filter,
        after,
        limit + 1,
    )
    page = rows[:limit]
    return TranscriptList(
        transcripts=[_summary(int(r["idx"]), bytes(r["leaf_data"]), True) for r in page],
        next=int(page[-1]["idx"]) if len(rows) > limit else None,
    )


async def match_events(engine: Any, match_id: str) -> list[Any]:
    """Every event of the match as seat 0 sees it (hand_ended and hand_started are public)."""
    out: list[Any] = []
    after = 0
    for _ in range(MAX_EVENT_PAGES):
        page = await engine.events(match_id, 0, after, 0)
        out.extend(page.events)
        if not page.events or not page.more:
            break
        after = page.events[-1].seq
    return out


async def _proved(store: LogStore, doc: dict[str, Any], deal: str, index: int) -> dict[str, Any]:
    """Add the inclusion proofs of the deal's commitment, seed and result records against
    one checkpoint covering all three, and the operator keys."""
    seed_index = await store.record_index(deal, "seed_commitments")
    result_index = await store.record_index(deal, "result")
    indexes = [index, *(i for i in (seed_index, result_index) if i is not None)]
    cp = await store.covering_checkpoint(max(indexes))
    size = int(cp["record"]["tree_size"])
    paths = dict(zip(indexes, await store.proofs_at(indexes, size), strict=True))

    def included(i: int) -> dict[str, Any]:
        return {"leaf_index": i, "tree_size": size, "path": [p.hex() for p in paths[i]]}

    # the first key, then the keys the log's rotation records announced, in order
    first, rotations = await store.key_chain()
    doc["public_keys"] = [
        first.hex(),
        *(str(r["record"].get("new_public_key")) for r in rotations),
    ]
    if rotations:
        doc["key_rotations"] = rotations
    doc["inclusion"] = included(index)
    doc["checkpoint"] = cp
    for name, i in (("seed", seed_index), ("result", result_index)):
        if i is not None:
            doc[f"{name}_record"] = json.loads(await store.leaf(i))
            doc[f"{name}_inclusion"] = included(i)
    return doc


async def _draw_transcript(
    store: LogStore, deal: str, index: int, commitment: dict[str, Any]
) -> dict[str, Any] | None:
    """An opening draw's transcript, from the log alone: no tiles are dealt and nobody
    moves; its `result` is the draw's outcome (docs/fairness.md 6.1)."""
    result_index = await store.record_index(deal, "result")
    seed_index = await store.record_index(deal, "seed_commitments")
    if result_index is None or seed_index is None:
        return None
    result = json.loads(await store.leaf(result_index))["record"]
    logged = json.loads(await store.leaf(seed_index))["record"]["seats"]
    seeds = []
    for i, (entry, seed) in enumerate(zip(logged, result["seeds"], strict=True)):
        c = entry.get("commitment")
        if c is None:
            status = "no_commitment"
        elif hashlib.sha256(seed.encode()).hexdigest() == c:
            status = "revealed"
        else:
            status = "not_revealed"
        seeds.append({"seat": i, "commitment": c, "seed": seed, "status": status})
    doc: dict[str, Any] = {
        "format": TRANSCRIPT_FORMAT,
        "deal_id": deal,
        "commitment": commitment,
        "player_seeds": seeds,
        "server_seed": result["server_seed"],
        "deal": {"hands": [], "stock": []},
        "opener": None,
        "first_hand": True,
        "scores": [],
        "moves": [],
        "result": result["result"],
    }
    doc = await _proved(store, doc, deal, index)
    msgspec.convert(doc, Transcript)
    return doc


async def build_transcript(
    state: State, deal: str, *, events: list[Any] | None = None, proofs: bool = True
) -> dict[str, Any] | None:
    """The transcript of a finished hand from the log (commitment, proof, checkpoint, keys) and
    the match's public events (seeds, moves, result); the deal is recomputed from the seeds.

    `events`: the match's events when the caller already read them (a scan reading every hand
    of a match reads them once). `proofs=False`: the played hand only (no proofs, checkpoint
    or keys, and no opening draws), for readers inside the platform such as the integrity
    scan; it is not a `Transcript` document."""
    engine = state.get("engine")
    store = _store(state)
    try:
        index = await store.commitment_index(deal)
    except LogError:
        return None
    commitment = json.loads(await store.leaf(index))
    record = commitment["record"]
    if record.get("purpose") in DRAW_PURPOSES:
        return await _draw_transcript(store, deal, index, commitment) if proofs else None
    if record.get("purpose", "deal") != "deal" or engine is None or "/" not in deal:
        return None
    match_id = deal.rsplit("/", 1)[0]
    if events is None:
        try:
            events = await match_events(engine, match_id)
        except ServiceError:
            return None
    started = next(
        (e.data for e in events if e.kind == "hand_started" and e.data.get("deal_id") == deal), None
    )
    ended_at = next(
        (
            i
            for i, e in enumerate(events)
            if e.kind == "hand_ended" and e.data.get("deal_id") == deal
        ),
        None,
    )
    if started is None or ended_at is None:
        return None  # live (or never played): nothing is published before the hand ends
    ended = events[ended_at].data
    earlier = [e.data for e in events[:ended_at] if e.kind == "hand_ended"]
    started_at = next(
        i
        for i, e in enumerate(events)
        if e.kind == "hand_started" and e.data.get("deal_id") == deal
    )
    opener = started.get("opener")
    if not isinstance(opener, int) or opener < 0:
        # Salgo / Sal tu: the opener is the seat the pair's choice named
        opener = next(
            (
                e.data.get("opener")
                for e in events[started_at:ended_at]
                if e.kind == "choice" and isinstance(e.data.get("opener"), int)
            ),
            None,
        )
    raw_result = ended.get("result") or {}
    try:
        # The transcript carries the result as `mesa rules replay` prints it.
        result = result_json(msgspec.convert(raw_result, HandResult))
    except (msgspec.ValidationError, TypeError):
        result = raw_result
    sides = len(raw_result.get("scores") or []) or 2
    if "scores_before" in started:
        scores = list(started["scores_before"])
        first_hand = bool(started.get("first_hand"))
    else:  # hands started before the engine published these
        scores = list(earlier[-1]["result"]["scores"]) if earlier else [0] * sides
        first_hand = not earlier
    seeds = list(ended.get("seeds") or [])
    dealt = shuffle_deal(
        str(ended["server_seed"]),
        deal,
        [str(e.get("seed", "")) for e in seeds],
        int(record["tile_set"]),
        int(record["hand_size"]),
    )
    hands, stock = dealt.as_strings()
    doc = {
        "format": TRANSCRIPT_FORMAT,
        "deal_id": deal,
        "commitment": commitment,
        "player_seeds": seeds,
        "server_seed": ended["server_seed"],
        "deal": {"hands": hands, "stock": stock},
        "opener": opener,
        "first_hand": first_hand,
        "scores": scores,
        "moves": list(ended.get("moves") or []),
        "result": result,
    }
    if not proofs:
        return doc
    doc = await _proved(store, doc, deal, index)
    # Same shape as fairness.transcript.Transcript (unknown keys would be refused).
    msgspec.convert(doc, Transcript)
    return doc


@get("/internal/audit/transcripts/{deal_id:path}", opt=AUDIT_READERS)
async def transcript(state: State, deal_id: FromPath[str]) -> Any:
    """The hand's transcript (docs/fairness.md section 6), once the hand is over."""
    deal = _deal(deal_id)
    engine = state.get("engine")
    source = getattr(engine, "transcript", None)
    doc = await source(deal) if source is not None else await build_transcript(state, deal)
    if doc is None:
        raise ServiceError(404, "unknown_deal", "no finished hand with that deal id")
    return msgspec.to_builtins(doc)


@get("/internal/audit/receipts/{deal_id:path}", opt=AUDIT_READERS)
async def seed_receipt(state: State, deal_id: FromPath[str]) -> Any:
    """A deal's seed receipt (docs/fairness.md 4.7): the logged seed_commitments record with
    its inclusion proof against a signed checkpoint (JSON and C2SP note). Public from the
    moment the commit phase closes, which is before any seed is revealed."""
    deal = _deal(deal_id)
    store = _store(state)
    index = await store.record_index(deal, "seed_commitments")
    if index is None:
        raise ServiceError(404, "unknown_deal", "no seed commitments logged for that deal")
    try:
        cp = await store.covering_checkpoint(index)
        size = int(cp["record"]["tree_size"])
        _, path = await store.inclusion_proof(index, size)
    except LogError as exc:
        raise ServiceError(503, "log_unavailable", str(exc)[:200]) from None
    note = await store.checkpoint_note_for(size)
    receipt = {
        "format": RECEIPT_FORMAT,
        "deal_id": deal,
        "record": json.loads(await store.leaf(index)),
        "inclusion": {"leaf_index": index, "tree_size": size, "path": [p.hex() for p in path]},
        "checkpoint": cp,
        "checkpoint_note": note.note if note is not None else "",
    }
    msgspec.convert(receipt, Receipt)
    return receipt


@get("/internal/audit/checkpoint", opt=AUDIT_READERS)
async def latest_checkpoint(state: State) -> SignedEnvelope:
    cp = await _store(state).latest_checkpoint()
    if cp is None:
        raise ServiceError(404, "no_checkpoint", "the log has no checkpoint yet")
    return SignedEnvelope(record=cp["record"], signature=str(cp["signature"]))


@get("/internal/audit/proofs/inclusion", opt=AUDIT_READERS)
async def inclusion_proof(state: State, leaf_index: Size, tree_size: Size) -> InclusionProof:
    try:
        size, path = await _store(state).inclusion_proof(leaf_index, tree_size)
    except LogError as exc:
        raise ServiceError(400, "bad_range", str(exc)[:200]) from None
    return InclusionProof(leaf_index=leaf_index, tree_size=size, path=[p.hex() for p in path])


@get("/internal/audit/proofs/deal/{deal_id:path}", opt=AUDIT_READERS)
async def deal_proof(
    state: State, deal_id: FromPath[str], tree_size: FromQuery[Size | None] = None
) -> InclusionProof:
    deal = _deal(deal_id)
    store = _store(state)
    try:
        index = await store.commitment_index(deal)
    except LogError:
        raise ServiceError(404, "unknown_deal", "no commitment for that deal") from None
    try:
        size, path = await store.inclusion_proof(index, tree_size)
    except LogError as exc:
        raise ServiceError(400, "bad_range", str(exc)[:200]) from None
    from fairness.merkle import leaf_hash

    leaf = leaf_hash(await store.leaf(index)).hex()
    return InclusionProof(
        leaf_index=index, tree_size=size, path=[p.hex() for p in path], leaf_hash=leaf
    )


@get("/internal/audit/proofs/consistency", opt=AUDIT_READERS)
async def consistency_proof(state: State, first: Size, second: Size) -> ConsistencyProof:
    try:
        path = await _store(state).consistency_proof(first, second)
    except LogError as exc:
        raise ServiceError(400, "bad_range", str(exc)[:200]) from None
    return ConsistencyProof(first=first, second=second, path=[p.hex() for p in path])


@get("/internal/audit/keys", opt=AUDIT_READERS)
async def public_keys(state: State) -> KeyList:
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    from fairness.commitments import load_public_key

    out = []
    for k in await _store(state).public_keys():
        pem = (
            load_public_key(k["public_key"])
            .public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
            .decode()
        )
        out.append(PublicKey(key_id=k["key_id"], public_key=k["public_key"], pem=pem))
    rotations: list[dict[str, Any]] = []
    if out:
        _, rotations = await _store(state).key_chain()
    return KeyList(keys=out, key_rotations=rotations)


@get("/internal/audit/orphans", opt=AUDIT_READERS)
async def orphans(state: State) -> OrphanList:
    found = await _store(state).orphans(older_than=datetime.now(UTC) - ORPHAN_GRACE)
    return OrphanList(
        orphans=[
            OrphanOut(
                deal_id=o.deal_id,
                leaf_index=o.index,
                created_at=o.created_at.isoformat(),
                closing_records=o.closing_records,
            )
            for o in found[:1000]
        ]
    )


@get("/internal/audit/leaves", opt=AUDIT_READERS)
async def leaves(state: State, start: Size = 0, end: Size = 100) -> LeafList:
    if end < start or end - start > MAX_LEAVES_PAGE:
        raise ServiceError(400, "bad_range", f"0 <= end - start <= {MAX_LEAVES_PAGE}")
    store = _store(state)
    size, _ = await store.head()
    rows = await store.leaves(start, min(end, size))
    return LeafList(
        tree_size=size,
        leaves=[LeafOut(index=i, type=t, leaf_data=d.hex()) for i, t, d in rows],
        next=end if end < size else None,
    )


# ------------------------------------------------------------------ C2SP public log views


@get("/internal/audit/log/key", opt=AUDIT_READERS)
async def log_key(state: State) -> LogText:
    return LogText(text=_store(state).verifier_key() + "\n")


@get("/internal/audit/log/checkpoint", opt=AUDIT_READERS)
async def log_checkpoint(state: State) -> LogText:
    found = await _store(state).checkpoint_notes(latest=True)
    if not found:
        raise ServiceError(404, "no_checkpoint", "the log has no checkpoint yet")
    return LogText(text=found[0].cosigned_note())


@get("/internal/audit/log/checkpoints", opt=AUDIT_READERS)
async def log_checkpoints(
    state: State,
    after: Annotated[int, Parameter(ge=0, le=2**62)] = 0,
    limit: Annotated[int, Parameter(ge=1, le=1000)] = 100,
) -> CheckpointNotes:
    found = await _store(state).checkpoint_notes(after_id=after, limit=limit)
    return CheckpointNotes(
        checkpoints=[
            CheckpointNote(id=c.id, tree_size=c.tree_size, note=c.cosigned_note()) for c in found
        ]
    )


@get("/internal/audit/log/tile", opt=AUDIT_READERS)
async def log_tile(state: State, path: Annotated[str, Parameter(max_length=200)]) -> LogBlob:
    try:
        ref = parse_tile_path(path)
    except NoteError as exc:
        raise ServiceError(400, "bad_tile", str(exc)[:200]) from None
    try:
        data = await _store(state).tile(ref)
    except LogError as exc:
        raise ServiceError(400, "bad_tile", str(exc)[:200]) from None
    if data is None:
        raise ServiceError(404, "no_tile", "the log has no such tile (yet)")
    return LogBlob(data=data, full=ref.width == TILE_WIDTH)


@get("/internal/audit/voids", opt=AUDIT_READERS)
async def void_counts(
    state: State, days: Annotated[int, Parameter(ge=1, le=3660)] = 366
) -> VoidCounts:
    rows = await _store(state).void_counts(days)
    return VoidCounts(voids=[VoidCount(day=d, cause=c, count=n) for d, c, n in rows])


AUDIT_ROUTES = [
    void_counts,
    seed_receipt,
    log_key,
    log_checkpoint,
    log_checkpoints,
    log_tile,
    list_transcripts,
    transcript,
    latest_checkpoint,
    inclusion_proof,
    deal_proof,
    consistency_proof,
    public_keys,
    orphans,
    leaves,
]
