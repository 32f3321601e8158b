"""Shared helpers for benchmarks: results go to bench/results/<name>.json (git-ignored)."""

from __future__ import annotations

import datetime as dt
import json
import platform
import time
from pathlib import Path
from typing import Any

import httpx

RESULTS_DIR = Path(__file__).resolve().parent / "results"
# uvicorn's HTTP protocol as `mesa serve` runs it: benchmarks started with the uvicorn command
# line pass it as `--http`, so they measure what is deployed.
SERVICE_HTTP_PROTOCOL = "httptools"


def write_result(name: str, data: dict[str, Any]) -> Path:
    """Write one benchmark's measurements, stamped with time and machine, and return the path."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    payload = {
        "benchmark": name,
        "measured_at": dt.datetime.now(dt.UTC).isoformat(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        **data,
    }
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    return path


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of an already sorted list (fraction in [0, 1])."""
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, int(fraction * len(sorted_values) + 0.5) - 1))
    return sorted_values[index]


def cpu_jiffies() -> tuple[int, int]:
    """(busy, total) CPU time of the whole machine so far, in clock ticks (/proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
    return sum(fields) - idle, sum(fields)


def busy_since(before: tuple[int, int]) -> float:
    """The share of the machine's CPU time that was busy since `before` (`cpu_jiffies()`)."""
    busy, total = cpu_jiffies()
    return round((busy - before[0]) / max(1, total - before[1]), 3)


def wait_healthy(base: str, timeout_s: float = 30.0) -> None:
    """Until `base`/health answers 200 (a service process the bench started), at most
    `timeout_s`; RuntimeError after that."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(base + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)  # another process: nothing to await
    raise RuntimeError(f"{base} did not start")
