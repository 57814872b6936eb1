"""The rate history behind the console's charts (sans-IO): a bounded ring of counter samples.

The HTTP listener's view takes a sample of ``oxiedge status`` every ``INTERVAL_S`` from the
moment the listener starts (``wiring.ServerView.sample_history``), so a chart has the last
minutes the moment a page opens. The ring keeps ``SAMPLES`` of them (10 minutes), so its
memory is fixed: ~120 small tuples of counters, and beside each the backlog and lag of at
most ``MAX_UPLINKS`` uplinks (~60 KB in all; docs/console.md). Rates are the differences of
consecutive samples over their time.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any

#: How often the listener samples, and how many samples the ring keeps (10 minutes).
INTERVAL_S = 5.0
SAMPLES = 120
#: Samples closer than this are not kept (a second caller cannot shrink the window).
MIN_INTERVAL_S = 2.0
#: Uplinks whose backlog and lag a sample keeps (the first by name; more are not charted).
MAX_UPLINKS = 8

#: (chart label, status section, counter key)
COUNTERS = (
    ("MQTT in", "mqtt", "messages_in"),
    ("MQTT out", "mqtt", "messages_out"),
    ("AMQP in", "amqp", "published"),
    ("AMQP out", "amqp", "delivered"),
)

#: The ``oxiedge status`` sections a sample reads (the counters above, and the uplinks').
SECTIONS = tuple(dict.fromkeys([*(section for _, section, _ in COUNTERS), "uplink"]))


def _number(status: dict[str, Any], section: str, key: str) -> float:
    value = (status.get(section) or {}).get(key)
    return float(value) if isinstance(value, (int, float)) else 0.0


class RateHistory:
    """The ring (see the module docstring)."""

    def __init__(self, size: int = SAMPLES, min_interval: float = MIN_INTERVAL_S) -> None:
        self.samples: deque[tuple[float, tuple[float, ...]]] = deque(maxlen=size)
        #: (time, {uplink: (backlog messages, lag seconds)}) beside each sample
        self.uplinks: deque[tuple[float, dict[str, tuple[float, float]]]] = deque(maxlen=size)
        self.min_interval = min_interval

    def sample(self, now: float, status: dict[str, Any]) -> None:
        if self.samples and now - self.samples[-1][0] < self.min_interval:
            return
        self.samples.append((now, tuple(_number(status, s, k) for _, s, k in COUNTERS)))
        links = status.get("uplink") or {}
        self.uplinks.append((now, {
            name: (_number(links, name, "backlog_messages"), _number(links, name, "lag_seconds"))
            for name in sorted(links)[:MAX_UPLINKS] if isinstance(links[name], dict)}))

    def rates(self) -> list[tuple[str, list[tuple[float, float]]]]:
        """Per counter: [(seconds before the last sample, messages per second)...]."""
        out: list[tuple[str, list[tuple[float, float]]]] = [(c[0], []) for c in COUNTERS]
        pairs = list(self.samples)
        if len(pairs) < 2:
            return out
        last = pairs[-1][0]
        for (t0, v0), (t1, v1) in itertools.pairwise(pairs):
            dt = t1 - t0
            for i, (_, points) in enumerate(out):
                # A counter that went down (a restart cannot happen in-process, but a reset
                # section could) reads as zero, never as a negative rate.
                points.append((t1 - last, max(0.0, v1[i] - v0[i]) / dt if dt > 0 else 0.0))
        return out

    def latest(self) -> dict[str, float]:
        """The last interval's rate per counter label (0 before two samples)."""
        return {label: pts[-1][1] if pts else 0.0 for label, pts in self.rates()}

    def uplink_series(self, which: int) -> list[tuple[str, list[tuple[float, float]]]]:
        """Per uplink: [(seconds before the last sample, backlog (0) or lag (1))...]."""
        if not self.uplinks:
            return []
        last = self.uplinks[-1][0]
        out: dict[str, list[tuple[float, float]]] = {}
        for t, links in self.uplinks:
            for name, values in links.items():
                out.setdefault(name, []).append((t - last, values[which]))
        return sorted(out.items())
