"""The consumers of one channel: ``basic.consume`` subscriptions, what a queue delivers to.

A :class:`Consumer` is the consumer a :class:`~oxiedge.amqp.queues.Queue` sees
(``has_credit`` / ``deliver`` / ``server_cancelled``): the queue walks its consumers
round-robin and hands each ready message to the next one with credit.  Credit is the
consumer's own prefetch (basic.qos global=false at consume time), then the channel's
(``Settlement.has_room``: its unacked bound and global prefetch), then the connection's
send buffer.  :class:`ConsumerSet` owns a channel's consumers by tag: it creates them
(``basic.consume``: the tag, exclusivity, the connection's consumer bound), cancels them
(an auto-delete queue goes with its last consumer) and wakes their queues.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from oxiedge.amqp import spec
from oxiedge.amqp.codec import encode_deliver, encode_names
from oxiedge.amqp.constants import (
    ACCESS_REFUSED,
    NOT_ALLOWED,
    NOT_IMPLEMENTED,
    PRECONDITION_FAILED,
)
from oxiedge.amqp.errors import AmqpError
from oxiedge.amqp.fields import encode_shortstr
from oxiedge.amqp.queued import QueueConsumer, QueuedMessage
from oxiedge.amqp.settlement import KICK
from oxiedge.amqp.stream import StreamQueue

if TYPE_CHECKING:
    from oxiedge.amqp.broker import Broker
    from oxiedge.amqp.ports import ChannelOwner
    from oxiedge.amqp.queues import Queue
    from oxiedge.amqp.settlement import Settlement


class ConsumerChannel(Protocol):
    """What a consumer needs of its channel (``channel.Channel`` is the one there is)."""

    number: int
    broker: Broker
    conn: ChannelOwner
    closing: bool
    settlement: Settlement

    @property
    def consumers(self) -> ConsumerSet: ...

    def reply(self, method: spec.Method) -> None: ...


class Consumer:
    """A basic.consume subscription of one channel to one queue."""

    __slots__ = ("channel", "exclusive", "names", "no_ack", "prefetch", "priority", "queue",
                 "settlement", "tag", "tag_shortstr", "timeout_ms", "unacked")

    def __init__(
        self, tag: str, channel: ConsumerChannel, queue: Queue, no_ack: bool, exclusive: bool,
        prefetch: int, priority: int = 0, timeout_ms: int | None = None,
    ) -> None:
        self.tag = tag
        self.tag_shortstr = encode_shortstr(tag)  # (encoded once: it is in every delivery)
        # The last delivery's exchange and routing key, and both encoded: the next one has
        # the same, mostly (one publisher, one routing key; a backlog read back).
        self.names: tuple[str, str, bytes] = ("", "", b"\x00\x00")
        self.channel = channel
        self.settlement = channel.settlement
        self.queue = queue
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.prefetch = prefetch  # 0 = unlimited (basic.qos global=false at consume time)
        self.unacked = 0
        self.priority = priority  # x-priority (selection.py)
        self.timeout_ms = timeout_ms  # x-consumer-timeout (acktimeout.py)

    def has_credit(self) -> bool:
        """May this consumer take one more delivery now?"""
        if self.prefetch and self.unacked >= self.prefetch:
            return False
        ch = self.channel
        if ch.closing or not ch.conn.writable:
            return False  # (the connection re-dispatches once its send buffer drains)
        return self.no_ack or self.settlement.has_room()

    def deliver(self, msg: QueuedMessage) -> None:
        """Send ``basic.deliver`` + content; track it unless the consumer is no-ack.

        (The settlement's bookkeeping, inlined here: this runs once per delivered
        message.)"""
        ch = self.channel
        conn = ch.conn
        settlement = self.settlement
        settlement.next_tag += 1
        tag = settlement.next_tag
        queue = self.queue
        counters = ch.broker.counters
        counters["delivered"] += 1
        counters["delivered_noack" if self.no_ack else "delivered_ack"] += 1
        conn.delivered += 1
        if self.no_ack:
            if msg.stored:
                ch.broker.forget(queue, msg)  # (kicks the committer)
                # A delivery runs in whichever task enqueued the message, not in this
                # connection's reader: it tells the connection, which syncs before close-ok.
                conn.note_staged()
        else:
            settlement.unacked[tag] = (queue, msg, self)
            self.unacked += 1
            settlement.global_unacked += 1
            queue.unacked += 1
        names = self.names
        exchange, routing_key = msg.exchange, msg.routing_key
        if routing_key != names[1] or exchange != names[0]:
            names = self.names = (exchange, routing_key, encode_names(exchange, routing_key))
        conn.send(encode_deliver(ch.number, self.tag_shortstr, tag, msg.redelivered, names[2],
                                 msg.properties, msg.body, conn.frame_max))

    def server_cancelled(self) -> None:
        """The queue was deleted: notify the client (consumer_cancel_notify)."""
        ch = self.channel
        ch.consumers.forget(self.tag)
        if ch.conn.cancel_notify and not ch.closing and not ch.conn.closed:
            ch.reply(spec.BasicCancel(self.tag, True))


#: Consumer arguments RabbitMQ accepts that mean nothing on one node.
IGNORED_CONSUMER_ARGS = ("x-cancel-on-ha-failover",)


def consumer_arguments(arguments: dict[str, Any]) -> tuple[int, int | None]:
    """The ``x-priority`` (0 when absent) and ``x-consumer-timeout`` (ms, None when
    absent) of ``basic.consume`` arguments; 406 for a value that is not an integer (or a
    timeout below 1), 540 for an argument oxiedge does not implement."""
    for key in arguments:
        if key not in ("x-priority", "x-consumer-timeout") and key not in IGNORED_CONSUMER_ARGS:
            raise AmqpError(NOT_IMPLEMENTED, f"consumer argument '{key}' is not implemented",
                            hard=True)
    priority = arguments.get("x-priority", 0)
    timeout = arguments.get("x-consumer-timeout")
    for key, value, low in (("x-priority", priority, None), ("x-consumer-timeout", timeout, 1)):
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or \
                (low is not None and value < low):
            raise AmqpError(PRECONDITION_FAILED,
                            f"invalid arg '{key}' for basic.consume: {value!r}", 60, 20)
    return priority, timeout


def server_cancel(consumer: QueueConsumer) -> None:
    """``Broker.delete_queue``'s callback for each consumer of the deleted queue."""
    consumer.server_cancelled()


class ConsumerSet:
    """The consumers of one channel, by tag (see the module docstring)."""

    __slots__ = ("_broker", "_by_tag", "_channel")

    def __init__(self, channel: ConsumerChannel) -> None:
        self._channel = channel
        self._broker = channel.broker
        self._by_tag: dict[str, Consumer] = {}

    def __len__(self) -> int:
        return len(self._by_tag)

    def __iter__(self) -> Iterator[Consumer]:
        return iter(self._by_tag.values())

    def get(self, tag: str) -> Consumer | None:
        return self._by_tag.get(tag)

    def consume(self, queue: Queue, m: spec.BasicConsume, prefetch: int) -> Consumer:
        """basic.consume on ``queue``: the new consumer, registered with the queue (the
        caller replies, then dispatches the queue)."""
        if isinstance(queue, StreamQueue):  # (a prefetch, manual acks, x-stream-offset)
            priority, timeout_ms = queue.consumer_arguments(m.arguments, m.no_ack, prefetch)
        else:
            priority, timeout_ms = consumer_arguments(m.arguments) if m.arguments else (0, None)
        tag = m.consumer_tag or "amq.ctag-" + secrets.token_urlsafe(16)
        if tag in self._by_tag:
            raise AmqpError(NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'", hard=True)
        if queue.consumers and (m.exclusive or any(c.exclusive for c in queue.consumers)):
            raise AmqpError(ACCESS_REFUSED,
                            f"queue '{queue.name}' in vhost '/' in exclusive use")
        self._channel.conn.bounds.check_consumer_limit()
        consumer = Consumer(tag, self._channel, queue, m.no_ack, m.exclusive, prefetch,
                            priority, timeout_ms)
        self._by_tag[tag] = consumer
        queue.add_consumer(consumer)
        queue.had_consumer = True
        return consumer

    def cancel(self, tag: str) -> int:
        """basic.cancel: flags (:data:`KICK` if an auto-delete queue lost its last
        consumer and was deleted); an unknown tag is no error (spec basic.cancel)."""
        consumer = self._by_tag.get(tag)
        return 0 if consumer is None else self._drop(consumer)

    def forget(self, tag: str) -> None:
        """The consumer's queue is gone (it cancelled the consumer)."""
        self._by_tag.pop(tag, None)

    def release(self) -> int:
        """The channel closes: every consumer is cancelled; returns flags."""
        flags = 0
        for consumer in list(self._by_tag.values()):
            flags |= self._drop(consumer)
        self._by_tag.clear()
        return flags

    def dispatch_all(self) -> None:
        """Credit came back channel-wide: every queue consumed from may deliver again."""
        for c in list(self._by_tag.values()):
            c.queue.dispatch()

    def _drop(self, consumer: Consumer) -> int:
        queue = consumer.queue
        queue.remove_consumer(consumer)
        self._by_tag.pop(consumer.tag, None)
        if queue.auto_delete and queue.had_consumer and not queue.consumers and not queue.deleted:
            # Auto-delete queues go when their last consumer goes (spec queue.declare).
            self._broker.delete_queue(queue, server_cancel)
            return KICK
        return 0
