"""`mesa audit verify --quorum N --witness KEY... --note FILE --log-key VKEY`: a hand verifies
only when its checkpoint, as the log's C2SP note, carries the cosignatures the policy asks."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fairness.keys import OperatorKey
from fairness.tlog import checkpoint_body, cosign, sign_note, verifier_key
from fairness.transcript import encode_transcript
from services.cli import main as mesa
from tests.fairness.fairness_helpers import fake_replayer, make_transcript
from tests.fairness.test_fairness_witness_server import _wvkey

ORIGIN = "mesa.test/verify-policy"


def test_verify_requires_the_quorum_of_cosignatures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("fairness.cli.load_replayer", lambda: fake_replayer)
    key = OperatorKey(Ed25519PrivateKey.generate())
    t = make_transcript(key)
    record = t.checkpoint.record
    body = checkpoint_body(ORIGIN, record["tree_size"], bytes.fromhex(record["root_hash"]))
    note = sign_note(body, ORIGIN, key.private_key)
    w1, w2 = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    once = note + cosign(body, "w1.test", w1, 1_760_000_000)
    doc, note_file, first = tmp_path / "hand.json", tmp_path / "cp.note", tmp_path / "first.pem"
    doc.write_bytes(encode_transcript(t))
    first.write_text(key.public_pem())
    args = ["audit", "verify", str(doc), "--public-key", str(first), "--note", str(note_file)]
    args += ["--log-key", verifier_key(ORIGIN, key.public_raw)]
    args += ["--witness", _wvkey(w1, "w1.test"), "--witness", _wvkey(w2, "w2.test")]

    def run(text: str, quorum: int) -> tuple[int, str]:
        note_file.write_text(text)
        capsys.readouterr()
        status = mesa([*args, "--quorum", str(quorum)])
        return status, capsys.readouterr().out

    status, out = run(once, 2)
    assert status == 1 and "verified" not in out.splitlines()
    assert "checkpoint has 1 of the 2 cosignatures required" in out
    assert run(once, 1) == (0, "verified\n")
    assert run(once + cosign(body, "w2.test", w2, 1_760_000_001), 2) == (0, "verified\n")
    # another tree head (or one the log did not sign) does not stand for the hand's checkpoint
    other = sign_note(checkpoint_body(ORIGIN, 1, b"\x01" * 32), ORIGIN, key.private_key)
    status, out = run(other + cosign(checkpoint_body(ORIGIN, 1, b"\x01" * 32), "w1.test", w1, 1), 1)
    assert status == 1 and "not the hand's checkpoint" in out
    stranger = sign_note(body, ORIGIN, Ed25519PrivateKey.generate())
    status, out = run(stranger, 1)
    assert status == 1 and "the log's signature" in out
