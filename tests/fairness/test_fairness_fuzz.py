"""Any JSON value anywhere in a transcript: decoding refuses it or verify reports, never crashes."""

from __future__ import annotations

import copy
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairness.transcript import Transcript, TranscriptError, decode_transcript
from fairness.verify import verify_transcript
from tests.fairness.fairness_helpers import example_key, fake_replayer, make_transcript

BASE = msgspec.to_builtins(make_transcript(example_key()))

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=70),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


PATHS = _paths(BASE)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PATHS), JSON_VALUES)
def test_any_replacement_is_refused_or_reported(path: tuple[Any, ...], value: Any) -> None:
    doc = copy.deepcopy(BASE)
    target = doc
    for p in path[:-1]:
        target = target[p]
    target[path[-1]] = value
    try:
        t: Transcript = decode_transcript(msgspec.json.encode(doc))
    except TranscriptError:
        return
    report = verify_transcript(t, replayer=fake_replayer)
    if doc != BASE:
        assert isinstance(report.ok, bool)
