"""Shared helpers of the hostile suite (issue 14).  Small API, used by every ``test_*.py`` here:

``hostile_server(*args, env=None, data=None) -> ServerProcess`` (fixture, a factory)
    ``tests/conftest.py``'s ``start_server`` plus: the extra flags in ``$OXIEDGE_HOSTILE_ARGS``
    (shell-split, placed *before* the test's own flags so a test's flag wins) — this is how the
    whole suite runs on a given board's settings, e.g.
    ``OXIEDGE_HOSTILE_ARGS='--memory-high-watermark 400MB' pytest tests/hostile``; and an
    ``RssSampler`` already running on the server process, as ``srv.rss`` (an attribute added
    to the returned ``ServerProcess``).  At teardown, when ``$OXIEDGE_HOSTILE_RSS_LOG`` names a
    file, one JSON line ``{"test", "peak_rss_mb", "hwm_mb", "watermark_mb"}`` is appended to it.

``innocent(port, interval=0.05, username=None, password=None) -> InnocentClient`` (fixture)
    Starts an MQTT client *in its own process* (``tests/hostile/innocent.py``: abuse threads in
    the test process cannot delay it) that keeps one connection and sends a PINGREQ every
    ``interval`` seconds.  Use as a context manager or call ``.stop()``; both give ``PingStats``
    (``.count``, ``.p50``, ``.p95``, ``.max`` in ms, ``.errors``).
    ``stats.assert_responsive(limit_ms=100)`` fails on any error (connection dropped, a ping
    unanswered for 10 s), on fewer than 5 pings, if more than 5% of the pings (at least 2)
    took longer than ``limit_ms`` or any single one took longer than ``stall_ms`` (default
    1000): scheduler hiccups of a shared, overloaded 2-core VM (load average 10 seen while six
    suites run) are tolerated, a broker stall is not.

``RssSampler(pid, interval=0.05)``
    Samples ``VmRSS`` of ``/proc/PID/status`` in a thread (``pid`` may be a callable, to follow
    a restarted server): ``.start()``, ``.stop()``,
    ``.baseline`` (first sample), ``.peak``, ``.last``, ``.mark()`` (reset the peak, returns the
    current RSS) and ``.hwm()`` (the kernel's ``VmHWM``: the exact peak since start).  Bytes.

``server_status(srv) -> dict``: ``oxiedge status --json`` of a running server.
``rss_of(pid) -> int``: the current ``VmRSS`` in bytes.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ServerProcess

ROOT = Path(__file__).resolve().parents[2]


def _proc_status_kb(pid: int, key: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def rss_of(pid: int) -> int:
    """Current resident set size of ``pid`` in bytes (0 once it is gone)."""
    return _proc_status_kb(pid, "VmRSS")


class RssSampler:
    """Samples a process's RSS in a background thread (see the module docstring)."""

    def __init__(self, pid: int | Callable[[], int], interval: float = 0.05) -> None:
        # A callable follows a server across restarts (``ServerProcess.restart``).
        self._pid = pid
        self.interval = interval
        self.baseline = rss_of(self.pid)
        self.peak = self.last = self.baseline
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def pid(self) -> int:
        return self._pid() if callable(self._pid) else self._pid

    def start(self) -> RssSampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            rss = rss_of(self.pid)
            if rss:
                self.last = rss
                self.peak = max(self.peak, rss)

    def mark(self) -> int:
        """Reset the peak to the current RSS (before an abuse) and return it."""
        self.last = self.peak = rss_of(self.pid) or self.last
        return self.last

    def hwm(self) -> int:
        return _proc_status_kb(self.pid, "VmHWM")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)


@dataclass
class PingStats:
    """PINGREQ→PINGRESP round trips of the innocent client, in milliseconds."""

    rtts_ms: list[float]
    errors: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.rtts_ms)

    def _quantile(self, q: float) -> float:
        if not self.rtts_ms:
            return float("inf")
        ordered = sorted(self.rtts_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    @property
    def p50(self) -> float:
        return self._quantile(0.5)

    @property
    def p95(self) -> float:
        return self._quantile(0.95)

    @property
    def max(self) -> float:
        return max(self.rtts_ms) if self.rtts_ms else float("inf")

    def __str__(self) -> str:
        return (f"{self.count} pings: p50 {self.p50:.1f} ms, p95 {self.p95:.1f} ms, "
                f"max {self.max:.1f} ms, errors {self.errors}")

    def assert_responsive(self, limit_ms: float = 100.0, stall_ms: float = 1000.0,
                          min_pings: int = 5) -> None:
        assert not self.errors, f"innocent client failed: {self}"
        assert self.count >= min_pings, f"too few pings: {self}"
        slow = sum(1 for rtt in self.rtts_ms if rtt > limit_ms)
        assert slow <= max(2, self.count // 20), f"{slow} pings over {limit_ms} ms: {self}"
        assert self.max <= stall_ms, f"innocent client stalled: {self}"


class InnocentClient:
    """An MQTT client in its own process, timing PINGREQ round trips (module docstring)."""

    def __init__(self, port: int, interval: float = 0.05, username: str | None = None,
                 password: str | None = None, host: str = "127.0.0.1") -> None:
        args = [host, str(port), str(interval)]
        if username is not None:
            args += [username, password or ""]
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.hostile.innocent", *args],
                                     cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline().strip()
        if first != "connected":
            self.proc.wait(10)
            raise AssertionError(f"innocent client could not connect: {first!r}")
        self.stats: PingStats | None = None

    def stop(self) -> PingStats:
        if self.stats is None:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            try:
                self.proc.stdin.write("stop\n")
                self.proc.stdin.close()
            except OSError:
                pass
            out = self.proc.stdout.read()
            self.proc.wait(15)
            lines = [ln for ln in out.splitlines() if ln.startswith("{")]
            data = json.loads(lines[-1]) if lines else {"rtts_ms": [], "errors": ["no report"]}
            self.stats = PingStats(data["rtts_ms"], data["errors"])
        return self.stats

    def __enter__(self) -> InnocentClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


def server_status(srv: ServerProcess) -> dict[str, Any]:
    """``oxiedge status --json`` of a running server."""
    return dict(json.loads(srv.cli("status", "--json").stdout))


@pytest.fixture
def hostile_server(start_server: Callable[..., ServerProcess], request: pytest.FixtureRequest
                   ) -> Iterator[Callable[..., ServerProcess]]:
    """Factory: a ready server with ``$OXIEDGE_HOSTILE_ARGS`` and ``.rss`` (module docstring)."""
    board = tuple(shlex.split(os.environ.get("OXIEDGE_HOSTILE_ARGS", "")))
    started: list[ServerProcess] = []

    def start(*args: str, env: dict[str, str] | None = None, data: Path | None = None
              ) -> ServerProcess:
        srv = start_server(*board, *args, env=env, data=data)
        assert srv.proc is not None
        srv.rss = RssSampler(lambda: srv.proc.pid if srv.proc else 0  # type: ignore[attr-defined]
                             ).start()
        started.append(srv)
        return srv

    yield start
    log = os.environ.get("OXIEDGE_HOSTILE_RSS_LOG")
    for srv in started:
        sampler: RssSampler = srv.rss  # type: ignore[attr-defined]
        if log and srv.proc is not None and srv.proc.poll() is None:
            try:
                watermark = server_status(srv)["alarms"]["memory_watermark_mb"]
            except (AssertionError, KeyError, ValueError):
                watermark = None
            with open(log, "a") as fh:
                fh.write(json.dumps({"test": request.node.nodeid,
                                     "peak_rss_mb": round(sampler.peak / 2**20, 1),
                                     "hwm_mb": round(sampler.hwm() / 2**20, 1),
                                     "watermark_mb": watermark}) + "\n")
        sampler.stop()


@pytest.fixture
def innocent() -> Iterator[Callable[..., InnocentClient]]:
    """Factory: ``innocent(port, interval=0.05, username=None, password=None)``."""
    made: list[InnocentClient] = []

    def make(port: int, interval: float = 0.05, username: str | None = None,
             password: str | None = None) -> InnocentClient:
        client = InnocentClient(port, interval, username, password)
        made.append(client)
        return client

    yield make
    for client in made:
        client.kill()
