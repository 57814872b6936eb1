"""What a queue holds and what it needs of its parts: :class:`QueuedMessage` (one message in
one queue), :class:`QueueConsumer` (what a consumer must offer) and :class:`ReadyLog` (the
ready messages of a durable queue on a queue log).  A leaf module: the queue, consumers,
settlement and the queue logs all speak these types without importing the queue."""

from __future__ import annotations

from typing import Protocol

#: ``QueuedMessage.stored`` of a non-persistent message on a queue log (``queuelog.py``).
VOLATILE = 2


class QueuedMessage:
    """One message in one queue.  ``stored`` is true when a durable record exists (or, as
    ``VOLATILE``, when the queue's log must hear that it left)."""

    __slots__ = ("body", "exchange", "expires", "properties", "redelivered", "routing_key",
                 "seq", "stored")

    def __init__(
        self,
        seq: int,
        exchange: str,
        routing_key: str,
        properties: bytes,
        body: bytes,
        stored: int = False,
        redelivered: bool = False,
        expires: float = 0.0,
    ) -> None:
        self.seq = seq
        self.expires = expires  # wall-clock deadline (per-message TTL); 0 = never
        self.exchange = exchange
        self.routing_key = routing_key
        self.properties = properties
        self.body = body
        self.stored = stored
        self.redelivered = redelivered

    @property
    def size(self) -> int:
        """What it counts in its queue's bytes (a queue log's ``Entry``)."""
        return len(self.body)


class QueueConsumer(Protocol):
    """What a queue needs of a consumer (``consumers.Consumer`` is the one there is)."""

    exclusive: bool
    priority: int  # x-priority (selection.py)
    unacked: int  # its deliveries not yet settled (single active consumer's take-over)

    def has_credit(self) -> bool:
        """May it take one more delivery now (prefetch, paused channel, full socket)?"""

    def deliver(self, msg: QueuedMessage) -> None:
        """Take ``msg`` (it left the queue's ready list)."""

    def server_cancelled(self) -> None:
        """The queue was deleted under it (consumer_cancel_notify)."""


class ReadyLog(Protocol):
    """The ready messages of a queue on a queue log (``queuelog.LogReady``)."""

    def stage(self, seq: int, record: bytes) -> None: ...
    def done(self, msg: QueuedMessage) -> None: ...
    def over_budget(self, size: int) -> bool: ...
    def put_back(self, msgs: list[QueuedMessage]) -> None: ...
    def purge(self) -> int: ...
    def drop(self) -> None: ...
    def head_expires(self) -> float: ...
    def expire_unread(self, now: float, limit: int) -> tuple[int, int]: ...
