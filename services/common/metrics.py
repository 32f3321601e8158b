"""Prometheus metrics shared by every service process.

Each process has its own registry (scraped per pod). Labels are bounded: the route template,
never the raw path, so a client cannot create unbounded series by varying ids.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client import generate_latest as _generate_latest

REGISTRY = CollectorRegistry(auto_describe=True)

REQUESTS = Counter(
    "mesa_http_requests",
    "HTTP requests handled, by service, method, route template and status class",
    ["service", "method", "route", "status"],
    registry=REGISTRY,
)
REQUEST_SECONDS = Histogram(
    "mesa_http_request_duration_seconds",
    "HTTP request latency in seconds",
    ["service", "route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
    registry=REGISTRY,
)
LIVE_MATCHES = Gauge(
    "mesa_live_matches", "Matches running in this engine process", registry=REGISTRY
)
ACTIONS = Counter(
    "mesa_actions", "Player and forced actions applied by the engine", registry=REGISTRY
)
LEDGER_POSTINGS = Counter(
    "mesa_ledger_entries", "Journal entries posted, by operation", ["operation"], registry=REGISTRY
)
OUTSTANDING_HOLDS = Gauge(
    "mesa_outstanding_holds", "Seat holds placed and not yet released or moved", registry=REGISTRY
)
SETTLEMENT_RETRIES = Counter(
    "mesa_settlement_retries", "Settlement or void calls retried by the engine", registry=REGISTRY
)
SETTLEMENT_FAILURES = Counter(
    "mesa_settlement_failures", "Settlement or void attempts that failed", registry=REGISTRY
)
CHECKPOINT_AGE_SECONDS = Gauge(
    "mesa_log_checkpoint_age_seconds",
    "Age of the newest signed transparency-log checkpoint",
    registry=REGISTRY,
)
ORPHAN_COMMITMENTS = Gauge(
    "mesa_log_orphan_commitments",
    "Commitments in the log without a result or void record",
    registry=REGISTRY,
)
RECONCILIATION_DISCREPANCIES = Gauge(
    "mesa_reconciliation_discrepancies",
    "Discrepancies found by the last ledger reconciliation",
    registry=REGISTRY,
)
# Sub-millisecond to a second: a stall of the event loop, a collector pass, a log commit.
_STALL_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
LOG_BATCH_ENTRIES = Histogram(
    "mesa_engine_log_batch_entries",
    "Match-log entries per commit of the engine's group commit",
    buckets=(1, 2, 3, 4, 6, 8, 16, 64, 512),
    registry=REGISTRY,
)
LOG_COMMIT_SECONDS = Histogram(
    "mesa_engine_log_commit_seconds",
    "Time of one match-log group commit (the INSERT, its NOTIFY and the WAL flush)",
    buckets=_STALL_BUCKETS_S,
    registry=REGISTRY,
)
LOOP_LAG_SECONDS = Histogram(
    "mesa_event_loop_lag_seconds",
    "How late a short timer fires on the process's event loop: time every request, socket "
    "frame and background task in the process waited for the loop",
    buckets=_STALL_BUCKETS_S,
    registry=REGISTRY,
)
GC_PAUSE_SECONDS = Histogram(
    "mesa_gc_pause_seconds",
    "Garbage-collector passes and how long each stalled the process, by generation",
    ["generation"],
    buckets=_STALL_BUCKETS_S,
    registry=REGISTRY,
)


# Labelled children looked up on hot paths, by (metric, label values): `labels()` takes a lock
# and builds its key on every call. Bounded: label values are route templates, methods, status
# classes, operation names; beyond the bound, plain `labels()`.
_CHILDREN: dict[tuple[Any, tuple[str, ...]], Any] = {}
_MAX_CHILDREN = 1024


def child(metric: Any, *label_values: str) -> Any:
    """`metric.labels(*label_values)`, kept after the first call."""
    key = (metric, label_values)
    found = _CHILDREN.get(key)
    if found is None:
        found = metric.labels(*label_values)
        if len(_CHILDREN) < _MAX_CHILDREN:
            _CHILDREN[key] = found
    return found


def render() -> tuple[bytes, str]:
    return _generate_latest(REGISTRY), CONTENT_TYPE_LATEST
