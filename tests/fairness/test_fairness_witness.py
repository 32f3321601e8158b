"""Witnesses and checkpoint policy: the operator pushes each checkpoint to a witness
(`mesa audit witness serve`, C2SP tlog-witness) and publishes its cosignature; `mesa audit
checkpoint` accepts a checkpoint only with its quorum of cosignatures and refuses a split view,
keeping both checkpoints as evidence."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fairness.keys import load_operator_key
from fairness.log_store import LogStore
from fairness.merkle import MemoryTree, root_from_leaf_hashes
from fairness.tlog import (
    TILE_HEIGHT,
    checkpoint_body,
    sign_note,
    tile_path,
    tile_width,
)
from services.cli import main as mesa
from services.common.db import create_pool
from services.common.migrate import upgrade
from tests.api.platform_stack import COMPONENTS, platform
from tests.fairness.fairness_helpers import opened_deal
from tests.fairness.test_fairness_public_log import _mirror
from tests.fairness.test_fairness_witness_server import _wvkey, free_port, running_witness

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
    wvkey = _wvkey(witness_key, "witness.test")
    port = free_port()
    mirror = tmp_path / "mirror"
    async with platform(
        platform_db,
        internal_secret,
        tmp_path,
        log_origin=ORIGIN,
        witnesses=((wvkey, f"http://127.0.0.1:{port}"),),
    ) as p:
        key = load_operator_key(tmp_path / "operator_key.pem")
        fair = p.services["engine"].state.engine.fairness
        pool = await create_pool(platform_db, application_name="witness-test", max_size=4)
        store = LogStore(pool, key, ORIGIN)
        try:
            async with p.client() as anon:
                log_vkey = (await anon.get("/log/key")).text.strip()
                async with running_witness(
                    witness_key, [log_vkey], tmp_path / "witness-state", port, "witness.test"
                ):
                    for size in (5, 300):
                        have = (await store.head())[0]
                        deals = [opened_deal(key, f"w/{i}") for i in range(have, size)]
                        await store.append_many([d.commitment for d in deals])
                        await store.checkpoint_if_due(force=True)
                        # the operator pushes it to the witness and publishes the cosigned note
                        await fair.checkpoint()
                        latest = (await anon.get("/log/checkpoint")).text
                        assert "\u2014 witness.test " in latest, size
                        (mirror / "checkpoint").parent.mkdir(parents=True, exist_ok=True)
                        (mirror / "checkpoint").write_text(latest)
                        await _mirror(anon, mirror, size)
                history = (await anon.get("/log/checkpoints")).json()["checkpoints"]
                assert [c["tree_size"] for c in history] == [5, 300]
                assert all("\u2014 witness.test " in c["note"] for c in history)
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
