"""What the services measured about themselves during a load run, from their `/metrics`.

The client-observed latency of a load run is the sum of every hop; these histograms split it:
each process's event-loop lag (`mesa_event_loop_lag_seconds`), its collector pauses
(`mesa_gc_pause_seconds`) and each route's own latency (`mesa_http_request_duration_seconds`).
A scrape a second before and one a second after a measured window give its counts per
bucket (with those two seconds: a scrape holds a service's loop, so not at the window's edge).
"""

from __future__ import annotations

import math
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

HISTOGRAMS = (
    "mesa_event_loop_lag_seconds",
    "mesa_gc_pause_seconds",
    "mesa_http_request_duration_seconds",
    "mesa_engine_log_batch_entries",
    "mesa_engine_log_commit_seconds",
)
# The routes whose latency is worth a line in the report (the per-action hops).
ROUTES = ("/internal/matches/{match_id}/actions", "/internal/matches/{match_id}/feeds")

Buckets = dict[tuple[str, tuple[tuple[str, str], ...]], dict[float, float]]


async def scrape(urls: dict[str, str]) -> dict[str, Buckets]:
    """Cumulative bucket counts per process: {process: {(metric, labels): {le: count}}}."""
    out: dict[str, Buckets] = {}
    async with httpx.AsyncClient(timeout=10.0) as client:
        for name, url in urls.items():
            try:
                r = await client.get(url + "/metrics")
            except httpx.HTTPError:
                continue
            if r.status_code != 200:
                continue
            buckets: Buckets = {}
            for family in text_string_to_metric_families(r.text):
                if family.name not in HISTOGRAMS:
                    continue
                for sample in family.samples:
                    if not sample.name.endswith("_bucket"):
                        continue
                    labels = dict(sample.labels)
                    le = float(labels.pop("le"))
                    key = (family.name, tuple(sorted(labels.items())))
                    buckets.setdefault(key, {})[le] = sample.value
            out[name] = buckets
    return out


def _quantile(counts: dict[float, float], q: float) -> float | None:
    """Upper bound (seconds) of the bucket holding quantile q, or None without samples."""
    total = counts.get(math.inf, 0.0)
    if total <= 0:
        return None
    for le in sorted(counts):
        if counts[le] >= q * total:
            return le
    return math.inf


def _ms(seconds: float | None) -> float | str | None:
    if seconds is None:
        return None
    return ">1000" if math.isinf(seconds) else round(seconds * 1000, 2)


def summarize(before: dict[str, Buckets], after: dict[str, Buckets]) -> dict[str, Any]:
    """Per process, for the window between two scrapes: loop lag p50/p99/p99.9 (bucket upper
    bounds, ms), collector passes by generation with how many took over 10 ms, and the
    per-action routes' p50/p99."""
    report: dict[str, Any] = {}
    for process, now in after.items():
        then = before.get(process, {})
        entry: dict[str, Any] = {}
        gc_passes: dict[str, dict[str, float]] = {}
        for (metric, labels), counts in now.items():
            old = then.get((metric, labels), {})
            delta = {le: c - old.get(le, 0.0) for le, c in counts.items()}
            n = delta.get(math.inf, 0.0)
            label = dict(labels)
            if metric == "mesa_event_loop_lag_seconds":
                entry["loop_lag_ms"] = {
                    "probes": int(n),
                    "p50": _ms(_quantile(delta, 0.5)),
                    "p99": _ms(_quantile(delta, 0.99)),
                    "p99.9": _ms(_quantile(delta, 0.999)),
                    "over_10ms": int(n - delta.get(0.01, 0.0)),
                }
            elif metric == "mesa_engine_log_batch_entries" and n:
                entry["log_commits"] = {
                    "commits": int(n),
                    "entries_p50": _quantile(delta, 0.5),
                    "entries_p99": _quantile(delta, 0.99),
                }
            elif metric == "mesa_engine_log_commit_seconds" and n:
                entry["log_commit_ms"] = {
                    "p50": _ms(_quantile(delta, 0.5)),
                    "p99": _ms(_quantile(delta, 0.99)),
                    "p99.9": _ms(_quantile(delta, 0.999)),
                }
            elif metric == "mesa_gc_pause_seconds" and n:
                gc_passes[label.get("generation", "?")] = {
                    "passes": int(n),
                    "over_10ms": int(n - delta.get(0.01, 0.0)),
                }
            elif metric == "mesa_http_request_duration_seconds" and n:
                route = label.get("route", "")
                if route in ROUTES:
                    entry.setdefault("routes_ms", {})[route] = {
                        "requests": int(n),
                        "p50": _ms(_quantile(delta, 0.5)),
                        "p99": _ms(_quantile(delta, 0.99)),
                    }
        if gc_passes:
            entry["gc"] = gc_passes
        if entry:
            report[process] = entry
    return report
