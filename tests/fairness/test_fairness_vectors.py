"""The test vectors published in docs/fairness.md, and RFC 6962's reference Merkle data."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fairness.commitments import (
    canonical_json,
    checkpoint_record,
    commitment_record,
    key_id,
    leaf_bytes,
    parse_time,
    player_seed_commitment,
    raw_public_key,
    server_seed_commitment,
    sign_record,
    verify_signed,
)
from fairness.merkle import (
    EMPTY_ROOT,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    root_from_leaf_hashes,
    verify_consistency,
    verify_inclusion,
)
from fairness.shuffle import (
    block_message,
    cuban_draw,
    deal,
    iter_tile_strings,
    pares_o_nones,
    shuffle_tiles,
    tile_str,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "fairness.md"


def _rows(prefix: str) -> list[list[str]]:
    rows = []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith(f"| {prefix}"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows.append([c[1:-1] if c.startswith("`") and c.endswith("`") else c for c in cells])
    return rows


SHUFFLE_ROWS = _rows("V")
DRAW_ROWS = _rows("D")
EXAMPLES = {r[0]: r[2] for r in _rows("X")}


def test_doc_has_at_least_ten_shuffle_vectors() -> None:
    assert len(SHUFFLE_ROWS) >= 10
    assert len({r[0] for r in SHUFFLE_ROWS}) == len(SHUFFLE_ROWS)


@pytest.mark.parametrize("row", SHUFFLE_ROWS, ids=[r[0] for r in SHUFFLE_ROWS])
def test_shuffle_vector(row: list[str]) -> None:
    _, server_seed, deal_id, seeds_json, n, expected = row
    seeds = json.loads(seeds_json)
    got = " ".join(iter_tile_strings(shuffle_tiles(server_seed, deal_id, seeds, int(n))))
    assert got == expected


def test_deal_layout_of_v04() -> None:
    row = next(r for r in SHUFFLE_ROWS if r[0] == "V04")
    d = deal(row[1], row[2], json.loads(row[3]), 6, 7)
    hands, stock = d.as_strings()
    assert hands[0] == "0-5 1-2 0-0 4-4 6-6 0-2 4-5".split()
    assert hands[3] == "1-4 3-6 5-6 2-4 2-5 2-3 1-5".split()
    assert stock == []
    d9 = deal(row[1], row[2], json.loads(row[3]), 6, 5)
    assert [t for h in d9.hands for t in h] + list(d9.stock) == shuffle_tiles(
        row[1], row[2], json.loads(row[3]), 6
    )


def test_first_keystream_block_in_doc() -> None:
    text = DOC.read_text(encoding="utf-8")
    msg = block_message("d1", ["", ""], 0)
    assert msg == b"mesa-shuffle-v1|d1|||0"
    assert hmac.new(bytes(32), msg, hashlib.sha256).hexdigest() in text


@pytest.mark.parametrize("row", DRAW_ROWS, ids=[r[0] for r in DRAW_ROWS])
def test_other_random_choice_vectors(row: list[str]) -> None:
    _, server_seed, deal_id, seeds_json, rounds, draw_winner, fingers, pon_winner = row
    seeds = json.loads(seeds_json)
    side, got_rounds = cuban_draw(server_seed, deal_id, seeds)
    assert ", ".join(f"{tile_str(a)} {tile_str(b)}" for a, b in got_rounds) == rounds
    assert side == int(draw_winner)
    side2, (f0, f1) = pares_o_nones(server_seed, deal_id, seeds)
    assert f"{f0} {f1}" == fingers
    assert side2 == int(pon_winner)


def test_record_and_signature_examples() -> None:
    sk = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(EXAMPLES["X01"]))
    pub = raw_public_key(sk.public_key())
    assert pub.hex() == EXAMPLES["X02"]
    assert key_id(pub) == EXAMPLES["X03"]
    record = json.loads(EXAMPLES["X05"])
    assert canonical_json(record).decode() == EXAMPLES["X05"]
    assert record["commitment"] == server_seed_commitment(EXAMPLES["X04"])
    rebuilt = commitment_record(
        deal_id=record["deal_id"],
        table_id=record["table_id"],
        variant=record["variant"],
        options=record["options"],
        tile_set=record["tile_set"],
        hand_size=record["hand_size"],
        seats=[s["player"] for s in record["seats"]],
        commitment=record["commitment"],
        time=parse_time(record["time"]),
        signing_key_id=EXAMPLES["X03"],
    )
    assert canonical_json(rebuilt).decode() == EXAMPLES["X05"]
    envelope = sign_record(sk, record)
    assert envelope["signature"] == EXAMPLES["X06"]
    assert verify_signed(envelope, {EXAMPLES["X03"]: pub}) == record
    assert leaf_hash(leaf_bytes(envelope)).hex() == EXAMPLES["X07"]
    cp = json.loads(EXAMPLES["X08"])
    assert cp == checkpoint_record(
        origin="mesa-fairness-log",
        tree_size=1,
        root_hash=bytes.fromhex(EXAMPLES["X07"]),
        time=parse_time(cp["time"]),
        signing_key_id=EXAMPLES["X03"],
    )
    assert canonical_json(cp).decode() == EXAMPLES["X08"]
    assert sign_record(sk, cp)["signature"] == EXAMPLES["X09"]
    assert player_seed_commitment("alice") == EXAMPLES["X10"]


def test_canonical_json_rules() -> None:
    assert canonical_json({"b": 1, "a": [True, None, "é\n\u0001"]}) == (
        '{"a":[true,null,"é\\n\\u0001"],"b":1}'.encode()
    )
    for bad in ({"x": 1.5}, {"x": 2**53}, {"é": 1}, {1: 2}, {"x": b"raw"}):
        with pytest.raises(ValueError):
            canonical_json(bad)


# --- RFC 6962 reference data (certificate-transparency merkle_tree_test / trillian testdata)

LEAVES = [
    bytes.fromhex(h)
    for h in [
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    ]
]
HASHES = [leaf_hash(d) for d in LEAVES]
ROOTS = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
INCLUSION = [  # (leaf index, tree size, path)
    (0, 1, []),
    (
        0,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        5,
        8,
        [
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (2, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (
        1,
        5,
        [
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
]
CONSISTENCY = [  # (old size, new size, proof)
    (1, 1, []),
    (
        1,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        6,
        8,
        [
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (
        2,
        5,
        [
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
]


def test_rfc6962_empty_tree() -> None:
    assert EMPTY_ROOT.hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert root_from_leaf_hashes([]) == EMPTY_ROOT


def test_rfc6962_leaf_and_node_hashes() -> None:
    assert HASHES[0].hex() == ROOTS[0]
    assert leaf_hash(b"") == hashlib.sha256(b"\x00").digest()


@pytest.mark.parametrize("n", range(1, 9))
def test_rfc6962_roots(n: int) -> None:
    assert root_from_leaf_hashes(HASHES[:n]).hex() == ROOTS[n - 1]


def test_doc_root_table_matches_reference() -> None:
    doc_roots = {
        int(m.group(1)): m.group(2)
        for m in re.finditer(r"^\| (\d) \| `([0-9a-f]{64})` \|$", DOC.read_text(), re.MULTILINE)
    }
    assert doc_roots == {0: EMPTY_ROOT.hex(), **{i + 1: r for i, r in enumerate(ROOTS)}}


@pytest.mark.parametrize(("index", "size", "path"), INCLUSION)
def test_rfc6962_inclusion(index: int, size: int, path: list[str]) -> None:
    proof = inclusion_proof(HASHES[:size], index)
    assert [p.hex() for p in proof] == path
    verify_inclusion(index, size, HASHES[index], proof, bytes.fromhex(ROOTS[size - 1]))


@pytest.mark.parametrize(("old", "new", "path"), CONSISTENCY)
def test_rfc6962_consistency(old: int, new: int, path: list[str]) -> None:
    proof = consistency_proof(HASHES[:new], old)
    assert [p.hex() for p in proof] == path
    verify_consistency(
        old, new, bytes.fromhex(ROOTS[old - 1]), bytes.fromhex(ROOTS[new - 1]), proof
    )


# ------------------------------------------------------------------ 8.5: C2SP formats, receipts

C2SP = {r[0]: r[2] for r in _rows("C")}


def _text(value: str) -> str:
    return json.loads(value) if value.startswith('"') else value


def test_c2sp_vectors_present() -> None:
    assert {f"C{i:02d}" for i in range(1, 14)} <= set(C2SP)


def test_c2sp_key_checkpoint_and_cosignature_vectors() -> None:
    from fairness.tlog import (
        ALG_COSIGNATURE_V1,
        checkpoint_body,
        cosign,
        open_checkpoint,
        parse_verifier_key,
        sign_note,
        verifier_key,
        verify_note,
    )

    key = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(EXAMPLES["X01"]))
    origin = C2SP["C01"]
    assert verifier_key(origin, raw_public_key(key.public_key())) == C2SP["C02"]
    body = checkpoint_body(origin, 1, bytes.fromhex(EXAMPLES["X07"]))
    assert body == _text(C2SP["C03"])
    assert sign_note(body, origin, key) == _text(C2SP["C04"])
    cp = open_checkpoint(_text(C2SP["C04"]), parse_verifier_key(C2SP["C02"]))
    assert (cp.size, cp.root.hex()) == (1, EXAMPLES["X07"])
    witness = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(C2SP["C05"]))
    wkey = verifier_key("witness.example", raw_public_key(witness.public_key()), ALG_COSIGNATURE_V1)
    assert wkey == C2SP["C06"]
    line = cosign(body, "witness.example", witness, 1767322000)
    assert line == _text(C2SP["C07"])
    signed = _text(C2SP["C04"]) + line
    _, by = verify_note(signed, [parse_verifier_key(C2SP["C02"]), parse_verifier_key(wkey)])
    assert len(by) == 2


def test_c2sp_tile_vectors() -> None:
    from fairness.tlog import encode_index, entry_bundle, parse_entry_bundle, parse_tile_path

    leaves = list(LEAVES)
    tile = b"".join(leaf_hash(x) for x in leaves)
    assert hashlib.sha256(tile).hexdigest() == C2SP["C08"]
    assert entry_bundle(leaves).hex() == C2SP["C09"]
    assert parse_entry_bundle(bytes.fromhex(C2SP["C09"])) == leaves
    assert encode_index(1234067) == C2SP["C10"]
    ref = parse_tile_path("tile/2/" + C2SP["C10"] + ".p/5")
    assert (ref.level, ref.index, ref.width) == (2, 1234067, 5)


def test_cpu_seed_and_seed_record_vectors() -> None:
    from datetime import UTC, datetime

    from fairness.commitments import cpu_seed, seed_commitments_record

    server_seed = bytes.fromhex(EXAMPLES["X04"])
    deal_id = "table-7/match-3/hand-1"
    assert cpu_seed(server_seed, deal_id, 3) == C2SP["C11"]
    key = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(EXAMPLES["X01"]))
    record = seed_commitments_record(
        deal_id=deal_id,
        commitment=server_seed_commitment(server_seed),
        seats=[
            ("player", player_seed_commitment("alice")),
            ("player", player_seed_commitment("bob")),
            ("player", None),
            ("cpu", player_seed_commitment(C2SP["C11"])),
        ],
        time=datetime(2026, 1, 2, 3, 4, 6, tzinfo=UTC),
        signing_key_id=EXAMPLES["X03"],
    )
    assert canonical_json(record).decode() == C2SP["C12"]
    assert sign_record(key, record)["signature"] == C2SP["C13"]
