"""A watchdog that stops the processes we started when we die without stopping them.

Portable (POSIX pipes and signals only) in place of Linux's parent-death signal: the watchdog
is a small process reading a pipe whose write end only we hold. However we exit, SIGKILL
included, the kernel closes that end; the watchdog reads EOF and signals every process still
registered with it, then SIGKILLs what has not exited after a grace period. Each process is
registered with its start time, so a recycled pid is never signalled.

Protocol, one line each on the watchdog's stdin:
    guard <pid> <create_time> <signal> <group 0|1>
    release <pid>
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from typing import IO

import psutil

_GRACE_S = 20.0
_CLOSE_TIMEOUT_S = 60.0
_MAX_GUARDED = 1000


class Reaper:
    """Owns one watchdog process; `guard` each child right after starting it."""

    def __init__(self) -> None:
        read_end, write_end = os.pipe()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "launcher.reaper"],
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                # Its own session: a Ctrl-C in the terminal is ours to handle, not its.
                start_new_session=True,
            )
        finally:
            os.close(read_end)
        self._pipe: IO[str] | None = os.fdopen(write_end, "w", buffering=1)
        self._lock = threading.Lock()

    def _send(self, line: str) -> None:
        with self._lock:
            if self._pipe is None:
                raise RuntimeError("the reaper is closed")
            self._pipe.write(line + "\n")

    def guard(self, pid: int, sig: int = signal.SIGTERM, group: bool = False) -> None:
        """Signal `pid` (its whole process group if `group`) if we die before releasing it."""
        create_time = psutil.Process(pid).create_time()
        self._send(f"guard {pid} {create_time!r} {int(sig)} {int(group)}")

    def release(self, pid: int) -> None:
        self._send(f"release {pid}")

    def close(self) -> None:
        """Stop the watchdog; it first stops whatever is still registered and alive."""
        with self._lock:
            if self._pipe is None:
                return
            self._pipe.close()
            self._pipe = None
        try:
            self.process.wait(_CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _signal(pid: int, create_time: float, sig: int, group: bool) -> psutil.Process | None:
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - create_time) > 0.01:
            return None  # the pid now belongs to another process
    except psutil.NoSuchProcess:
        proc = None
    try:
        if group:
            os.killpg(pid, sig)
        elif proc is not None:
            proc.send_signal(sig)
    except (ProcessLookupError, PermissionError, psutil.Error):
        pass
    return proc


def _watch(lines: IO[str]) -> None:
    guarded: dict[int, tuple[float, int, bool]] = {}
    for line in lines:
        parts = line.split()
        if len(parts) == 5 and parts[0] == "guard" and len(guarded) < _MAX_GUARDED:
            guarded[int(parts[1])] = (float(parts[2]), int(parts[3]), parts[4] == "1")
        elif len(parts) == 2 and parts[0] == "release":
            guarded.pop(int(parts[1]), None)
    # EOF: our owner has exited or closed us.
    alive = []
    for pid, (create_time, sig, group) in guarded.items():
        proc = _signal(pid, create_time, sig, group)
        if proc is not None:
            alive.append((proc, create_time, group))
    _, still = psutil.wait_procs([p for p, _, _ in alive], timeout=_GRACE_S)
    for proc, create_time, group in alive:
        if proc in still:
            _signal(proc.pid, create_time, signal.SIGKILL, group)


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _watch(sys.stdin)
    return 0


if __name__ == "__main__":
    sys.exit(main())
