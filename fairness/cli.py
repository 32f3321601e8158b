"""`mesa audit`: recompute shuffles and verify hand transcripts (no web or database code)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from fairness.shuffle import FairnessInputError, iter_tile_strings, shuffle_tiles, validate_tile_set


class UsageError(Exception):
    """Bad command line or bad input file: one line on stderr, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # never print usage blocks or exit from argparse
        raise UsageError(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="mesa audit", description="Audit Mesa deals (docs/fairness.md).")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    s = sub.add_parser("shuffle", help="print the mesa-shuffle-v1 tile order")
    s.add_argument("--server-seed", required=True, help="64 hex digits (revealed after the hand)")
    s.add_argument("--deal-id", required=True)
    s.add_argument("--tiles", required=True, help="6 (double-six) or 9 (double-nine)")
    s.add_argument(
        "--seed", action="append", default=[], help="player seed, in seat order (repeat)"
    )
    v = sub.add_parser("verify", help="verify a hand transcript")
    v.add_argument("transcript", help="transcript JSON file, or - for stdin")
    v.add_argument("--checkpoint", help="signed checkpoint JSON to prove inclusion against")
    v.add_argument(
        "--public-key", action="append", default=[], help="operator public key (PEM or hex)"
    )
    v.add_argument(
        "--receipt", help="your seed receipt (JSON, from /log/receipts/<deal id>) for this hand"
    )
    v.add_argument(
        "--note",
        help="the cosigned C2SP note of the hand's checkpoint (from /log/checkpoints), for --quorum",
    )
    v.add_argument("--log-key", help="the log's verifier key, or its file (with --note)")
    v.add_argument("--witness", action="append", default=[], help="a trusted witness's key")
    v.add_argument("--quorum", type=int, default=0, help="cosignatures the checkpoint needs")
    w = sub.add_parser("witness", help="a C2SP tlog-witness the log pushes its checkpoints to")
    ws = w.add_subparsers(dest="witness_command", parser_class=_Parser, required=True)
    srv = ws.add_parser("serve", help="run a C2SP tlog-witness HTTP server")
    srv.add_argument("--key", required=True, help="witness Ed25519 key file (PEM or hex)")
    srv.add_argument("--name", required=True, help="witness name (its key's name)")
    srv.add_argument(
        "--log-key",
        dest="log_keys",
        action="append",
        required=True,
        help="a log's verifier key (its name is the log's origin), or its file; repeat",
    )
    srv.add_argument("--state", required=True, help="folder keeping the witness state")
    srv.add_argument("--listen", default="127.0.0.1:7380", help="HOST:PORT to serve on")
    c = sub.add_parser(
        "checkpoint", help="accept the log's latest checkpoint only as the policy says"
    )
    c.add_argument("--log", required=True, help="base URL of /log/, or a folder")
    c.add_argument("--log-key", required=True, help="the log's verifier key, or its file")
    c.add_argument("--state", required=True, help="folder keeping the last checkpoint")
    c.add_argument("--witness", action="append", default=[], help="a trusted witness's key")
    c.add_argument("--quorum", type=int, default=1, help="cosignatures required")
    r = sub.add_parser(
        "rotate-key", help="operator: announce a new signing key in the log and switch to it"
    )
    r.add_argument("--new-key", required=True, help="the new Ed25519 private key file (PEM/hex)")
    return p


def _cmd_rotate_key(ns: argparse.Namespace) -> int:
    import asyncio

    from fairness.keys import OperatorKey, OperatorKeyError, private_key_from_text
    from fairness.log_store import LogError, LogStore
    from fairness.rotate import rotate_key
    from services.common.config import ConfigError, load_settings
    from services.common.db import create_pool

    try:
        settings = load_settings()
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    key_file = settings.operator_key_file
    if key_file is None or os.environ.get("MESA_OPERATOR_KEY"):
        raise UsageError("the operator key comes from MESA_OPERATOR_KEY: rotate it by hand")
    try:
        old = OperatorKey(private_key_from_text(_read(str(key_file))))
        new = OperatorKey(private_key_from_text(_read(ns.new_key)))
    except OperatorKeyError as exc:
        raise UsageError(str(exc)) from None

    async def run() -> int:
        pool = await create_pool(
            settings.database_url, application_name="mesa-rotate-key", max_size=2, min_size=1
        )
        try:
            done = await rotate_key(LogStore(pool, old, settings.log_origin), new, key_file)
        except LogError as exc:
            print(f"mesa audit: rotate-key refused: {exc}", file=sys.stderr)
            return 1
        finally:
            await pool.close()
        print(
            f"key {done.new_key_id} announced by {done.old_key_id} at log index "
            f"{done.leaf_index}; {key_file} now holds the new key (the old "
            f"one is in {done.retired_file}); restart the engine to sign with it"
        )
        return 0

    return asyncio.run(run())


def _cmd_shuffle(ns: argparse.Namespace) -> int:
    try:
        tiles = int(ns.tiles)
    except ValueError:
        raise UsageError(f"unknown tile set {ns.tiles!r}: must be 6 or 9") from None
    validate_tile_set(tiles)
    print(" ".join(iter_tile_strings(shuffle_tiles(ns.server_seed, ns.deal_id, ns.seed, tiles))))
    return 0


def _read(path: str) -> bytes:
    try:
        return sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None


def load_replayer() -> Any:
    """The rules core's replay entry as a verify.Replayer, or None when it is unavailable."""
    try:
        from fairness.rules_bridge import replayer
    except ImportError:
        return None
    return replayer()


def _cmd_verify(ns: argparse.Namespace) -> int:
    from fairness.commitments import raw_public_key
    from fairness.keys import OperatorKeyError, public_key_from_text
    from fairness.transcript import decode_receipt, decode_signed, decode_transcript
    from fairness.verify import verify_transcript

    transcript = decode_transcript(_read(ns.transcript))
    checkpoint = decode_signed(_read(ns.checkpoint)) if ns.checkpoint else None
    receipt = decode_receipt(_read(ns.receipt)) if ns.receipt else None
    keys = None
    if ns.public_key:
        keys = []
        for f in ns.public_key:
            try:
                keys.append(raw_public_key(public_key_from_text(_read(f))))
            except OperatorKeyError as exc:
                raise UsageError(f"{f}: {exc}") from None
    report = verify_transcript(
        transcript,
        public_keys=keys,
        checkpoint=checkpoint,
        replayer=load_replayer(),
        receipt=receipt,
    )
    cosigned = _witness_policy(ns, checkpoint or transcript.checkpoint)
    if report.ok and cosigned is None:
        print("verified")
        return 0
    for c in report.checks:
        if c.status != "pass":
            label = "skipped" if c.status == "skipped" else "failed"
            print(f"{c.name}: {label}: {c.detail}")
    if cosigned is not None:
        print(f"checkpoint_cosignatures: failed: {cosigned}")
    return 1


def _witness_policy(ns: argparse.Namespace, checkpoint: Any) -> str | None:
    """None when the hand's checkpoint has the cosignatures `--quorum` asks (or none are
    asked); else why not. The cosigned note must be the same tree head, signed by the log."""
    from fairness.tlog import ALG_COSIGNATURE_V1, NoteError, open_checkpoint, parse_verifier_key
    from fairness.tlog import verify_note as verify_signed_note

    if ns.quorum < 0:
        raise UsageError("--quorum must be 0 or more")
    if ns.quorum == 0:
        return None
    if not ns.note or not ns.log_key:
        raise UsageError("--quorum needs --note (the cosigned checkpoint) and --log-key")
    try:
        log_key = parse_verifier_key(_text_arg(ns.log_key))
        witnesses = [parse_verifier_key(_text_arg(w)) for w in ns.witness]
    except NoteError as exc:
        raise UsageError(str(exc)) from None
    note = _read(ns.note).decode("utf-8", "replace")
    try:
        cp = open_checkpoint(note, log_key)
    except NoteError as exc:
        return f"the log's signature: {exc}"
    try:
        signed = verify_signed_note(note, witnesses)[1] if witnesses else []
    except NoteError as exc:
        if "not signed by any known key" not in str(exc):
            return str(exc)  # a bad signature by a trusted witness
        signed = []
    record = checkpoint.record
    if (cp.size, cp.root.hex()) != (record.get("tree_size"), record.get("root_hash")):
        return "the note is not the hand's checkpoint (another size or root)"
    count = sum(1 for v in signed if v.alg == ALG_COSIGNATURE_V1)
    if count < ns.quorum:
        return f"checkpoint has {count} of the {ns.quorum} cosignatures required"
    return None


MAX_FETCH_BYTES = 1 << 20


def _fetcher(base: str) -> Any:
    """Reads `/log/<path>` from a URL or from a folder that mirrors it."""
    if not base.startswith(("http://", "https://")):
        folder = Path(base)

        def read(path: str) -> bytes:
            try:
                return (folder / path).read_bytes()
            except OSError as exc:
                raise UsageError(f"cannot read {folder / path}: {exc.strerror}") from None

        return read
    import httpx

    client = httpx.Client(timeout=30.0)

    def get(path: str) -> bytes:
        r = client.get(base.rstrip("/") + "/" + path)
        if r.status_code != 200 or len(r.content) > MAX_FETCH_BYTES:
            raise UsageError(f"GET {path}: HTTP {r.status_code}")
        return r.content

    return get


def _text_arg(value: str) -> str:
    p = Path(value)
    return p.read_text().strip() if p.is_file() else value.strip()


def _rotated_log_keys(fetch: Any, log_key: Any) -> list[Any]:
    """Later log keys, followed from the pinned `--log-key` through the rotation records of
    `/log/keys` (each signed by a key already trusted); none when the log lists none."""
    import json

    from fairness.witness import log_keys_from_chain

    try:
        listing = json.loads(fetch("keys"))
    except (UsageError, ValueError):
        return []  # a mirror without the key list: only the pinned key
    rotations = listing.get("key_rotations", []) if isinstance(listing, dict) else []
    return [k for k in log_keys_from_chain(log_key, rotations) if k != log_key]


def _cmd_watch(ns: argparse.Namespace) -> int:
    from fairness.merkle import ProofError
    from fairness.tlog import NoteError, parse_verifier_key
    from fairness.witness import SplitView, accept_checkpoint

    fetch = _fetcher(ns.log)
    try:
        log_key = parse_verifier_key(_text_arg(ns.log_key))
        witnesses = [parse_verifier_key(_text_arg(w)) for w in getattr(ns, "witness", [])]
    except NoteError as exc:
        raise UsageError(str(exc)) from None
    quorum = getattr(ns, "quorum", 0)
    try:
        also = _rotated_log_keys(fetch, log_key)
        accepted = accept_checkpoint(fetch, log_key, Path(ns.state), witnesses, quorum, also)
    except SplitView as exc:
        print(f"refused: {exc}")
        return 1
    except (NoteError, ProofError) as exc:
        print(f"refused: {exc}")
        return 1
    cp = accepted.checkpoint
    by = ", ".join(accepted.cosigned_by) or "no witness"
    print(f"accepted {cp.origin} size {cp.size}, cosigned by {by}")
    return 0


def _cmd_witness_serve(ns: argparse.Namespace) -> int:
    import asyncio

    from fairness.keys import OperatorKeyError, private_key_from_text
    from fairness.tlog import NoteError, parse_verifier_key
    from fairness.witness_server import Witness, serve

    host, sep, port_text = ns.listen.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise UsageError(f"--listen must be HOST:PORT, got {ns.listen!r}")
    try:
        key = private_key_from_text(_read(ns.key))
    except OperatorKeyError as exc:
        raise UsageError(f"{ns.key}: {exc}") from None
    log_keys: dict[str, list[Any]] = {}
    try:
        for text in ns.log_keys:
            v = parse_verifier_key(_text_arg(text))
            log_keys.setdefault(v.name, []).append(v)
    except NoteError as exc:
        raise UsageError(str(exc)) from None
    try:
        witness = Witness(ns.name, key, log_keys, Path(ns.state))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(f"witness {witness.verifier_key()}", flush=True)

    def ready(port: int) -> None:
        print(f"listening on http://{host}:{port}/add-checkpoint", flush=True)

    asyncio.run(serve(witness, host.strip("[]"), int(port_text), ready))
    return 0


def main(argv: list[str]) -> int:
    from fairness.transcript import TranscriptError

    try:
        ns = _parser().parse_args(argv)
        if ns.command == "shuffle":
            return _cmd_shuffle(ns)
        if ns.command == "rotate-key":
            return _cmd_rotate_key(ns)
        if ns.command == "witness":
            return _cmd_witness_serve(ns)
        if ns.command == "checkpoint":
            return _cmd_watch(ns)
        return _cmd_verify(ns)
    except (UsageError, FairnessInputError, TranscriptError) as exc:
        print(f"mesa audit: error: {exc}", file=sys.stderr)
        return 2
