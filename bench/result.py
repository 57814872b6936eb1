"""Scenario options, results, broker metering and the statistics the report uses."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from bench import procstat


@dataclass
class Options:
    """Knobs shared by every scenario (CLI flags of ``python -m bench``)."""

    count: int = 100_000  # messages per throughput scenario
    duration: float = 10.0  # cap on the measured phase of one scenario run, seconds
    payload: int = 100
    window: int = 500  # MQTT QoS 1 in flight
    amqp_window: int = 256  # AMQP unconfirmed publishes per connection
    fanout: int = 10
    connections: int = 8
    drain_count: int = 50_000
    prefetch: int = 100
    latency_count: int = 2_000
    rate: float = 1_000.0  # AMQP publish→deliver pacing, msgs/s
    idle_timeout: float = 3.0  # a stream that stays silent this long ends the run (loss)
    mqtt_level: int = 4  # MQTT scenarios: 4 is MQTT 3.1.1, 5 is MQTT 5 (--mqtt-version)


@dataclass
class Result:
    """One run of one scenario against one broker."""

    scenario: str
    target: str
    value: float = 0.0  # the headline figure (msgs/s, or latency in ms)
    unit: str = "msgs/s"
    higher_better: bool = True
    count: int = 0  # messages completed in the measured phase
    elapsed: float = 0.0
    p50_ms: float | None = None
    p99_ms: float | None = None
    lost: int = 0
    cpu_s: float | None = None  # broker CPU seconds during the measured phase
    rss_mb: float | None = None  # broker RSS at the end of the measured phase
    skipped: str | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def cpu_us_per_msg(self) -> float | None:
        if self.cpu_s is None or not self.count:
            return None
        return self.cpu_s * 1e6 / self.count

    @property
    def cpu_pct(self) -> float | None:
        if self.cpu_s is None or not self.elapsed:
            return None
        return 100.0 * self.cpu_s / self.elapsed

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["cpu_us_per_msg"] = self.cpu_us_per_msg
        d["cpu_pct"] = self.cpu_pct
        return d


class Skip(Exception):
    """A scenario cannot run against this broker (reason in the message)."""


class Meter:
    """Samples the broker's CPU and RSS around a scenario's measured phase."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.t0 = 0.0
        self.t1 = 0.0
        self.before: procstat.Sample | None = None
        self.after: procstat.Sample | None = None
        self.gen0 = self.gen1 = 0.0

    def start(self) -> float:
        self.before = procstat.sample(self.pid)
        self.gen0 = own_cpu()
        self.t0 = time.perf_counter()
        return self.t0

    def stop(self) -> float:
        self.t1 = time.perf_counter()
        self.gen1 = own_cpu()
        self.after = procstat.sample(self.pid)
        return self.t1

    def fill(self, r: Result) -> Result:
        if self.before is not None and self.after is not None:
            r.cpu_s = self.after.cpu - self.before.cpu
            r.rss_mb = self.after.rss / 1e6
        if self.t1 > self.t0:
            # The load generator's own CPU (all its threads): near 100% means the
            # generator, not the broker, may be the limit.
            r.extra["gen_cpu_pct"] = round(100 * (self.gen1 - self.gen0) / (self.t1 - self.t0))
        return r


def paced(n: int, rate: float, start: float, duration: float) -> Iterator[None]:
    """Up to ``n`` send slots at ``rate`` per second from ``start`` (``perf_counter``),
    ending after the slot that passed ``start + duration`` (the paced latency scenarios)."""
    step = 1.0 / rate
    nxt = start
    deadline = start + duration
    for _ in range(n):
        now = time.perf_counter()
        if now < nxt:
            time.sleep(nxt - now)
        nxt += step
        yield
        if time.perf_counter() > deadline:
            return


def own_cpu() -> float:
    """CPU seconds (user + system) of this process, all its threads."""
    t = os.times()
    return t.user + t.system


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    s = sorted(values)
    k = max(0, min(len(s) - 1, round(q / 100.0 * len(s) + 0.5) - 1))
    return s[k]


def latency_result(r: Result, lat_ns: list[int]) -> Result:
    ms = [x / 1e6 for x in lat_ns]
    r.count = len(ms)
    if ms:
        r.p50_ms = percentile(ms, 50)
        r.p99_ms = percentile(ms, 99)
        r.value = r.p50_ms
    r.unit = "ms p50"
    r.higher_better = False
    return r


def median_of(results: list[Result]) -> Result:
    """Medians of the runs that were not skipped (field by field)."""
    ran = [r for r in results if r.skipped is None]
    if not ran:
        return results[0]
    m = Result(ran[0].scenario, ran[0].target, unit=ran[0].unit,
               higher_better=ran[0].higher_better, note=ran[0].note)

    def med(xs: list[float | None]) -> float | None:
        vals = [x for x in xs if x is not None]
        return statistics.median(vals) if vals else None

    m.value = med([r.value for r in ran]) or 0.0
    m.count = int(med([r.count for r in ran]) or 0)
    m.elapsed = med([r.elapsed for r in ran]) or 0.0
    m.p50_ms = med([r.p50_ms for r in ran])
    m.p99_ms = med([r.p99_ms for r in ran])
    m.lost = int(med([r.lost for r in ran]) or 0)
    m.cpu_s = med([r.cpu_s for r in ran])
    m.rss_mb = med([r.rss_mb for r in ran])
    m.extra = {"runs": len(ran), "values": [round(r.value, 3) for r in ran],
               "cpu_us_per_msg": med([r.cpu_us_per_msg for r in ran]),
               "lost_per_run": [r.lost for r in ran]}
    return m
