"""A bound on per-connection log lines: a flood of bad connections cannot flood the log.

One line per connection the broker ends (``mqtt.connection``, ``amqp.connection``) is what
an operator wants, until a hostile client opens thousands of them: then the log - on an SD
card, through journald - would grow with the attack. ``LineBudget`` lets ``burst`` lines
through at once and ``per_second`` after that; what it holds back is counted and said in
the next line that goes through (``(N similar lines suppressed)``). The counters of the
services count every close, suppressed or not. ``clip`` bounds the size of each line: the
client-chosen parts in it (client ids, user names, texts from a packet) are cut short.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class LineBudget:
    """A token bucket of log lines (see the module docstring)."""

    def __init__(self, per_second: float = 10.0, burst: int = 50,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.per_second = per_second
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()
        self.suppressed = 0  # held back since the last line that went through
        self.suppressed_total = 0

    def take(self) -> int | None:
        """None: hold this line back (counted). Else the line may go, and the number of
        lines held back before it is returned (0: none) for it to mention."""
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.per_second)
        self._at = now
        if self._tokens < 1:
            self.suppressed += 1
            self.suppressed_total += 1
            return None
        self._tokens -= 1
        held, self.suppressed = self.suppressed, 0
        return held


def suppressed_note(held: int) -> str:
    """The suffix of the first line after ``held`` lines were held back."""
    return f" ({held} similar lines suppressed)" if held else ""


#: The most characters of one client-chosen part of a log line (``clip``).
CLIP = 100


def clip(value: object, limit: int = CLIP, quote: bool = True) -> str:
    """``repr(value)`` (``str`` with ``quote=False``) cut to ``limit`` characters, saying
    how long it was: a 65,535-byte client id must not make a 130 KB log line."""
    text = repr(value) if quote else str(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...({len(text)} chars)"
