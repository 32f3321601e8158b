"""Seed receipts from the engine: every seat's seed commitment (CPU seats included) is in the
transparency log, and its receipt is served, before any seed is revealed; the hand is dealt
from exactly those seeds and its transcript verifies against the receipt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fairness.keys import load_operator_key
from fairness.rules_bridge import replayer
from fairness.transcript import decode_receipt, decode_transcript
from fairness.verify import verify_receipt, verify_transcript
from tests.engine.engine_helpers import auth, commitment, drive, seed_of, spec


async def test_receipt_before_reveal_and_transcript_matches_it(
    harness_factory: Any, internal_secret: bytes, key_file: Path
) -> None:
    h = auth(internal_secret)
    key = load_operator_key(key_file)
    body = spec("rc-casa", "casa", {"players": 4}, 4, bots=(1, 2, 3))
    async with harness_factory() as hz:
        c = hz.client
        assert (await c.post("/internal/matches", json=body, headers=h)).status_code == 200
        view = (await c.get("/internal/matches/rc-casa/seats/0/view", headers=h)).json()
        deal_id = view["state"]["deal_id"]
        assert [a["type"] for a in view["legal"]] == ["seed_commit"]
        # nothing to receipt while seats may still commit
        early = await c.get(f"/internal/audit/receipts/{deal_id}", headers=h)
        assert early.status_code == 404
        seed = seed_of(0, len(deal_id))
        r = await c.post(
            "/internal/matches/rc-casa/actions",
            json={
                "seat": 0,
                "seq": view["seq"],
                "action": {"type": "seed_commit", "commitment": commitment(seed)},
            },
            headers=h,
        )
        assert r.status_code == 200, r.text
        view = (await c.get("/internal/matches/rc-casa/seats/0/view", headers=h)).json()
        assert [a["type"] for a in view["legal"]] == ["seed_reveal"]  # not revealed yet
        got = await c.get(f"/internal/audit/receipts/{deal_id}", headers=h)
        assert got.status_code == 200, got.text
        receipt = decode_receipt(got.content)
        verify_receipt(receipt, [key.public_raw])
        seats = receipt.record.record["seats"]
        assert seats[0] == {"seat": 0, "source": "player", "commitment": commitment(seed)}
        assert [s["source"] for s in seats[1:]] == ["cpu"] * 3
        assert all(len(s["commitment"]) == 64 for s in seats)
        assert "server_seed" not in receipt.record.record

        final = await drive(c, hz.engine, "rc-casa", h)
        assert final["status"] in ("finished", "void")
        doc = await c.get(f"/internal/audit/transcripts/{deal_id}", headers=h)
        assert doc.status_code == 200, doc.text
        t = decode_transcript(doc.content)
        assert t.player_seeds[0].seed == seed
        report = verify_transcript(
            t, public_keys=[key.public_raw], replayer=replayer(), receipt=receipt
        )
        assert report.ok, [c for c in report.checks if c.status != "pass"]
