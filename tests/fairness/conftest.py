"""Fixtures for the fairness tests."""

from __future__ import annotations

import pytest

from fairness.keys import OperatorKey
from fairness.transcript import Transcript
from tests.fairness.fairness_helpers import example_key, make_transcript


@pytest.fixture
def operator_key() -> OperatorKey:
    return example_key()


@pytest.fixture
def transcript(operator_key: OperatorKey) -> Transcript:
    return make_transcript(operator_key)
