"""The gateway against the real ledger, engine and matchmaking apps (in-process, over ASGI)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fairness.cli import load_replayer
from fairness.transcript import decode_receipt, decode_transcript
from fairness.verify import verify_transcript
from services.common.migrate import upgrade
from tests.api.api_helpers import make_user, sign_in
from tests.api.platform_stack import COMPONENTS, platform, play_turns


@pytest.fixture(scope="module")
def platform_db(database_url: str) -> str:
    upgrade(database_url, COMPONENTS)
    return database_url


async def test_api_paid_pairs_match_end_to_end(platform_db, internal_secret, tmp_path):
    names = ["ana", "beto", "cris", "dani"]
    for n in names:
        await make_user(platform_db, n)
    await make_user(platform_db, "caja", "finance")
    await make_user(platform_db, "audi", "auditor")
    async with platform(platform_db, internal_secret, tmp_path) as p:
        async with p.client() as fin:
            await sign_in(fin, "caja")
            for n in names:
                r = await fin.post(
                    "/api/finance/deposits",
                    json={"player": n, "amount": 2000, "reference": "test deposit"},
                )
                assert r.status_code == 200, r.text
                assert r.json()["balance"] == 2000
            over = await fin.post(
                "/api/finance/withdrawals",
                json={"player": "ana", "amount": 999999, "reference": "too much"},
            )
            assert 400 <= over.status_code < 500
        clients: dict[str, Any] = {}
        async with (
            p.client() as c0,
            p.client() as c1,
            p.client() as c2,
            p.client() as c3,
        ):
            for n, c in zip(names, (c0, c1, c2, c3), strict=True):
                await sign_in(c, n)
                clients[n] = c
            kinds = (await c0.get("/api/lobby/kinds")).json()
            assert any(k["kind"] == "apuesta-parejas" for k in kinds["kinds"])
            for n in names:
                r = await clients[n].post(
                    "/api/lobby/quick-join", json={"kind": "apuesta-parejas", "tier": "10"}
                )
                assert r.status_code == 200, r.text
            match_id = None
            for _ in range(100):
                mine = (await c0.get("/api/lobby/mine")).json()
                match_id = next((t["match_id"] for t in mine if t["match_id"]), None)
                if match_id:
                    break
                await asyncio.sleep(0.05)
            assert match_id
            # Nobody else's tiles: the view of seat X lists only X's hand.
            view = (await c0.get(f"/api/matches/{match_id}")).json()
            assert "hands" not in str(view["state"]) and "server_seed" not in str(view)
            final = await play_turns(clients, match_id)
            result = final["state"]["result"]
            assert final["state"]["status"] == "finished"
            winners = set(result["winners"])
            for _ in range(100):
                balances = {
                    n: (await clients[n].get("/api/me/wallet")).json()["balance"] for n in names
                }
                if sum(balances.values()) == 8000 - 400:
                    break
                await asyncio.sleep(0.05)
            for n in names:
                expected = 1000 + 1800 if n in winners else 1000
                assert balances[n] == expected, (n, balances)
            # Hand history and transcripts of the player's own hands.
            hist = (await c0.get("/api/history")).json()["transcripts"]
            assert hist, "finished hands are listed"
            deal_id = hist[0]["deal_id"]
            doc = await c0.get(f"/api/transcripts/{deal_id}")
            assert doc.status_code == 200, doc.text
            transcript = decode_transcript(doc.content)
            # The seats' seed receipt and the transcripts are public, without an account;
            # players appear under per-match pseudonyms, the same in every hand of the match.
            async with p.client() as anon:
                rec = await anon.get(f"/log/receipts/{deal_id}")
                public = (await anon.get(f"/log/transcripts?match_id={match_id}&limit=50")).json()
                # the open audit pages by cursor like the account routes
                walked: list[str] = []
                after: int | None = None
                for _ in range(60):
                    query: dict[str, Any] = {"match_id": match_id, "limit": 1}
                    if after is not None:
                        query["after"] = after
                    page = (await anon.get("/log/transcripts", params=query)).json()
                    walked += [x["deal_id"] for x in page["transcripts"]]
                    after = page["next"]
                    if after is None:
                        break
                open_doc = await anon.get(f"/log/transcripts/{deal_id}")
                assert (await anon.get("/log/keys")).status_code == 200
            assert rec.status_code == 200, rec.text
            assert open_doc.status_code == 200 and open_doc.json() == doc.json()
            assert walked == [x["deal_id"] for x in public["transcripts"]]
            labels = {tuple(x["players"]) for x in public["transcripts"] if x["players"]}
            assert len(labels) == 1, labels
            assert not set(names) & set(next(iter(labels)))
            assert all(str(x).startswith("p-") for x in next(iter(labels)))
            receipt = decode_receipt(rec.content)
            report = verify_transcript(transcript, replayer=load_replayer(), receipt=receipt)
            failed = {c.name: c.detail for c in report.checks if c.status != "pass"}
            assert not failed, failed
        async with p.client() as fin:
            await sign_in(fin, "caja")
            tb = (await fin.get("/api/finance/trial-balance")).json()
            assert tb["balanced"] is True
            pots = (await fin.get("/api/finance/pots")).json()
            assert any(x["match_id"] == match_id and x["status"] == "settled" for x in pots)
            com = (await fin.get("/api/finance/commission?by=tier")).json()
            assert sum(r["commission"] for r in com) == 400
            csv = await fin.get("/api/finance/export/pots")
            assert csv.status_code == 200 and csv.text.startswith("match_id")
            chain = await fin.get("/api/finance/chain")
            assert chain.status_code == 200
            st = await fin.get("/api/finance/statements/ana")
            assert st.status_code == 200 and st.json()["lines"]
        async with p.client() as aud:
            await sign_in(aud, "audi")
            keys = (await aud.get("/api/audit/keys")).json()["keys"]
            assert keys and len(keys[0]["public_key"]) == 64
            cp = await aud.get("/api/audit/checkpoint")
            assert cp.status_code == 200
            size = cp.json()["record"]["tree_size"]
            proof = await aud.get(f"/api/audit/proofs/consistency?first=1&second={size}")
            assert proof.status_code == 200
            inc = await aud.get(f"/api/audit/proofs/inclusion?leaf_index=0&tree_size={size}")
            assert inc.status_code == 200
            bad = await aud.get(f"/api/audit/proofs/inclusion?leaf_index={size}&tree_size={size}")
            assert bad.status_code == 400
            listed = (await aud.get("/api/audit/transcripts")).json()["transcripts"]
            assert listed
            assert (await aud.get("/api/audit/orphans")).status_code == 200
            assert (await aud.get("/api/audit/leaves?start=0&end=5")).status_code == 200
            # both lists read whole by pages, following `next`
            walked: list[Any] = []
            after: int | None = None
            for _ in range(len(listed) + 1):
                query: dict[str, Any] = (
                    {"limit": 1} if after is None else {"limit": 1, "after": after}
                )
                page = (await aud.get("/api/audit/transcripts", params=query)).json()
                walked += page["transcripts"]
                after = page["next"]
                if after is None:
                    break
            assert walked == listed
            leaves: list[Any] = []
            start: int | None = 0
            while start is not None:
                leaf_page = (
                    await aud.get(f"/api/audit/leaves?start={start}&end={start + 3}")
                ).json()
                leaves += leaf_page["leaves"]
                start = leaf_page["next"]
            assert [x["index"] for x in leaves] == list(range(leaf_page["tree_size"]))


async def test_api_free_cpu_table_and_strangers_see_nothing(platform_db, internal_secret, tmp_path):
    await make_user(platform_db, "eli")
    await make_user(platform_db, "fran")
    async with platform(platform_db, internal_secret, tmp_path) as p:
        async with p.client() as eli, p.client() as fran:
            await sign_in(eli, "eli")
            await sign_in(fran, "fran")
            r = await eli.post("/api/lobby/cpu", json={"kind": "apuesta-parejas"})
            assert r.status_code == 200, r.text
            match_id = r.json()["match_id"]
            assert match_id
            assert (await fran.get(f"/api/matches/{match_id}")).status_code == 404
            assert (
                await fran.post(
                    f"/api/matches/{match_id}/actions",
                    json={"seq": 0, "action": {"type": "play", "tile": "6-6"}},
                )
            ).status_code == 404
            bad = await eli.post(
                f"/api/matches/{match_id}/actions",
                json={"seq": 0, "action": {"type": "teleport"}},
            )
            assert bad.status_code == 400
            chat = await eli.post(
                f"/api/matches/{match_id}/chat", json={"kind": "phrase", "code": "buena"}
            )
            assert chat.status_code == 200
            free_text = await eli.post(
                f"/api/matches/{match_id}/chat", json={"kind": "phrase", "code": "hello_world"}
            )
            assert free_text.status_code in (400, 429)
            assert (await fran.get(f"/api/matches/{match_id}/chat")).status_code == 404
            final = await play_turns({"eli": eli}, match_id)
            assert final["state"]["status"] in ("finished", "void")
