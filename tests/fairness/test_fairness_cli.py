"""`mesa audit`: shuffle output, verify exit codes, bad input exits 2 with one line."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from fairness import cli
from fairness.keys import OperatorKey
from fairness.transcript import Transcript, encode_transcript
from services.cli import main as mesa
from tests.fairness.fairness_helpers import fake_replayer

V04 = "0-5 1-2 0-0 4-4 6-6 0-2 4-5 3-5 2-6 1-6 0-1 0-6 5-5 2-2 3-4 3-3 4-6 1-3 1-1 0-3 0-4 1-4 3-6 5-6 2-4 2-5 2-3 1-5"


def test_shuffle_prints_tiles(capsys: pytest.CaptureFixture[str]) -> None:
    seeds = ["--seed", "alice", "--seed", "bob", "--seed", "carol", "--seed", "dave"]
    code = mesa(
        [
            "audit",
            "shuffle",
            "--server-seed",
            bytes(range(32)).hex(),
            "--deal-id",
            "table-7/match-3/hand-1",
            "--tiles",
            "6",
            *seeds,
        ]
    )
    out = capsys.readouterr()
    assert code == 0
    assert out.out.strip() == V04
    assert out.err == ""


def test_shuffle_empty_seed_and_uppercase_hex(capsys: pytest.CaptureFixture[str]) -> None:
    code = mesa(
        ["audit", "shuffle", "--server-seed", "FF" * 32, "--deal-id", "T.42/m_9/h-10"]
        + ["--tiles", "6", "--seed", "x"]
    )
    assert code == 0
    assert capsys.readouterr().out.startswith("3-5 2-5 2-6")
    assert (
        cli.main(
            ["shuffle", "--server-seed", "00" * 32, "--deal-id", "d1", "--tiles", "6", "--seed="]
        )
        == 0
    )


BAD_SHUFFLES = [
    ["--server-seed", "0g" * 32, "--deal-id", "d", "--tiles", "6"],
    ["--server-seed", "00" * 31, "--deal-id", "d", "--tiles", "6"],
    ["--server-seed", "00" * 32, "--deal-id", "has space", "--tiles", "6"],
    ["--server-seed", "00" * 32, "--deal-id", "", "--tiles", "6"],
    ["--server-seed", "00" * 32, "--deal-id", "d", "--tiles", "7"],
    ["--server-seed", "00" * 32, "--deal-id", "d", "--tiles", "six"],
    ["--server-seed", "00" * 32, "--deal-id", "d", "--tiles", "6", "--seed", "a+b"],
    ["--server-seed", "00" * 32, "--deal-id", "d", "--tiles", "6", "--seed", "x" * 65],
    ["--server-seed", "00" * 32, "--deal-id", "d"],
    ["--server-seed", "00" * 32, "--deal-id", "d", "--tiles", "6", "--bogus"],
]


@pytest.mark.parametrize("args", BAD_SHUFFLES)
def test_bad_shuffle_input_exits_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert mesa(["audit", "shuffle", *args]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.count("\n") == 1 and out.err.startswith("mesa audit: error:")
    assert "Traceback" not in out.err


def test_no_subcommand_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert mesa(["audit"]) == 2
    assert mesa(["audit", "frobnicate"]) == 2
    assert capsys.readouterr().err.count("\n") == 2


@pytest.fixture
def replay_with_fake(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "load_replayer", lambda: fake_replayer)


def _write(tmp_path: Path, t: Transcript) -> Path:
    p = tmp_path / "t.json"
    p.write_bytes(encode_transcript(t))
    return p


def test_verify_ok(
    tmp_path: Path,
    transcript: Transcript,
    operator_key: OperatorKey,
    replay_with_fake: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = _write(tmp_path, transcript)
    assert mesa(["audit", "verify", str(path)]) == 0
    assert capsys.readouterr().out == "verified\n"
    pem = tmp_path / "op.pem"
    pem.write_text(operator_key.public_pem())
    hexkey = tmp_path / "op.hex"
    hexkey.write_text(operator_key.public_hex() + "\n")
    cp = tmp_path / "cp.json"
    cp.write_bytes(msgspec.json.encode(transcript.checkpoint))
    args = ["audit", "verify", str(path), "--public-key", str(pem), "--checkpoint", str(cp)]
    assert mesa(args) == 0
    assert mesa(["audit", "verify", str(path), "--public-key", str(hexkey)]) == 0


def test_verify_names_failed_checks(
    tmp_path: Path,
    transcript: Transcript,
    replay_with_fake: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    doc = msgspec.to_builtins(transcript)
    doc["server_seed"] = "11" * 32
    doc["checkpoint"]["signature"] = "00" * 64
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(doc))
    assert mesa(["audit", "verify", str(p)]) == 1
    out = capsys.readouterr().out
    named = {line.split(":")[0] for line in out.splitlines()}
    assert named == {
        "server_seed_opening",
        "deal_recomputation",
        "checkpoint_signature",
        "result_record",  # the logged result reveals the real server seed
    }


def test_verify_without_rules_core_is_not_verified(
    tmp_path: Path,
    transcript: Transcript,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(cli, "load_replayer", lambda: None)
    assert mesa(["audit", "verify", str(_write(tmp_path, transcript))]) == 1
    assert capsys.readouterr().out.startswith("replay: skipped")


def test_verify_bad_files_exit_2(
    tmp_path: Path, transcript: Transcript, capsys: pytest.CaptureFixture[str]
) -> None:
    good = encode_transcript(transcript)
    cases = {
        "truncated.json": good[: len(good) // 2],
        "empty.json": b"",
        "notjson.json": b"hello",
        "array.json": b"[]",
        "wrongtype.json": good.replace(b'"first_hand": true', b'"first_hand": "yes"'),
        "extra.json": good.replace(b'"deal_id"', b'"surprise": 1, "deal_id"', 1),
        "format.json": good.replace(b"mesa-transcript-v1", b"mesa-transcript-v9"),
        "binary.json": b"\xff\xfe\x00",
    }
    for name, data in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        assert mesa(["audit", "verify", str(p)]) == 2, name
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, (name, err)
    assert mesa(["audit", "verify", str(tmp_path / "missing.json")]) == 2
    p = tmp_path / "ok.json"
    p.write_bytes(good)
    bad_key = tmp_path / "key.txt"
    bad_key.write_text("not a key")
    assert mesa(["audit", "verify", str(p), "--public-key", str(bad_key)]) == 2
    bad_cp = tmp_path / "cp.json"
    bad_cp.write_text('{"record": ')
    assert mesa(["audit", "verify", str(p), "--checkpoint", str(bad_cp)]) == 2
    capsys.readouterr()
