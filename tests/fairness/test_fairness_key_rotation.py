"""Key rotation: a new operator key is trusted only when a key_rotation record signed by the
previous key announced it; verifiers follow that chain from the pinned first key."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fairness.keys import OperatorKey, rotation_entry
from fairness.log_store import LogStore
from fairness.transcript import Transcript, encode_transcript
from fairness.verify import verify_transcript
from services.cli import main as mesa
from services.common.db import create_pool
from tests.fairness.fairness_helpers import fake_replayer, make_transcript, signed_record

T = datetime(2026, 6, 1, tzinfo=UTC)


def _key() -> OperatorKey:
    return OperatorKey(Ed25519PrivateKey.generate())


def _rotated(
    old: OperatorKey, new: OperatorKey, announcer: OperatorKey | None = None
) -> Transcript:
    """A hand signed by `new`, with the rotation record `announcer` (default: old) signed."""
    t = make_transcript(new)
    t.public_keys = [old.public_hex(), new.public_hex()]
    t.key_rotations = [signed_record(rotation_entry(announcer or old, new, T))]
    return t


def _cli(tmp_path: Path, t: Transcript, pinned: OperatorKey, capsys: Any) -> tuple[int, str]:
    doc = tmp_path / "hand.json"
    doc.write_bytes(encode_transcript(t))
    key = tmp_path / "first.pem"
    key.write_text(pinned.public_pem())
    capsys.readouterr()
    status = mesa(["audit", "verify", str(doc), "--public-key", str(key)])
    return status, capsys.readouterr().out


def test_rotation_announced_by_the_old_key_verifies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = _key(), _key()
    t = _rotated(old, new)
    report = verify_transcript(t, public_keys=[old.public_raw], replayer=fake_replayer)
    assert report.ok, report.checks
    assert verify_transcript(t, replayer=fake_replayer).ok  # unpinned: from its first key
    monkeypatch.setattr("fairness.cli.load_replayer", lambda: fake_replayer)
    status, out = _cli(tmp_path, t, old, capsys)
    assert (status, out.strip()) == (0, "verified")


@pytest.mark.parametrize("how", ["silent", "self_announced", "announced_by_stranger"])
def test_unannounced_key_is_refused(
    how: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    old, new = _key(), _key()
    if how == "silent":  # the new key is published, no rotation record
        t = _rotated(old, new)
        t.key_rotations = []
    elif how == "self_announced":
        t = _rotated(old, new, announcer=new)
    else:
        t = _rotated(old, new, announcer=_key())
    report = verify_transcript(t, public_keys=[old.public_raw], replayer=fake_replayer)
    assert not report.ok
    assert "signature" in report.failed and "checkpoint_signature" in report.failed
    assert not verify_transcript(t, replayer=fake_replayer).ok  # unpinned too
    monkeypatch.setattr("fairness.cli.load_replayer", lambda: fake_replayer)
    status, out = _cli(tmp_path, t, old, capsys)
    assert status == 1 and "verified" not in out.splitlines()


async def test_log_trusts_a_new_key_only_after_its_rotation(migrated: str) -> None:
    pool = await create_pool(migrated, application_name="rotation-test", max_size=4)
    first, second = _key(), _key()
    stores = [LogStore(pool, first), LogStore(pool, second)]
    try:
        assert await stores[0].register_key() is True  # the log's first key
        assert await stores[1].register_key() is False  # published, but not announced
        await stores[0].append(rotation_entry(first, second, T))
        assert await stores[1].register_key() is True
        key, rotations = await stores[1].key_chain()
        assert key == first.public_raw
        assert [r["record"]["new_key_id"] for r in rotations] == [second.key_id]
    finally:
        for s in stores:
            await s.aclose()
        await pool.close()
