"""The alert store: a rescan updates the open alert with its dedup key instead of adding one, a
closed alert stays closed, evidence is bounded, holds are one per player, seat observations
keep only keyed hashes; all as the application role, on real PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from integrity import store
from integrity.models import MAX_EVIDENCE, EvidenceRef, NewAlert
from services.common.db import create_engine
from services.common.errors import ServiceError
from services.common.migrate import upgrade


@pytest.fixture(scope="module")
def integrity_db(database_url: str) -> Iterator[str]:
    upgrade(database_url, ["integrity"])
    yield database_url


@pytest.fixture
async def db(integrity_db: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(integrity_db, application_name="integrity-test", pool_size=2)
    yield engine
    await engine.dispose()


def _alert(key: str, score: float = 1.0, **kw: object) -> NewAlert:
    values: dict[str, object] = {
        "kind": "pair_flow",
        "player": "st_b",
        "counterpart": "st_a",
        "dedup_key": key,
        "score": score,
        "figures": {"net_cents": int(score * 20_000)},
        "evidence": [EvidenceRef(kind="match", ref="m1", detail={"tier": "80"})],
    }
    values.update(kw)
    return NewAlert(**values)  # type: ignore[arg-type]


async def test_a_rescan_updates_the_open_alert_and_leaves_a_closed_one(db: AsyncEngine) -> None:
    [first] = await store.raise_alerts(db, [_alert("st:1")])
    assert first.created
    more = _alert("st:1", 2.0, evidence=[EvidenceRef(kind="match", ref="m2")])
    [again] = await store.raise_alerts(db, [more])
    assert again == store.Raised(id=first.id, created=False)
    alert, evidence = await store.get_alert(db, first.id)
    assert alert.score == 2.0 and alert.figures == {"net_cents": 40_000}
    assert [(e.kind, e.ref) for e in evidence] == [("match", "m1"), ("match", "m2")]
    assert evidence[0].detail == {"tier": "80"}

    with pytest.raises(ServiceError) as refused:
        await store.close_alert(
            db, first.id, actor="st_officer", resolution="dismissed", reason=" "
        )
    assert refused.value.code == "reason_required"
    closed = await store.close_alert(
        db, first.id, actor="st_officer", resolution="dismissed", reason="friends, checked"
    )
    assert (closed.status, closed.resolution, closed.closed_by) == (
        "closed",
        "dismissed",
        "st_officer",
    )
    with pytest.raises(ServiceError) as twice:
        await store.close_alert(db, first.id, actor="st_officer", resolution="actioned", reason="x")
    assert twice.value.status == 409 and twice.value.code == "alert_closed"
    [later] = await store.raise_alerts(db, [_alert("st:1", 5.0)])
    assert later == store.Raised(id=first.id, created=False)
    alert, _ = await store.get_alert(db, first.id)
    assert alert.status == "closed" and alert.score == 2.0


async def test_evidence_is_bounded_and_pages_filter(db: AsyncEngine) -> None:
    refs = [EvidenceRef(kind="entry", ref=str(i)) for i in range(MAX_EVIDENCE)]
    [one] = await store.raise_alerts(db, [_alert("st:2", evidence=refs, player="st_c")])
    [same] = await store.raise_alerts(
        db, [_alert("st:2", evidence=[EvidenceRef(kind="entry", ref="extra")], player="st_c")]
    )
    _, evidence = await store.get_alert(db, one.id)
    assert len(evidence) == MAX_EVIDENCE and "extra" not in {e.ref for e in evidence}
    await store.raise_alerts(
        db, [_alert("st:3", kind="structuring", player="st_c", counterpart=None)]
    )
    page = await store.list_alerts(db, player="st_c", limit=1)
    assert [a.dedup_key for a in page.alerts] == ["st:3"] and page.next is not None
    rest = await store.list_alerts(db, player="st_c", before=page.next)
    assert [a.dedup_key for a in rest.alerts] == ["st:2"] and rest.next is None
    assert [a.dedup_key for a in (await store.list_alerts(db, kind="structuring")).alerts] == [
        "st:3"
    ]
    today = datetime.now(UTC).date()
    keys = {a.dedup_key for a in await store.alerts_of_day(db, today)}
    assert {"st:2", "st:3"} <= keys
    assert await store.alerts_of_day(db, today - timedelta(days=1)) == []


async def test_one_hold_per_player_released_with_a_reason(db: AsyncEngine) -> None:
    assert await store.active_hold(db, "st_h") is None
    hold = await store.place_hold(db, "st_h", actor="st_officer", reason="chain alert")
    assert (await store.active_hold(db, "st_h")) == hold
    with pytest.raises(ServiceError) as twice:
        await store.place_hold(db, "st_h", actor="st_officer", reason="again")
    assert twice.value.code == "already_held"
    released = await store.release_hold(db, "st_h", actor="st_officer", reason="documents seen")
    assert released.released_by == "st_officer" and released.release_reason == "documents seen"
    assert await store.active_hold(db, "st_h") is None
    with pytest.raises(ServiceError) as none:
        await store.release_hold(db, "st_h", actor="st_officer", reason="x")
    assert none.value.code == "not_held"


async def test_seat_observations_keep_keyed_hashes_once_per_seat(db: AsyncEngine) -> None:
    key = store.seat_key(b"s" * 32)
    address = store.keyed_hash(key, "203.0.113.7")
    assert address != store.keyed_hash(store.seat_key(b"t" * 32), "203.0.113.7")
    since = datetime.now(UTC) - timedelta(minutes=1)
    args = {"match_id": "st-m1", "tier": "80", "private": True, "address_hash": address}
    assert await store.record_seat(db, player="st_p", device_hash=None, **args)
    assert not await store.record_seat(db, player="st_p", device_hash=address, **args)
    seen = [s for _, s in await store.sightings(db, since=since)]
    assert [(s.player, s.address_hash, s.device_hash) for s in seen] == [
        ("st_p", address.hex(), None)
    ]
    async with db.connect() as conn:
        raw = await conn.execute(sa.text("SELECT count(*) FROM integrity.seat_observations"))
        assert raw.scalar_one() == 1


async def test_cursors(db: AsyncEngine) -> None:
    assert await store.get_cursor(db, "st") is None
    await store.set_cursor(db, "st", "5")
    await store.set_cursor(db, "st", "9")
    assert await store.get_cursor(db, "st") == "9"
