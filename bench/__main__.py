"""Run every benchmark, or those named: `python -m bench [rules ledger ...]`."""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).resolve().parent
    names = sorted(
        m.name.removeprefix("bench_")
        for m in pkgutil.iter_modules([str(here)])
        if m.name.startswith("bench_")
    )
    chosen = argv or names
    unknown = [n for n in chosen if n not in names]
    if unknown:
        print(
            f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(names)}",
            file=sys.stderr,
        )
        return 2
    for name in chosen:
        print(f"== bench {name}", flush=True)
        module = importlib.import_module(f"bench.bench_{name}")
        result = module.main()
        print(json.dumps(result, indent=2, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
