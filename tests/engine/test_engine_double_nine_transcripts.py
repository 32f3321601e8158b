"""Every closed deal of a double-nine match has a transcript that verifies: hands whose opener
a pair chose (Salgo / Sal tu), Miami's later partidas (a first hand again, from 0), and the
opening draws themselves (the Cuban draw, pares o nones)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from fairness import flow
from fairness.keys import load_operator_key
from fairness.rules_bridge import replayer
from fairness.transcript import decode_transcript
from fairness.verify import verify_transcript
from tests.engine.engine_helpers import auth, drive, spec

MATCHES = {
    "d9-habana": spec("d9-habana", "cubana", {"preset": "habana", "target": 100}, 4, bots=(1, 3)),
    "d9-miami": spec("d9-miami", "cubana", {"preset": "miami", "target": 150}, 4, bots=(1, 2, 3)),
}


@pytest.fixture
def fixed_server_seeds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Server seeds from a counter instead of the CSPRNG: the same hands on every run (one
    Miami match then surely lasts more than one partida)."""
    counter = iter(range(1_000_000))

    def seed() -> bytes:
        return hashlib.sha256(f"d9-test-{next(counter)}".encode()).digest()

    monkeypatch.setattr(flow, "new_server_seed", seed)


@pytest.mark.parametrize("match_id", sorted(MATCHES))
async def test_double_nine_transcripts_verify(
    harness_factory: Any,
    internal_secret: bytes,
    key_file: Path,
    match_id: str,
    fixed_server_seeds: None,
) -> None:
    h = auth(internal_secret)
    key = load_operator_key(key_file)
    rules = replayer()
    async with harness_factory() as hz:
        c = hz.client
        r = await c.post("/internal/matches", json=MATCHES[match_id], headers=h)
        assert r.status_code == 200, r.text
        final = await drive(c, hz.engine, match_id, h)
        assert final["status"] == "finished", final
        listed = await c.get(
            "/internal/audit/transcripts", params={"match_id": match_id, "limit": 200}, headers=h
        )
        deals = [x["deal_id"] for x in listed.json()["transcripts"]]
        purposes: dict[str, int] = {}
        chosen = later_first = 0
        for n, deal_id in enumerate(reversed(deals)):  # oldest first
            doc = await c.get(f"/internal/audit/transcripts/{deal_id}", headers=h)
            assert doc.status_code == 200, (deal_id, doc.text)
            t = decode_transcript(doc.content)
            report = verify_transcript(t, public_keys=[key.public_raw], replayer=rules)
            assert report.ok, (deal_id, [c for c in report.checks if c.status != "pass"])
            purpose = t.commitment.record["purpose"]
            purposes[purpose] = purposes.get(purpose, 0) + 1
            if purpose == "deal":
                assert t.opener is not None and t.opener >= 0
                if t.first_hand and n > 1:
                    later_first += 1
                if t.first_hand:
                    chosen += 1
        assert purposes.get("deal", 0) >= 2, purposes
        draw = "pares_o_nones" if match_id == "d9-miami" else "cuban_draw"
        assert purposes.get(draw, 0) >= 1, purposes
        assert chosen >= 1
        if match_id == "d9-miami":
            assert later_first >= 1, "a later partida starts from a first hand"
