"""`mesa audit`: recompute shuffles and verify hand transcripts (no web or database code)."""

from __future__ import annotations

import argparse
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
    return p


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
    if report.ok:
        print("verified")
        return 0
    for c in report.checks:
        if c.status != "pass":
            label = "skipped" if c.status == "skipped" else "failed"
            print(f"{c.name}: {label}: {c.detail}")
    return 1


def main(argv: list[str]) -> int:
    from fairness.transcript import TranscriptError

    try:
        ns = _parser().parse_args(argv)
        if ns.command == "shuffle":
            return _cmd_shuffle(ns)
        return _cmd_verify(ns)
    except (UsageError, FairnessInputError, TranscriptError) as exc:
        print(f"mesa audit: error: {exc}", file=sys.stderr)
        return 2
