"""The player's page checks each hand by itself (api/static/js/guard.js and verify.js, run by
Node's WebCrypto here): its own seed and receipt against the public transcript. A forged
transcript (substituted seed, regenerated moves and result) raises the alarm; the honest hand
gets the quiet mark."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import msgspec
import pytest

from fairness.commitments import player_seed_commitment
from fairness.keys import OperatorKey
from tests.fairness.test_fairness_receipts import _hand, open_hand

SCRIPT = Path(__file__).parent / "page" / "check_hands.mjs"


@pytest.fixture(scope="module")
def node() -> str:
    found = shutil.which("node")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("node is missing in CI: .ci/run installs nodejs")
        pytest.skip("node is not installed")
    return found


def _case(name: str, hand: Any, own_seed: str, receipt: Any, key: OperatorKey) -> dict[str, Any]:
    return {
        "name": name,
        "transcript": msgspec.to_builtins(hand.transcript),
        "own": {
            "seat": 0,
            "seed": own_seed,
            "commitment": player_seed_commitment(own_seed),
            "receipt": msgspec.to_builtins(receipt),
        },
        "first_keys": [key.public_hex()],
    }


def test_page_marks_honest_hand_and_alarms_on_forgeries(
    node: str, operator_key: OperatorKey, tmp_path: Path
) -> None:
    opened = open_hand(operator_key)
    seeds = ["ana-seed", "beto-seed", "cris-seed"]
    honest = _hand(operator_key, opened, seeds)
    substituted = _hand(operator_key, opened, ["house-pick", *seeds[1:]], logged=seeds)
    forked = _hand(operator_key, opened, ["house-pick", *seeds[1:]])
    cases = [
        _case("honest", honest, "ana-seed", honest.receipt, operator_key),
        _case("substituted", substituted, "ana-seed", honest.receipt, operator_key),
        _case("forked", forked, "ana-seed", honest.receipt, operator_key),
    ]
    data = tmp_path / "cases.json"
    data.write_text(json.dumps(cases))
    done = subprocess.run(
        [node, str(SCRIPT), str(data)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    out = {r["name"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert out["honest"]["problems"] == [], out["honest"]
    assert out["honest"]["failed"] == []  # the nine checks pass (replay is partial in JS)
    for name in ("substituted", "forked"):
        problems = " ".join(out[name]["problems"])
        assert "seed_receipt" in problems, out[name]
        assert "does not hold your seed" in problems
