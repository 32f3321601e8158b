"""The runtime reads a variant's table timing from its RuleSet, never from its name: the same
match with a RuleSet that sets `turn_timeout_ms` or `claim_after_ms` gets that timer."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fairness.flow import open_deal
from fairness.keys import OperatorKey
from services.engine import records as L
from services.engine import rules as R
from services.engine import runtime as RT
from services.engine.contract import CreateMatch
from tests.engine.engine_helpers import spec


def _dealt(rules_change: dict[str, int]) -> RT.Match:
    """A 4-player casa match, dealt (nobody committed a seed), its RuleSet changed."""
    key = OperatorKey(Ed25519PrivateKey.generate())
    cm = msgspec.convert(spec("rt1", "casa", {"players": 4}, 4), CreateMatch)
    m = RT.Match.create(cm, key, 0)
    m.rules = msgspec.structs.replace(m.rules, **rules_change)
    purpose = m.needs_deal()
    assert purpose == "deal"
    opened = open_deal(
        key,
        deal_id="rt1/1.d",
        table_id="rt1",
        variant="casa",
        options=dict(cm.options),
        tile_set=6,
        hand_size=7,
        seats=[s.player_id for s in m.seats],
        now=datetime.fromtimestamp(0, tz=UTC),
        purpose=purpose,
    )
    m.apply(
        L.Open(
            at_ms=0,
            purpose=purpose,
            deal_id=opened.deal_id,
            server_seed=opened.server_seed.hex(),
            commitment=opened.commitment,
        )
    )
    m.apply(L.CloseCommit(at_ms=RT.SEED_COMMIT_TIMEOUT_MS))
    assert m.hand is not None and m.hand.phase == R.PHASE_PLAY
    return m


def test_runtime_turn_timeout_comes_from_the_ruleset() -> None:
    plain = _dealt({})
    d = plain.deadline()
    assert d is not None and d.kind == "abandon"
    m = _dealt({"turn_timeout_ms": 5_000})
    d = m.deadline()
    assert d is not None and d.kind == "turn" and d.at_ms == m.since_ms + 5_000
    assert m.due_step(d.at_ms - 1) is None
    step = m.due_step(d.at_ms)
    assert isinstance(step, L.Act) and step.by == "timeout"
    assert m.hand is not None and step.action == R.heaviest_playable(m.hand)


def test_runtime_claim_comes_from_the_ruleset() -> None:
    m = _dealt({"claim_after_ms": 7_000})
    assert m.claimable
    d = m.deadline()
    assert d is not None and d.kind == "claim" and d.at_ms == m.since_ms + 7_000
    assert not _dealt({}).claimable
