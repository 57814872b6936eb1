"""A fixed-bucket histogram for the Prometheus text (``/metrics``): ``observe`` is one
bisect and two additions, cheap enough for every commit round; nothing is sampled or kept
per observation. A leaf module (no project imports), sans-IO."""

from __future__ import annotations

from bisect import bisect_left


class Histogram:
    """Counts per bucket (``value <= bound``; the last, implicit bucket is ``+Inf``), the
    sum and the count of what was observed."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        if list(bounds) != sorted(set(bounds)):
            raise ValueError("histogram bounds must be increasing")
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # per bucket, not cumulative
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, int]]:
        """``[(le, count of values <= le)]`` ending with ``("+Inf", count)``."""
        out, running = [], 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            running += n
            out.append((format(bound, "g"), running))
        out.append(("+Inf", self.count))
        return out

    def quantile(self, q: float) -> float | None:
        """An estimate of the ``q`` quantile (0 < q <= 1): linear within the bucket it falls
        in (from 0 for the first bucket); the last finite bound when it falls in ``+Inf``.
        None before the first observation."""
        if self.count == 0:
            return None
        rank, running = q * self.count, 0
        for i, n in enumerate(self.counts):
            if n and running + n >= rank:
                if i == len(self.bounds):
                    return self.bounds[-1]
                low = self.bounds[i - 1] if i else 0.0
                return low + (self.bounds[i] - low) * max(rank - running, 0) / n
            running += n
        return self.bounds[-1]


#: A commit round, from its write to the end of its WAL sync (seconds).
ROUND_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                 5.0, 10.0)
#: Operations (records put or deleted) written by one commit round.
BATCH_OPERATIONS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 50000)
