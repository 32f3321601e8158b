"""The operator pushes each checkpoint to its witnesses (C2SP tlog-witness) and publishes the
cosigned checkpoint: end to end with two witness servers on loopback, one of them down."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fairness.keys import load_operator_key
from fairness.log_store import LogStore
from fairness.tlog import parse_verifier_key, split_note, verify_note
from services.cli import main as mesa
from services.common.db import create_pool
from services.common.migrate import upgrade
from tests.api.platform_stack import COMPONENTS, platform
from tests.fairness.fairness_helpers import opened_deal
from tests.fairness.test_fairness_public_log import _mirror
from tests.fairness.test_fairness_witness_server import _wvkey, free_port, running_witness

ORIGIN = "mesa.test/pushed-log"


@pytest.fixture(scope="module")
def platform_db(database_url: str) -> str:
    upgrade(database_url, COMPONENTS)
    return database_url


async def test_checkpoints_pushed_to_witnesses_and_published_cosigned(
    platform_db: str, internal_secret: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    k1, k2 = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    wv1, wv2 = _wvkey(k1, "w1.test/w"), _wvkey(k2, "w2.test/w")
    v1, v2 = parse_verifier_key(wv1), parse_verifier_key(wv2)
    port1, port2 = free_port(), free_port()
    witnesses = ((wv1, f"http://127.0.0.1:{port1}"), (wv2, f"http://127.0.0.1:{port2}"))
    async with platform(
        platform_db, internal_secret, tmp_path, log_origin=ORIGIN, witnesses=witnesses
    ) as p:
        key = load_operator_key(tmp_path / "operator_key.pem")
        fair = p.services["engine"].state.engine.fairness
        pool = await create_pool(platform_db, application_name="push-test", max_size=4)
        store = LogStore(pool, key, ORIGIN)
        try:
            async with p.client() as anon:
                log_vkey = (await anon.get("/log/key")).text.strip()
                async with running_witness(k1, [log_vkey], tmp_path / "w1", port1, "w1.test/w"):
                    # witness 2 is down: the checkpoint goes out with witness 1's cosignature
                    for size in (5, 300):
                        have = (await store.head())[0]
                        await store.append_many(
                            [opened_deal(key, f"p/{i}").commitment for i in range(have, size)]
                        )
                        await store.checkpoint_if_due(force=True)
                        await fair.checkpoint()
                        note = (await anon.get("/log/checkpoint")).text
                        body, sigs = split_note(note)
                        assert body.split("\n")[1] == str(size)
                        assert verify_note(note, [v1, v2])[1] == [v1]
                        assert [s.name for s in sigs] == [ORIGIN, "w1.test/w"]
                    # nothing kept about the witness that never answered
                    assert fair.witnesses.cosigned_sizes() == {v1.key(): 300}
                    mirror = tmp_path / "mirror"
                    (mirror / "checkpoint").parent.mkdir(parents=True)
                    (mirror / "checkpoint").write_text(note)
                    await _mirror(anon, mirror, 300)

                    # witness 2 comes up: the next round gets its cosignature too (from old 0)
                    async with running_witness(k2, [log_vkey], tmp_path / "w2", port2, "w2.test/w"):
                        await fair.checkpoint()
                        note2 = (await anon.get("/log/checkpoint")).text
                        assert verify_note(note2, [v1, v2])[1] == [v1, v2]
                        # a new checkpoint: both witnesses get the proof from their size (300)
                        await store.append_many(
                            [opened_deal(key, f"p/{i}").commitment for i in range(300, 310)]
                        )
                        await store.checkpoint_if_due(force=True)
                        await fair.checkpoint()
                        note3 = (await anon.get("/log/checkpoint")).text
                        assert "\n310\n" in note3
                        assert verify_note(note3, [v1, v2])[1] == [v1, v2]
                history = (await anon.get("/log/checkpoints")).json()["checkpoints"]
                assert [c["tree_size"] for c in history] == [5, 300, 310]
        finally:
            await store.aclose()
            await pool.close()

    # The auditor's policy: witness 1 and 2 pinned, quorum 2 refuses the once-cosigned note
    state = tmp_path / "auditor"
    policy = ["audit", "checkpoint", "--log", str(mirror), "--log-key", log_vkey]
    policy += ["--state", str(state), "--witness", wv1, "--witness", wv2]
    capsys.readouterr()
    assert mesa([*policy, "--quorum", "2"]) == 1
    out = capsys.readouterr().out
    assert "1 of the 2 cosignatures required" in out and "verified" not in out
    assert not (state / "checkpoint").exists()  # a refused checkpoint is not remembered
    assert mesa([*policy, "--quorum", "1"]) == 0
    assert "cosigned by w1.test/w" in capsys.readouterr().out
