"""Wires the rules core's replay into the verifier (imported lazily by `mesa audit verify`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fairness.verify import Replayer


def replayer() -> Replayer:
    """`services.engine.rules.replay.replay`: scenario -> {"events", "result", "awaiting"};
    raises on an invalid scenario or an illegal move (the verifier reports that as `replay`)."""
    from services.engine.rules.replay import replay

    def run(scenario: dict[str, Any]) -> Mapping[str, Any]:
        return replay(scenario)

    return run
