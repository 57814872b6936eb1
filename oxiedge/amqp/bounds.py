"""One connection's bounds (issue 14: one client cannot exhaust the broker): open channels,
the live queues it created, its consumers, what one of its transactions holds; and the
broker-wide queue count, checked by the connection that declares.  Each refusal is counted
(the service's counters; ``tx_limit_refused`` the broker's) and worded as RabbitMQ words
it (clients and their test suites compare the texts).
"""

from __future__ import annotations

from collections.abc import Mapping, Sized
from typing import TYPE_CHECKING, Protocol

from oxiedge.amqp.constants import NOT_ALLOWED, PRECONDITION_FAILED
from oxiedge.amqp.errors import AmqpError

if TYPE_CHECKING:
    from oxiedge.amqp.broker import Broker
    from oxiedge.amqp.queues import Queue


class HasConsumers(Protocol):
    """A channel, as far as the bounds look at it."""

    @property
    def consumers(self) -> Sized: ...


class ConnectionBounds:
    """The counts of one connection against its limits (``ports.ConnectionLimits``)."""

    def __init__(self, channels: Mapping[int, HasConsumers], broker: Broker,
                 counters: dict[str, int], *, channel_max: int, max_consumers: int,
                 max_queues: int, tx_max_messages: int = 10_000,
                 tx_max_bytes: int = 64 << 20) -> None:
        self._channels = channels  # the connection's open channels (read, never changed)
        self._broker = broker
        self._counters = counters
        self.channel_max = channel_max  # lowered to the client's at connection.open
        self.max_consumers = max_consumers
        self.max_queues = max_queues
        self.tx_max_messages = tx_max_messages  # held by one transaction (transaction.py)
        self.tx_max_bytes = tx_max_bytes
        #: Queues this connection created (live ones count toward ``max_queues``).
        self.created_queues: set[Queue] = set()

    def check_channel_open(self) -> None:
        """Before channel.open: 530 at channel_max open channels.

        RabbitMQ's reading of channel_max, which clients rely on: it bounds the number of
        open channels (any channel number 1-65535 may be used)."""
        count = len(self._channels)
        if count >= self.channel_max:
            self._counters["channel_limit_refused"] += 1
            raise AmqpError(NOT_ALLOWED, f"number of channels opened ({count}) has reached "
                            f"the negotiated channel_max ({self.channel_max})", 20, 10)

    def check_queue_limit(self, name: str) -> None:
        """Before a declare that creates a queue: 406 past the per-connection or the
        broker-wide queue count (RabbitMQ's words for its vhost queue limit)."""
        live = {q for q in self.created_queues if not q.deleted}
        self.created_queues = live
        total = self._broker.max_queues
        if len(live) >= self.max_queues:
            limit = f"limit of {self.max_queues} queues per connection"
        elif len(self._broker.queues) >= total:
            limit = f"queue limit of {total} in vhost '/'"
        else:
            return
        self._counters["queue_limit_refused"] += 1
        raise AmqpError(PRECONDITION_FAILED,
                        f"cannot declare queue '{name}': {limit} is reached", 50, 10)

    def queue_created(self, queue: Queue) -> None:
        """A non-passive declare of this connection named ``queue`` (counted while live)."""
        self.created_queues.add(queue)

    def check_consumer_limit(self) -> None:
        """Before basic.consume: 406 past the per-connection consumer count."""
        count = sum(len(ch.consumers) for ch in self._channels.values())
        if count >= self.max_consumers:
            self._counters["consumer_limit_refused"] += 1
            raise AmqpError(PRECONDITION_FAILED,
                            f"limit of {self.max_consumers} consumers per connection is "
                            "reached", 60, 20)

    def check_tx(self, held: int, held_bytes: int) -> None:
        """Before a transaction holds one more publish or settlement: 406 past the
        messages or bytes one transaction may hold (``transaction.py``)."""
        if held <= self.tx_max_messages and held_bytes <= self.tx_max_bytes:
            return
        self._broker.counters["tx_limit_refused"] += 1
        if held > self.tx_max_messages:
            what = f"{self.tx_max_messages} messages"
        else:
            what = f"{self.tx_max_bytes} bytes"
        raise AmqpError(PRECONDITION_FAILED,
                        f"transaction limit of {what} is reached; commit more often", 90, 20)
