"""The delivery acknowledgement timeout (RabbitMQ's ``consumer_timeout``), sans-IO.

Theory of operation
-------------------
RabbitMQ protects a queue from a consumer that holds a delivery forever: when a delivery
stays unacked longer than the timeout, its channel is closed with 406 PRECONDITION_FAILED
(RabbitMQ's words, below) and, as for any closed channel, its unacked messages go back to
their queues.  The timeout is, most specific first: the consumer's ``x-consumer-timeout``
argument (``basic.consume``), its queue's ``x-consumer-timeout`` argument, the broker's
``--amqp-consumer-timeout`` (30 minutes, as RabbitMQ; 0 turns the default off).  A
``basic.get`` delivery has no consumer: the broker's default applies.

Nothing is done per delivery: delivering stays as cheap as without the feature.
Instead :meth:`AckTimeouts.sweep` (run every :attr:`AckTimeouts.interval` seconds by
``service.py``, on the broker's injected clock) *marks* each channel that has unacked
deliveries with ``(now, the last delivery tag given so far)``
(:class:`DeliveryMarks`).  Delivery tags grow, so a delivery's tag says which sweep first
saw it unacked: its age is measured from that sweep, never more than its true age, so a
channel is never closed early, and at most one interval late.  The scan walks a channel's
unacked deliveries oldest first and stops at the first one younger than the smallest
timeout that can apply on that channel, so deliveries acked in time cost nothing.

The interval follows the smallest timeout in play at the last sweep (a quarter of it,
between 0.1 and 2 s): a queue or consumer with a short timeout is swept often enough once
a sweep has seen one of its deliveries.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from oxiedge.amqp.constants import PRECONDITION_FAILED
from oxiedge.amqp.errors import AmqpError

if TYPE_CHECKING:
    from oxiedge.amqp.settlement import Settlement

#: RabbitMQ's default consumer_timeout (30 minutes), in seconds.
DEFAULT_TIMEOUT_S = 1800.0
MIN_INTERVAL_S = 0.1
MAX_INTERVAL_S = 2.0


class DeliveryMarks:
    """When a channel's deliveries were first seen unacked: sweep times and the last
    delivery tag given by each (see the module docstring)."""

    __slots__ = ("tags", "times")

    def __init__(self) -> None:
        self.times: list[float] = []
        self.tags: list[int] = []

    def mark(self, now: float, last_tag: int) -> None:
        if not self.tags or self.tags[-1] != last_tag:
            self.times.append(now)
            self.tags.append(last_tag)

    def seen_at(self, tag: int) -> float:
        """The first sweep that saw delivery ``tag`` (marked already)."""
        return self.times[bisect.bisect_left(self.tags, tag)]

    def forget_before(self, tag: int) -> None:
        """Deliveries older than ``tag`` are settled: their marks go."""
        i = bisect.bisect_left(self.tags, tag)
        if i:
            del self.times[:i]
            del self.tags[:i]

    def clear(self) -> None:
        self.times.clear()
        self.tags.clear()


class TimedChannel(Protocol):
    """A channel as the sweep sees it (``channel.Channel``)."""

    number: int
    closing: bool
    settlement: Settlement
    delivery_marks: DeliveryMarks

    @property
    def consumers(self) -> Iterable[Any]:
        """Its consumers (``consumers.Consumer``: ``timeout_ms``, ``queue``)."""


class TimedConnection(Protocol):
    """A connection as the sweep sees it (``AmqpProtocol``)."""

    @property
    def channels(self) -> Mapping[int, TimedChannel]: ...

    def fail_channel(self, ch: Any, exc: AmqpError) -> None:
        """Close ``ch`` with a channel exception from outside a step."""


def timed_out_text(channel: int, timeout_ms: int) -> str:
    """RabbitMQ's words (clients match them)."""
    return (f"delivery acknowledgement on channel {channel} timed out. Timeout value used: "
            f"{timeout_ms} ms. This timeout value can be configured, see consumers doc guide "
            "to learn more")


class AckTimeouts:
    """The broker's acknowledgement timeouts and their sweep (module docstring)."""

    def __init__(self, default_s: float, clock: Callable[[], float],
                 counters: dict[str, int]) -> None:
        self.default_ms = round(default_s * 1000)  # 0: no default timeout
        self.clock = clock
        self._counters = counters
        counters.setdefault("consumer_timeouts", 0)
        self._smallest_ms = self.default_ms
        self.interval = self._interval()

    def _interval(self) -> float:
        if not self._smallest_ms:
            return MAX_INTERVAL_S
        return min(MAX_INTERVAL_S, max(MIN_INTERVAL_S, self._smallest_ms / 4000))

    def sweep(self, connections: Iterable[TimedConnection]) -> int:
        """Mark every channel with unacked deliveries, close those holding one past its
        timeout; returns how many were closed."""
        now = self.clock()
        closed = 0
        self._smallest_ms = self.default_ms
        for conn in connections:
            for ch in list(conn.channels.values()):
                if ch.closing:
                    continue
                timeout_ms = self.overdue(ch, now)
                if timeout_ms:
                    self._counters["consumer_timeouts"] += 1
                    conn.fail_channel(ch, AmqpError(
                        PRECONDITION_FAILED, timed_out_text(ch.number, timeout_ms)))
                    closed += 1
        self.interval = self._interval()
        return closed

    def overdue(self, ch: TimedChannel, now: float) -> int:
        """The timeout (ms) one of ``ch``'s deliveries outlived, or 0."""
        settlement = ch.settlement
        unacked = settlement.unacked
        marks = ch.delivery_marks
        if not unacked:
            marks.clear()
            return 0
        marks.mark(now, settlement.next_tag)
        marks.forget_before(next(iter(unacked)))
        default = self.default_ms
        floor = default
        for consumer in ch.consumers:
            for limit in (consumer.timeout_ms, consumer.queue.consumer_timeout_ms):
                if limit is not None and (not floor or limit < floor):
                    floor = limit
        if not floor:
            return 0
        if not self._smallest_ms or floor < self._smallest_ms:
            self._smallest_ms = floor
        for tag, (queue, _msg, consumer) in unacked.items():
            age_ms = (now - marks.seen_at(tag)) * 1000
            if age_ms <= floor:
                return 0  # the younger ones follow
            limit = _limit_of(queue, consumer, default)
            if limit and age_ms > limit:
                return limit
        return 0


def _limit_of(queue: Any, consumer: Any, default: int) -> int:
    if consumer is None:
        return default  # basic.get
    if consumer.timeout_ms is not None:
        return int(consumer.timeout_ms)
    if queue.consumer_timeout_ms is not None:
        return int(queue.consumer_timeout_ms)
    return default
