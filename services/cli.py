"""The `mesa` command: a thin dispatcher; each domain owns its own subcommand module.

Subcommand modules expose `main(argv: list[str]) -> int` and are imported lazily so that
`mesa rules ...` never pays for web or database imports.
"""

from __future__ import annotations

import importlib
import io
import os
import sys

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "up": ("launcher.up", "run the whole platform on loopback (embedded PostgreSQL)"),
    "migrate": ("services.common.migrate", "apply every service's database migrations"),
    "serve": ("services.common.serve", "run one service process (used by `mesa up`)"),
    "rules": ("services.engine.rules.cli", "list variants, replay a hand"),
    "audit": ("fairness.cli", "recompute shuffles, verify hand transcripts"),
    "finance": ("ledger.cli", "trial balance, reconciliation, hash-chain check, exports"),
    "cashier": ("ledger.cashier_cli", "open a wallet"),
    "integrity": ("integrity.cli", "scan for money flows, laundering and bots; a day's alerts"),
}

# Commands that run until stopped; the others (reports, exports) keep block buffering.
LONG_RUNNING = frozenset({"up", "serve"})


def _usage() -> str:
    lines = ["usage: mesa COMMAND [ARGS...]", "", "commands:"]
    for name, (_, help_text) in SUBCOMMANDS.items():
        lines.append(f"  {name:<9} {help_text}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help", "help"}:
        print(_usage())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in SUBCOMMANDS:
        print(f"mesa: unknown command {name!r}\n{_usage()}", file=sys.stderr)
        return 2
    if name in LONG_RUNNING:
        # Every line reaches a pipe or a log file at once (the URLs and "ready" must not wait
        # in a buffer until it fills or the process exits).
        for stream in (sys.stdout, sys.stderr):
            if isinstance(stream, io.TextIOWrapper):
                stream.reconfigure(line_buffering=True)
    module = importlib.import_module(SUBCOMMANDS[name][0])
    try:
        result: int = module.main(rest)
    except BrokenPipeError:
        # The reader went away (e.g. `mesa rules list | head`): not an error of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130
    return result


if __name__ == "__main__":
    sys.exit(main())
