"""The page's checkpoint policy (api/static/js/notes.js and guard.js, under Node's WebCrypto):
a checkpoint note is accepted only when the log's trusted key signed it and the pinned policy's
quorum of witnesses cosigned it; a refused one is not remembered, and an inconsistent one is a
split view kept as evidence."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fairness.commitments import raw_public_key
from fairness.tlog import checkpoint_body, cosign, sign_note
from tests.fairness.test_fairness_page_checks import node  # noqa: F401  (fixture)
from tests.fairness.test_fairness_witness_server import Log, _wvkey

SCRIPT = Path(__file__).parent / "page" / "check_policy.mjs"


def test_page_accepts_a_checkpoint_only_with_its_quorum(node: str, tmp_path: Path) -> None:  # noqa: F811
    log = Log("mesa.test/page-log")
    w1, w2, w3 = (Ed25519PrivateKey.generate() for _ in range(3))
    policy2 = {"quorum": 2, "witnesses": [_wvkey(w1, "w1.test"), _wvkey(w2, "w2.test")]}

    def cosigned(note: str, *ws: tuple[Ed25519PrivateKey, str]) -> str:
        body = note.split("\n\n")[0] + "\n"
        return note + "".join(cosign(body, name, k, 1_760_000_000) for k, name in ws)

    log.grow(10)
    at5, at10 = log.note(5), log.note(10)
    one = cosigned(at10, (w1, "w1.test"))
    two = cosigned(at10, (w1, "w1.test"), (w2, "w2.test"))
    head, _, last = one[:-1].rpartition("\n")
    name, sig = last.split(" ")[1:]
    blob = bytearray(base64.b64decode(sig))
    blob[30] ^= 1  # one bit of the Ed25519 signature
    forged = f"{head}\n\u2014 {name} {base64.b64encode(bytes(blob)).decode()}\n"
    stranger = Ed25519PrivateKey.generate()
    foreign = sign_note(checkpoint_body(log.origin, 10, log.tree.root()), log.origin, stranger)
    fork_note = sign_note(checkpoint_body(log.origin, 10, b"\x07" * 32), log.origin, log.key)
    cases = [
        {"name": "log_only_no_policy", "note": at10, "policy": {"quorum": 0, "witnesses": []}},
        {"name": "one_of_two", "note": one, "policy": policy2},
        {"name": "two_of_two", "note": two, "policy": policy2},
        {
            "name": "unknown_witness",
            "note": cosigned(at10, (w3, "w3.test")),
            "policy": {**policy2, "quorum": 1},
        },
        {"name": "forged_cosignature", "note": forged, "policy": {**policy2, "quorum": 1}},
        {
            "name": "unannounced_log_key",
            "note": cosigned(foreign, (w1, "w1.test"), (w2, "w2.test")),
            "policy": policy2,
        },
        # the memory: under-cosigned is not remembered, a fork is a split view with evidence
        {
            "name": "observe_5",
            "observe": True,
            "note": cosigned(at5, (w1, "w1.test"), (w2, "w2.test")),
            "policy": policy2,
        },
        {"name": "observe_10_short", "observe": True, "note": one, "policy": policy2},
        {"name": "observe_10", "observe": True, "note": two, "policy": policy2},
        {
            "name": "observe_fork",
            "observe": True,
            "note": cosigned(fork_note, (w1, "w1.test"), (w2, "w2.test")),
            "policy": policy2,
        },
    ]
    proofs = {
        "5-10": [h.hex() for h in log.tree.consistency(5, 10)],
        "10-10": [],
        "5-5": [],
    }
    data = tmp_path / "cases.json"
    data.write_text(
        json.dumps(
            {
                "log_key": raw_public_key(log.key.public_key()).hex(),
                "cases": cases,
                "proofs": proofs,
            }
        )
    )
    done = subprocess.run(
        [node, str(SCRIPT), str(data)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    out = {r["name"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert out["log_only_no_policy"]["ok"] is True
    assert out["one_of_two"] == {
        "name": "one_of_two",
        "ok": False,
        "error": "checkpoint has 1 of the 2 cosignatures required",
    }
    assert out["two_of_two"]["ok"] is True
    assert out["two_of_two"]["cosigners"] == ["w1.test", "w2.test"]
    assert "0 of the 1" in out["unknown_witness"]["error"]
    assert "does not verify" in out["forged_cosignature"]["error"]
    assert "not signed by a trusted log key" in out["unannounced_log_key"]["error"]
    assert out["observe_5"]["ok"] is True and out["observe_5"]["remembered"] == 1
    assert out["observe_10_short"]["ok"] is False
    assert out["observe_10_short"]["remembered"] == 1  # refused: not remembered
    assert out["observe_10"]["ok"] is True and out["observe_10"]["remembered"] == 2
    fork = out["observe_fork"]
    assert fork["ok"] is False and fork["evidence"] is True and fork["remembered"] == 2
