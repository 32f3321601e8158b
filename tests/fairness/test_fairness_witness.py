"""Witnesses and checkpoint policy: `mesa audit witness` checks consistency from the tiles,
cosigns (C2SP tlog-cosignature) and the operator publishes the cosignature; `mesa audit
checkpoint` accepts a checkpoint only with its quorum of cosignatures and refuses a split view,
keeping both checkpoints as evidence."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fairness.commitments import raw_public_key
from fairness.keys import load_operator_key, private_key_pem
from fairness.log_store import LogStore
from fairness.merkle import MemoryTree, root_from_leaf_hashes
from fairness.tlog import (
    ALG_COSIGNATURE_V1,
    TILE_HEIGHT,
    checkpoint_body,
    sign_note,
    tile_path,
    tile_width,
    verifier_key,
)
from services.cli import main as mesa
from services.common.db import create_pool
from services.common.migrate import upgrade
from tests.api.platform_stack import COMPONENTS, platform
from tests.fairness.fairness_helpers import opened_deal
from tests.fairness.test_fairness_public_log import _mirror

ORIGIN = "mesa.test/witnessed-log"


@pytest.fixture(scope="module")
def platform_db(database_url: str) -> str:
    upgrade(database_url, COMPONENTS)
    return database_url


def _forged_mirror(folder: Path, key: Ed25519PrivateKey, leaves: list[bytes]) -> None:
    """Another log of the same name and key: what a split view shows a second auditor."""
    tree = MemoryTree()
    for leaf in leaves:
        tree.append(leaf)
    folder.mkdir(parents=True)
    (folder / "checkpoint").write_text(
        sign_note(checkpoint_body(ORIGIN, tree.size, tree.root()), ORIGIN, key)
    )
    level = 0
    while tree.size >> (TILE_HEIGHT * level):
        index = 0
        while (width := tile_width(tree.size, level, index)) > 0:
            start = (index * 256) << (TILE_HEIGHT * level)
            step = 1 << (TILE_HEIGHT * level)
            data = b"".join(_node(tree, start + i * step, step) for i in range(width))
            target = folder / tile_path(level, index, width)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            index += 1
        level += 1


def _node(tree: MemoryTree, start: int, count: int) -> bytes:
    return root_from_leaf_hashes(tree.hashes[start : start + count])


async def test_witness_cosigns_and_policy_refuses_a_split_view(
    platform_db: str, internal_secret: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    witness_key = Ed25519PrivateKey.generate()
    key_file = tmp_path / "witness.pem"
    key_file.write_bytes(private_key_pem(witness_key))
    wvkey = verifier_key(
        "witness.test", raw_public_key(witness_key.public_key()), ALG_COSIGNATURE_V1
    )
    mirror = tmp_path / "mirror"
    async with platform(
        platform_db, internal_secret, tmp_path, log_origin=ORIGIN, log_witnesses=(wvkey,)
    ) as p:
        key = load_operator_key(tmp_path / "operator_key.pem")
        pool = await create_pool(platform_db, application_name="witness-test", max_size=4)
        store = LogStore(pool, key, ORIGIN)
        try:
            async with p.client() as anon:
                log_vkey = (await anon.get("/log/key")).text.strip()
                leaves = []
                for round_no, size in enumerate((5, 300)):
                    have = (await store.head())[0]
                    deals = [opened_deal(key, f"w/{i}") for i in range(have, size)]
                    await store.append_many([d.commitment for d in deals])
                    leaves += [d.commitment for d in deals]
                    await store.checkpoint_if_due(force=True)
                    (mirror / "checkpoint").parent.mkdir(parents=True, exist_ok=True)
                    (mirror / "checkpoint").write_text((await anon.get("/log/checkpoint")).text)
                    await _mirror(anon, mirror, size)
                    # the witness: consistency from the tiles, cosignature, to the operator
                    capsys.readouterr()
                    args = ["audit", "witness", "--log", str(mirror), "--log-key", log_vkey]
                    args += ["--state", str(tmp_path / "witness-state")]
                    assert mesa([*args, "--key", str(key_file), "--name", "witness.test"]) == 0
                    cosigned = capsys.readouterr().out
                    r = await anon.post(
                        "/log/cosignature", json={"witness_key": wvkey, "note": cosigned}
                    )
                    assert r.status_code == 200, r.text
                    latest = (await anon.get("/log/checkpoint")).text
                    assert latest == cosigned, round_no
                    (mirror / "checkpoint").write_text(latest)
                # a cosignature by a key that did not sign is refused
                other = Ed25519PrivateKey.generate()
                bad = await anon.post(
                    "/log/cosignature",
                    json={
                        "witness_key": verifier_key(
                            "witness.test",
                            raw_public_key(other.public_key()),
                            ALG_COSIGNATURE_V1,
                        ),
                        "note": cosigned,
                    },
                )
                assert bad.status_code == 403  # not a witness this log publishes
                forged = cosigned[:-10] + ("A" if cosigned[-10] != "A" else "B") + cosigned[-9:]
                bad = await anon.post(
                    "/log/cosignature", json={"witness_key": wvkey, "note": forged}
                )
                assert bad.status_code == 400  # its signature does not verify
                history = (await anon.get("/log/checkpoints")).json()["checkpoints"]
                assert [c["tree_size"] for c in history] == [5, 300]
                assert all("— witness.test " in c["note"] for c in history)
        finally:
            await store.aclose()
            await pool.close()

    state = tmp_path / "auditor-state"
    policy = ["audit", "checkpoint", "--log", str(mirror), "--log-key", log_vkey]
    policy += ["--state", str(state), "--witness", wvkey, "--quorum", "1"]
    capsys.readouterr()
    assert mesa(policy) == 0
    assert "cosigned by witness.test" in capsys.readouterr().out
    # a quorum the checkpoint does not have
    assert mesa([*policy[:-1], "2"]) == 1
    assert "cosignatures required" in capsys.readouterr().out

    # The operator shows this auditor another log (same name, same key): refused, both kept.
    forked = tmp_path / "forked"
    _forged_mirror(forked, key.private_key, [b"rewritten history"] * 301)
    fork_args = ["audit", "checkpoint", "--log", str(forked), "--log-key", log_vkey]
    fork_args += ["--state", str(state), "--quorum", "0"]
    assert mesa(fork_args) == 1
    out = capsys.readouterr().out
    assert "split view" in out
    evidence = [d for d in state.iterdir() if d.name.startswith("split-view-")]
    assert len(evidence) == 1
    kept = {f.name: f.read_text() for f in evidence[0].iterdir()}
    assert kept["remembered.checkpoint"].startswith(f"{ORIGIN}\n300\n")
    assert kept["offered.checkpoint"].startswith(f"{ORIGIN}\n301\n")
    assert (state / "checkpoint").read_text() == kept["remembered.checkpoint"]
