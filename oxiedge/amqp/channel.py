"""One AMQP channel: its consumers, unacked deliveries, QoS and confirm mode, and the
handlers of the channel-level methods (exchange, queue, basic, confirm classes).

``basic.publish`` is not handled here: publishing is batched per connection (a burst of
frames is routed, written as one group-commit contribution, then confirmed), see
``protocol.py``.  Handlers are synchronous and raise :class:`AmqpError` (a soft code closes
this channel, a hard one the connection).  They never wait for the disk; they *return* what
is left to do:

* an ``int`` of flags: :data:`KICK` (durable deletes were staged: have a commit round
  soon) and :data:`UNSYNCED` (make them durable before the reply to the next synchronous
  method, so "ack, then any round trip" means the ack survives a crash); 0 for nothing;
* an :class:`AfterCommit`: the method staged durable writes its reply promises (a durable
  declare, bind, purge, delete): the protocol commits, then calls ``then()``, which sends
  the reply (and whatever must follow it).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

from oxiedge.amqp import deadletter, persist, spec
from oxiedge.amqp.codec import encode_content, encode_deliver, encode_method
from oxiedge.amqp.constants import (
    ACCESS_REFUSED,
    NOT_ALLOWED,
    NOT_IMPLEMENTED,
    PRECONDITION_FAILED,
)
from oxiedge.amqp.errors import AmqpError
from oxiedge.amqp.fields import encode_shortstr
from oxiedge.amqp.queues import Queue, QueueConsumer, QueuedMessage

if TYPE_CHECKING:
    from oxiedge.access.grants import Grants
    from oxiedge.access.rules import PermissionStore
    from oxiedge.amqp.bounds import ConnectionBounds
    from oxiedge.amqp.broker import Broker

class ChannelOwner(Protocol):
    """What a channel needs of its connection (``AmqpProtocol`` is the one there is)."""

    broker: Broker
    grants: Grants | None
    perms: PermissionStore
    frame_max: int
    unacked_limit: int
    cancel_notify: bool
    closed: bool
    delivered: int
    bounds: ConnectionBounds
    exclusive_queues: dict[str, Queue]

    @property
    def user(self) -> str:
        """The connection's user name."""

    @property
    def writable(self) -> bool:
        """Room in the output (else consumers are skipped until it drains)."""

    def send(self, data: bytes) -> None:
        """Output a frame (never blocks)."""

    def note_staged(self) -> None:
        """A delivery staged a durable delete (synced before close-ok)."""


#: Durable deletes were staged: have a commit round soon (nobody waits for it).
KICK = 1
#: ... and make them durable before the reply to the next synchronous method.
UNSYNCED = 2


class AfterCommit:
    """A handler's reply that waits for the commit of what the handler staged."""

    __slots__ = ("then",)

    def __init__(self, then: Callable[[], None]) -> None:
        self.then = then


def after(staged: bool, reply: Callable[[], None]) -> int | AfterCommit:
    """Reply now, or after the commit when a durable write was staged."""
    if staged:
        return AfterCommit(reply)
    reply()
    return 0


class Consumer:
    """A basic.consume subscription of one channel to one queue: the consumer a
    :class:`~oxiedge.amqp.queues.Queue` sees (``has_credit`` / ``deliver``)."""

    __slots__ = ("channel", "exclusive", "no_ack", "prefetch", "queue", "tag", "tag_shortstr",
                 "unacked")

    def __init__(
        self, tag: str, channel: Channel, queue: Queue, no_ack: bool, exclusive: bool,
        prefetch: int,
    ) -> None:
        self.tag = tag
        self.tag_shortstr = encode_shortstr(tag)  # (encoded once: it is in every delivery)
        self.channel = channel
        self.queue = queue
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.prefetch = prefetch  # 0 = unlimited (basic.qos global=false at consume time)
        self.unacked = 0

    def has_credit(self) -> bool:
        """May this consumer take one more delivery now?"""
        if self.prefetch and self.unacked >= self.prefetch:
            return False
        return self.channel.has_credit(self.no_ack)

    def deliver(self, msg: QueuedMessage) -> None:
        """Send ``basic.deliver`` + content; track it unless the consumer is no-ack.

        (The channel's work, inlined here: this runs once per delivered message.)"""
        ch = self.channel
        conn = ch.conn
        ch.next_tag += 1
        tag = ch.next_tag
        queue = self.queue
        ch.broker.counters["delivered"] += 1
        conn.delivered += 1
        if self.no_ack:
            if msg.stored:
                ch.broker.forget(queue, msg)  # (kicks the committer)
                # A delivery runs in whichever task enqueued the message, not in this
                # connection's reader: it tells the connection, which syncs before close-ok.
                conn.note_staged()
        else:
            ch.unacked[tag] = (queue, msg, self)
            self.unacked += 1
            ch.global_unacked += 1
            queue.unacked += 1
        conn.send(encode_deliver(ch.number, self.tag_shortstr, tag, msg.redelivered,
                                 msg.exchange, msg.routing_key, msg.properties, msg.body,
                                 conn.frame_max))

    def server_cancelled(self) -> None:
        """The queue was deleted: notify the client (consumer_cancel_notify)."""
        ch = self.channel
        ch.consumers.pop(self.tag, None)
        if ch.conn.cancel_notify and not ch.closing and not ch.conn.closed:
            ch.reply(spec.BasicCancel(self.tag, True))


def server_cancel(consumer: QueueConsumer) -> None:
    """``Broker.delete_queue``'s callback for each consumer of the deleted queue."""
    consumer.server_cancelled()


#: An unacked delivery: (queue, message, consumer or None for basic.get).
Unacked = tuple[Queue, QueuedMessage, "Consumer | None"]


class Channel:
    """State of one open channel of one connection."""

    def __init__(self, conn: ChannelOwner, number: int) -> None:
        self.conn = conn
        self.number = number
        self.broker: Broker = conn.broker
        self.consumers: dict[str, Consumer] = {}
        self.unacked: dict[int, Unacked] = {}
        self.next_tag = 0
        self.prefetch = 0  # basic.qos global=false: applies to consumers created later
        self.global_prefetch = 0  # basic.qos global=true: shared by the channel's consumers
        self.global_unacked = 0
        self.confirm = False
        self.publish_seq = 0
        self.closing = False  # we sent channel.close and wait for close-ok
        self.last_queue = ""  # the queue last declared on this channel (spec 1.7.2.3)
        self._touched: set[Queue] = set()
        self._was_capped = False

    # -- delivery ------------------------------------------------------------------------

    def has_credit(self, no_ack: bool) -> bool:
        """Channel-wide conditions for one more delivery to a consumer of this channel."""
        if self.closing:
            return False
        if not self.conn.writable:
            return False  # the connection re-dispatches once its send buffer drains
        if no_ack:
            return True
        if len(self.unacked) >= self.conn.unacked_limit:
            return False  # bound memory even for consumers without prefetch that never ack
        return not self.global_prefetch or self.global_unacked < self.global_prefetch

    def reply(self, method: spec.Method) -> None:
        self.conn.send(encode_method(self.number, method))

    # -- acknowledgements ----------------------------------------------------------------

    def _take(self, tag: int, multiple: bool) -> list[Unacked]:
        unacked = self.unacked
        if multiple:
            if tag == 0:
                tags = list(unacked)
            else:
                tags = []
                for t in unacked:
                    if t > tag:
                        break
                    tags.append(t)
            if not tags and tag != 0:
                raise AmqpError(PRECONDITION_FAILED, f"unknown delivery tag {tag}")
        else:
            if tag not in unacked:
                raise AmqpError(PRECONDITION_FAILED, f"unknown delivery tag {tag}")
            tags = [tag]
        # At the channel's unacked bound every consumer of the channel was held back.
        self._was_capped = len(unacked) >= self.conn.unacked_limit
        out = [unacked.pop(t) for t in tags]
        touched: set[Queue] = set()
        for entry in out:
            queue = self._settle(entry)
            if queue is not None:
                touched.add(queue)
        self._touched = touched
        return out

    def _settle(self, entry: Unacked) -> Queue | None:
        """One delivery leaves the unacked set: the counts; its queue if a consumer's
        credit came back (that queue may deliver again)."""
        queue, _msg, consumer = entry
        queue.unacked -= 1
        if consumer is None:
            return None
        consumer.unacked -= 1
        self.global_unacked -= 1
        return queue

    def _redispatch(self) -> None:
        self._dispatch_after(self._was_capped, self._touched)

    def _dispatch_after(self, was_capped: bool, touched: Iterable[Queue]) -> None:
        if self.global_prefetch or was_capped:
            for c in list(self.consumers.values()):
                c.queue.dispatch()
        else:
            for q in touched:
                q.dispatch()

    def ack(self, tag: int, multiple: bool) -> int:
        """basic.ack: delete the durable records by (queue, seq); returns flags."""
        broker = self.broker
        if not multiple:
            return self._ack_one(tag)
        settled = self._take(tag, multiple)
        flags = 0
        for queue, msg, _consumer in settled:
            if msg.stored:
                broker.forget(queue, msg)
                flags = KICK | UNSYNCED
        broker.counters["acked"] += len(settled)
        self._redispatch()
        return flags

    def _ack_one(self, tag: int) -> int:
        """``ack(tag, multiple=False)``, the common case, without the lists of ``_take``."""
        unacked = self.unacked
        # At the channel's unacked bound every consumer of the channel was held back.
        was_capped = len(unacked) >= self.conn.unacked_limit
        entry = unacked.pop(tag, None)
        if entry is None:
            raise AmqpError(PRECONDITION_FAILED, f"unknown delivery tag {tag}")
        credited = self._settle(entry)
        owner, msg, _consumer = entry
        broker = self.broker
        flags = 0
        if msg.stored:
            broker.forget(owner, msg)
            flags = KICK | UNSYNCED
        broker.counters["acked"] += 1
        self._dispatch_after(was_capped, () if credited is None else (credited,))
        return flags

    def nack(self, tag: int, multiple: bool, requeue: bool) -> int:
        """basic.nack / basic.reject: requeue at the head (redelivered) or discard."""
        settled = self._take(tag, multiple)
        flags = self._settle_rejected(settled, requeue)
        self._redispatch()
        return flags

    def _settle_rejected(self, settled: list[Unacked], requeue: bool) -> int:
        broker = self.broker
        flags = 0
        if requeue:
            by_queue: dict[Queue, list[QueuedMessage]] = {}
            for queue, msg, _c in settled:
                by_queue.setdefault(queue, []).append(msg)
            for queue, msgs in by_queue.items():
                if queue.deleted:
                    for m in msgs:
                        broker.forget(queue, m)
                    flags |= KICK
                    continue
                if queue.delivery_limit is not None:
                    msgs, counted = self._count_returns(queue, msgs)
                    flags |= counted
                queue.requeue(msgs)
            broker.counters["requeued"] += len(settled)
        else:
            for queue, msg, _c in settled:
                if queue.dlx is not None and not queue.deleted:
                    # basic.reject / basic.nack requeue=false: dead-lettered (RabbitMQ dlx)
                    broker.dead_letter(queue, msg, deadletter.REJECTED)
                    flags |= KICK | UNSYNCED
                elif msg.stored:
                    broker.forget(queue, msg)
                    flags |= KICK
            broker.counters["discarded"] += len(settled)
        return flags

    def _count_returns(self, queue: Queue, msgs: list[QueuedMessage]
                       ) -> tuple[list[QueuedMessage], int]:
        """Quorum-queue poison-message handling: every return of a delivered message
        (nack/reject with requeue, a closed channel, recover) counts; the redelivery
        carries ``x-delivery-count``; past ``x-delivery-limit`` the message is
        dead-lettered (reason ``delivery_limit``) or, without a DLX, dropped and counted.
        Only queues with a limit pay for this (one decode per return); returns the messages
        to requeue and flags."""
        broker = self.broker
        limit = queue.delivery_limit
        assert limit is not None
        back: list[QueuedMessage] = []
        flags = 0
        for msg in msgs:
            count = deadletter.delivery_count_of(msg.properties) + 1
            if count > limit:
                broker.counters["delivery_limit"] += 1
                broker.dead_letter(queue, msg, deadletter.DELIVERY_LIMIT)
                flags |= KICK | UNSYNCED
                continue
            msg.properties = deadletter.with_delivery_count(msg.properties, count)
            if msg.stored:  # the count survives a restart with the message
                broker.store_message(queue, msg, persist.encode_record(
                    msg.exchange, msg.routing_key, msg.properties, msg.body, msg.expires))
                broker.counters["persisted"] -= 1
                flags |= KICK | UNSYNCED
            back.append(msg)
        return back, flags

    # -- closing -------------------------------------------------------------------------

    def release(self) -> int:
        """The channel is gone: cancel its consumers, requeue its unacked messages;
        returns flags."""
        self.closing = True
        flags = 0
        for consumer in list(self.consumers.values()):
            flags |= self._drop_consumer(consumer)
        self.consumers.clear()
        if self.unacked:
            settled = list(self.unacked.values())
            self.unacked.clear()
            for queue, _msg, owner in settled:
                queue.unacked -= 1
                if owner is not None:
                    owner.unacked -= 1
            self.global_unacked = 0
            flags |= self._settle_rejected(settled, requeue=True)
        return flags

    def _drop_consumer(self, consumer: Consumer) -> int:
        queue = consumer.queue
        queue.remove_consumer(consumer)
        self.consumers.pop(consumer.tag, None)
        if queue.auto_delete and queue.had_consumer and not queue.consumers and not queue.deleted:
            # Auto-delete queues go when their last consumer goes (spec queue.declare).
            self.broker.delete_queue(queue, server_cancel)
            return KICK
        return 0

    # -- method handlers of the basic, channel and confirm classes (see methods.py) -----

    def ok(self, nowait: bool, method: spec.Method) -> Callable[[], None]:
        """The reply of a method with a ``nowait`` flag (none when it is set)."""
        if nowait:
            return _nothing
        return lambda: self.reply(method)

    def on_flow(self, m: spec.ChannelFlow) -> int:
        if not m.active:
            raise AmqpError(NOT_IMPLEMENTED, "channel.flow active=false is not implemented",
                            hard=True)
        self.reply(spec.ChannelFlowOk(active=True))
        return 0

    def on_access_request(self, m: spec.AccessRequest) -> int:
        self.reply(spec.AccessRequestOk(ticket=1))
        return 0

    def queue(self, name: str) -> Queue:
        # An empty queue name means "the last queue declared on this channel" (spec 1.7.2.3).
        return self.broker.get_queue(name or self.last_queue, self.conn)

    def on_qos(self, m: spec.BasicQos) -> int:
        if m.prefetch_size:
            raise AmqpError(NOT_IMPLEMENTED, "prefetch_size!=0 is not implemented", hard=True)
        # RabbitMQ's reading (per_consumer_qos): global=false sets the limit of each consumer
        # created afterwards on this channel; global=true limits the channel as a whole.
        if m.global_:
            self.global_prefetch = m.prefetch_count
            for c in list(self.consumers.values()):
                c.queue.dispatch()
        else:
            self.prefetch = m.prefetch_count
        self.reply(spec.BasicQosOk())
        return 0

    def on_consume(self, m: spec.BasicConsume) -> int:
        q = self.queue(m.queue)
        if m.arguments:
            raise AmqpError(NOT_IMPLEMENTED,
                            f"consumer argument '{next(iter(m.arguments))}' is not implemented",
                            hard=True)
        tag = m.consumer_tag or "amq.ctag-" + secrets.token_urlsafe(16)
        if tag in self.consumers:
            raise AmqpError(NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'", hard=True)
        if q.consumers and (m.exclusive or any(c.exclusive for c in q.consumers)):
            raise AmqpError(ACCESS_REFUSED,
                            f"queue '{q.name}' in vhost '/' in exclusive use")
        self.conn.bounds.check_consumer_limit()
        consumer = Consumer(tag, self, q, m.no_ack, m.exclusive, self.prefetch)
        self.consumers[tag] = consumer
        q.consumers.append(consumer)
        q.had_consumer = True
        if not m.nowait:
            self.reply(spec.BasicConsumeOk(tag))
        q.dispatch()
        return 0

    def on_cancel(self, m: spec.BasicCancel) -> int | AfterCommit:
        consumer = self.consumers.get(m.consumer_tag)
        # An auto-delete queue that lost its last consumer is deleted durably before
        # cancel-ok.
        staged = consumer is not None and self._drop_consumer(consumer) != 0
        return after(staged, self.ok(m.nowait, spec.BasicCancelOk(m.consumer_tag)))

    def on_get(self, m: spec.BasicGet) -> int:
        q = self.queue(m.queue)
        msg = q.pop_ready()
        if msg is None:
            self.reply(spec.BasicGetEmpty())
            return 0
        q.delivered += 1
        self.broker.counters["delivered"] += 1
        self.conn.delivered += 1
        self.next_tag += 1
        tag = self.next_tag
        flags = 0
        if m.no_ack:
            if msg.stored:
                self.broker.forget(q, msg)
                flags = KICK
        else:
            self.unacked[tag] = (q, msg, None)
            q.unacked += 1
        self.conn.send(encode_content(
            self.number,
            spec.BasicGetOk(tag, msg.redelivered, msg.exchange, msg.routing_key, len(q.ready)),
            msg.properties, msg.body, self.conn.frame_max))
        return flags

    def on_nack(self, m: spec.BasicNack) -> int:
        return self.nack(m.delivery_tag, m.multiple, m.requeue)

    def on_reject(self, m: spec.BasicReject) -> int:
        return self.nack(m.delivery_tag, False, m.requeue)

    def on_recover(self, m: spec.BasicRecover | spec.BasicRecoverAsync) -> int:
        if not m.requeue:
            raise AmqpError(NOT_IMPLEMENTED, "basic.recover requeue=false is not implemented",
                            hard=True)
        settled = self._take(0, True)
        flags = self._settle_rejected(settled, requeue=True)
        if isinstance(m, spec.BasicRecover):  # recover-async (deprecated) has no reply
            self.reply(spec.BasicRecoverOk())
        self._redispatch()
        return flags

    def on_confirm_select(self, m: spec.ConfirmSelect) -> int:
        self.confirm = True
        if not m.nowait:
            self.reply(spec.ConfirmSelectOk())
        return 0

    def on_tx(self, m: spec.Method) -> int:
        raise AmqpError(NOT_IMPLEMENTED, "transactions (tx.select) are not implemented",
                        m.CLASS_ID, m.METHOD_ID, hard=True)


def _nothing() -> None:
    pass
