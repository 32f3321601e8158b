"""`mesa rules list` and `mesa rules replay FILE|-`."""

from __future__ import annotations

import json
import sys

from services.engine.rules.replay import ReplayError, replay
from services.engine.rules.variants import list_variants

USAGE = "usage: mesa rules list | mesa rules replay FILE|-"


def main(argv: list[str]) -> int:
    if argv == ["list"]:
        print(json.dumps(list_variants(), indent=2))
        return 0
    if len(argv) == 2 and argv[0] == "replay":
        try:
            if argv[1] == "-":
                text = sys.stdin.read()
            else:
                with open(argv[1], encoding="utf-8") as fh:
                    text = fh.read()
        except OSError as exc:
            print(f"move 0: cannot read the scenario: {exc.strerror}", file=sys.stderr)
            return 2
        try:
            scenario = json.loads(text)
        except ValueError as exc:
            print(f"move 0: the scenario is not valid JSON: {exc}", file=sys.stderr)
            return 2
        try:
            output = replay(scenario)
        except ReplayError as exc:
            print(str(exc).replace("\n", " "), file=sys.stderr)
            return 2
        print(json.dumps(output))
        return 0
    print(USAGE, file=sys.stderr)
    return 2
