"""The public log under /log/ checked by an implementation that is not Mesa's: Go's
golang.org/x/mod/sumdb/note and .../tlog (Debian: golang-golang-x-mod-dev) verify the
checkpoint signatures, rebuild every root from the hash tiles, prove the inclusion of every
entry of the entry bundles and the consistency between successive checkpoints."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from fairness.keys import load_operator_key
from fairness.log_store import LogStore
from fairness.merkle import leaf_hash
from fairness.tlog import (
    TILE_HEIGHT,
    TILE_WIDTH,
    open_checkpoint,
    parse_entry_bundle,
    parse_verifier_key,
    sign_note,
    tile_path,
    tile_width,
)
from services.common.db import create_pool
from services.common.migrate import upgrade
from tests.api.api_helpers import make_user, sign_in
from tests.api.platform_stack import COMPONENTS, platform
from tests.fairness.fairness_helpers import opened_deal

GO_DIR = Path(__file__).parent / "goverify"
ORIGIN = "mesa.test/fairness-log"
SIZES = (70, 256, 513)  # a partial first tile, exactly one full tile, a second level


@pytest.fixture(scope="module")
def platform_db(database_url: str) -> str:
    upgrade(database_url, COMPONENTS)
    return database_url


@pytest.fixture(scope="module")
def goverify(tmp_path_factory: pytest.TempPathFactory) -> Path:
    go = shutil.which("go")
    if go is None:
        if os.environ.get("CI"):
            pytest.fail("go is missing in CI: .ci/run installs golang-go")
        pytest.skip("go is not installed (apt-get install golang-go golang-golang-x-mod-dev)")
    out = tmp_path_factory.mktemp("go") / "goverify"
    env = _go_env(out.parent)
    done = subprocess.run(
        [go, "build", "-o", str(out), "."],
        cwd=GO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, "go build failed (golang-golang-x-mod-dev?): " + done.stderr
    return out


def _go_env(scratch: Path) -> dict[str, str]:
    # Debian installs x/mod's sources under /usr/share/gocode: GOPATH mode, no module proxy.
    return {
        **os.environ,
        "GO111MODULE": "off",
        "GOPATH": "/usr/share/gocode",
        "GOCACHE": str(scratch / "cache"),
        "GOFLAGS": "",
    }


async def _mirror(client: httpx.AsyncClient, folder: Path, size: int) -> None:
    """Fetch every hash tile and entry bundle a tree of `size` has, as files."""
    levels: list[int | None] = [None]
    level = 0
    while size >> (TILE_HEIGHT * level):
        levels.append(level)
        level += 1
    for lvl in levels:
        index = 0
        while (width := tile_width(size, lvl, index)) > 0:
            rel = tile_path(lvl, index, width)
            r = await client.get("/log/" + rel)
            assert r.status_code == 200, (rel, r.text)
            assert "immutable" in r.headers["cache-control"]
            expected = width * 32 if lvl is not None else None
            if expected is not None:
                assert len(r.content) == expected
            target = folder / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(r.content)
            index += 1


async def test_public_log_verified_by_go(platform_db, internal_secret, tmp_path, goverify):
    async with platform(platform_db, internal_secret, tmp_path, log_origin=ORIGIN) as p:
        key = load_operator_key(tmp_path / "operator_key.pem")
        pool = await create_pool(platform_db, application_name="public-log-test", max_size=4)
        store = LogStore(pool, key, ORIGIN)
        mirror = tmp_path / "mirror"
        notes: list[Path] = []
        try:
            async with p.client() as anon:  # no account, no session
                assert (await anon.get("/log/checkpoint")).status_code == 404
                appended = 0
                for n, size in enumerate(SIZES):
                    deals = [opened_deal(key, f"pub/{i}") for i in range(appended, size)]
                    for start in range(0, len(deals), 100):
                        await store.append_many([d.commitment for d in deals[start : start + 100]])
                    appended = size
                    assert await store.checkpoint_if_due(force=True) is not None
                    r = await anon.get("/log/checkpoint")
                    assert r.status_code == 200
                    assert r.headers["content-type"].startswith("text/plain")
                    note = tmp_path / f"checkpoint.{n}"
                    note.write_text(r.text)
                    notes.append(note)
                    await _mirror(anon, mirror, size)
                r = await anon.get("/log/key")
                assert r.status_code == 200
                (mirror / "key").write_text(r.text)
                verifier = parse_verifier_key(r.text)
                assert verifier.name == ORIGIN
                assert verifier.public_raw == key.public_raw
                history = (await anon.get("/log/checkpoints")).json()["checkpoints"]
                assert [c["tree_size"] for c in history] == list(SIZES)
                assert [c["note"] for c in history] == [n.read_text() for n in notes]
                # Mesa's own reading agrees (first entry, last root).
                cp = open_checkpoint(notes[-1].read_text(), verifier)
                assert cp.size == SIZES[-1]
                first = parse_entry_bundle((mirror / "tile/entries/000").read_bytes())
                assert len(first) == TILE_WIDTH
                assert leaf_hash(first[0]) == (mirror / "tile/0/000").read_bytes()[:32]
                # canonical paths only; a tile beyond the checkpoint does not exist
                assert (await anon.get("/log/tile/0/0")).status_code == 400
                assert (await anon.get("/log/tile/0/000.p/256")).status_code == 400
                assert (await anon.get("/log/tile/0/009")).status_code == 404
                assert (await anon.get("/log/tile/entries/x000/001")).status_code == 400
            # auditors mirror the log in pages of up to 1000 leaves, far over 64 KiB each
            await make_user(platform_db, "audi", "auditor")
            async with p.client() as aud:
                await sign_in(aud, "audi")
                page = await aud.get("/api/audit/leaves?start=0&end=1000")
                assert page.status_code == 200, page.text[:200]
                assert len(page.content) > 64 * 1024
                assert len(page.json()["leaves"]) == SIZES[-1]
        finally:
            await store.aclose()
            await pool.close()

    env = _go_env(tmp_path)
    ok = subprocess.run(
        [str(goverify), str(mirror), *map(str, notes)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip().endswith("verified")
    assert f"size {SIZES[-1]}" in ok.stdout

    # Go refuses a tampered entry ...
    bad = tmp_path / "tampered"
    shutil.copytree(mirror, bad)
    bundle = bad / "tile/entries/001"
    data = bytearray(bundle.read_bytes())
    data[-3] ^= 0x01
    bundle.write_bytes(bytes(data))
    refused = subprocess.run(
        [str(goverify), str(bad), str(notes[-1])], env=env, capture_output=True, text=True
    )
    assert refused.returncode != 0 and "entry" in refused.stderr

    # ... and a checkpoint signed by another key under the log's name.
    body = notes[-1].read_text().split("\n\n")[0] + "\n"
    from tests.fairness.fairness_helpers import example_key

    forged = tmp_path / "forged"
    forged.write_text(sign_note(body, ORIGIN, example_key().private_key))
    refused = subprocess.run(
        [str(goverify), str(mirror), str(forged)], env=env, capture_output=True, text=True
    )
    assert refused.returncode != 0
