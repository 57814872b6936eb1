"""Which consumer of a queue gets the next message, when it is not plain round-robin:
consumer priorities (``x-priority`` on ``basic.consume``) and single active consumer
(``x-single-active-consumer`` on ``queue.declare``).

Theory of operation
-------------------
A queue's consumers take turns (``Queue.dispatch``'s round-robin) unless the queue has a
*selector*, set when a consumer with a priority other than 0 arrives or when the queue is
declared single-active.  A queue without one pays one ``is None`` test per dispatch.

* :class:`RankedSelection` (RabbitMQ's consumer priorities, rabbitmq.com/docs/consumer-priority):
  the queue keeps its consumers sorted by priority, highest first, in registration order
  within a priority (``Queue.add_consumer``).  A message goes to the highest-priority
  consumer that can take it (credit: prefetch, channel bound, send buffer); consumers of
  one priority take turns; a lower priority gets messages only while every higher one is
  blocked.  Priorities are any signed integer, 0 by default.
* :class:`SingleActive` (RabbitMQ's single active consumer, rabbitmq.com/docs/consumers,
  with consumer priorities as RabbitMQ 3.13+ combines them): one consumer of the queue is
  *active* and gets every message; when it has no credit the queue waits for it rather
  than use another one.  The consumers are kept in priority order as above, so the first
  is the highest priority, the earliest registered within it.  The first consumer becomes
  active; a consumer of a higher priority than the active one that arrives later takes
  over, but only once the active one's unacknowledged deliveries are settled (until then
  neither gets anything: processing order is kept).  When the active consumer is cancelled
  or its channel or connection closes, its unacked messages go back to the queue (as for
  any consumer) and the first consumer in that order takes over with them.  ``basic.get``
  is unaffected.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar


class Candidate(Protocol):
    """A consumer as a selector sees it (``queued.QueueConsumer``)."""

    priority: int
    unacked: int  # its deliveries not yet settled (always 0 for a no-ack consumer)

    def has_credit(self) -> bool: ...


C = TypeVar("C", bound=Candidate)


class Selector(Protocol):
    """How a queue picks the consumer of its next message."""

    def pick(self, consumers: Sequence[C]) -> C | None:
        """The consumer of the next message, or None when the queue must wait."""


class SingleActive:
    """Only the active consumer receives (see the module docstring); ``consumers`` are
    sorted by priority, highest first (``insert_ranked``)."""

    __slots__ = ("active",)

    def __init__(self) -> None:
        self.active: Candidate | None = None

    def pick(self, consumers: Sequence[C]) -> C | None:
        first = consumers[0]
        active = self.active
        if active is not first:
            if active is not None and first.priority > active.priority and active.unacked:
                return None  # the take-over waits for the active one's deliveries to settle
            if active is None or first.priority > active.priority:
                self.active = active = first
        chosen: C = active  # type: ignore[assignment]  # (one of ``consumers``)
        return chosen if chosen.has_credit() else None

    def removed(self, consumer: Candidate) -> None:
        """``consumer`` left the queue: the next ``pick`` chooses the active one again."""
        if consumer is self.active:
            self.active = None

    def is_active(self, consumer: Candidate, consumers: Sequence[Candidate]) -> bool:
        """Is ``consumer`` the one that gets the messages (or would, at the next one)?"""
        if self.active is not None:
            return consumer is self.active
        return bool(consumers) and consumer is consumers[0]


class RankedSelection:
    """Highest priority with credit first, round-robin within a priority (see the module
    docstring); ``consumers`` are sorted by priority, highest first."""

    __slots__ = ("_turn",)

    def __init__(self) -> None:
        self._turn: dict[int, int] = {}  # priority -> where its round-robin resumes

    def pick(self, consumers: Sequence[C]) -> C | None:
        n = len(consumers)
        i = 0
        while i < n:
            priority = consumers[i].priority
            j = i + 1
            while j < n and consumers[j].priority == priority:
                j += 1
            size = j - i
            start = self._turn.get(priority, 0) % size
            for k in range(size):
                consumer = consumers[i + (start + k) % size]
                if consumer.has_credit():
                    self._turn[priority] = (start + k + 1) % size
                    return consumer
            i = j
        return None


def activity(selector: object, consumer: Candidate, consumers: Sequence[Candidate]) -> str:
    """A consumer's state as RabbitMQ's management API names it (``activity_status``):
    ``up`` on a queue without single active consumer, else ``single_active`` or
    ``waiting``."""
    if type(selector) is not SingleActive:
        return "up"
    return "single_active" if selector.is_active(consumer, consumers) else "waiting"


def insert_ranked(consumers: list[C], consumer: C) -> None:
    """Add ``consumer`` after every consumer of its priority or a higher one."""
    i = len(consumers)
    priority = consumer.priority
    while i and consumers[i - 1].priority < priority:
        i -= 1
    consumers.insert(i, consumer)
