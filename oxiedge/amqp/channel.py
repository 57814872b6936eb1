"""One AMQP channel: its consumers (``consumers.py``), its unacked deliveries and their
settlement (``settlement.py``), QoS and confirm mode, and the handlers of the basic,
channel and confirm class methods (``methods.py`` dispatches them, and has those of the
exchange and queue classes).

``basic.publish`` is not handled here: publishing is batched per connection (a burst of
frames is routed, written as one group-commit contribution, then confirmed), see
``burst.py``; ``basic.ack`` goes straight to the channel's settlement.  Handlers are
synchronous and raise :class:`AmqpError` (a soft code closes this channel, a hard one the
connection).  They never wait for the disk; they *return* what is left to do:

* an ``int`` of flags: :data:`KICK` (durable deletes were staged: have a commit round
  soon) and :data:`UNSYNCED` (make them durable before the reply to the next synchronous
  method, so "ack, then any round trip" means the ack survives a crash); 0 for nothing;
* an :class:`AfterCommit`: the method staged durable writes its reply promises (a durable
  declare, bind, purge, delete): the protocol commits, then calls ``then()``, which sends
  the reply (and whatever must follow it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from oxiedge.amqp import spec
from oxiedge.amqp.acktimeout import DeliveryMarks
from oxiedge.amqp.codec import encode_content, encode_method
from oxiedge.amqp.constants import NOT_IMPLEMENTED, PRECONDITION_FAILED
from oxiedge.amqp.consumers import ConsumerSet
from oxiedge.amqp.errors import AmqpError
from oxiedge.amqp.settlement import KICK, UNSYNCED, Settlement
from oxiedge.amqp.transaction import Transaction

if TYPE_CHECKING:
    from oxiedge.amqp.broker import Broker
    from oxiedge.amqp.ports import ChannelOwner
    from oxiedge.amqp.queues import Queue

__all__ = ["KICK", "UNSYNCED", "AfterCommit", "Channel", "after"]


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


class Channel:
    """State of one open channel of one connection."""

    def __init__(self, conn: ChannelOwner, number: int) -> None:
        self.conn = conn
        self.number = number
        self.broker: Broker = conn.broker
        self.consumers = ConsumerSet(self)
        #: Where every settlement of this channel goes (acks, nacks, rejects, recover,
        #: the release at close): the one object a transaction would stand in front of.
        self.settlement = Settlement(self.broker, self.consumers, conn.unacked_limit)
        self.prefetch = 0  # basic.qos global=false: applies to consumers created later
        self.confirm = False
        #: tx.select: the transaction holding this channel's publishes and settlements
        #: (``transaction.py``); None for a channel that is not transactional.
        self.tx: Transaction | None = None
        self.publish_seq = 0
        self.closing = False  # we sent channel.close and wait for close-ok
        #: When its deliveries were first seen unacked (the acknowledgement timeout).
        self.delivery_marks = DeliveryMarks()
        self.last_queue = ""  # the queue last declared on this channel (spec 1.7.2.3)

    def reply(self, method: spec.Method) -> None:
        self.conn.send(encode_method(self.number, method))

    def release(self) -> int:
        """The channel is gone: cancel its consumers, requeue its unacked messages;
        returns flags."""
        self.closing = True
        if self.tx is not None:
            self.tx.rollback()  # an uncommitted transaction leaves no trace
        flags = self.consumers.release()
        return flags | self.settlement.release()

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
            self.settlement.set_global_prefetch(m.prefetch_count)
        else:
            self.prefetch = m.prefetch_count
        self.reply(spec.BasicQosOk())
        return 0

    def on_consume(self, m: spec.BasicConsume) -> int:
        q = self.queue(m.queue)
        consumer = self.consumers.consume(q, m, self.prefetch)
        if not m.nowait:
            self.reply(spec.BasicConsumeOk(consumer.tag))
        q.dispatch()
        return 0

    def on_cancel(self, m: spec.BasicCancel) -> int | AfterCommit:
        # An auto-delete queue that lost its last consumer is deleted durably before
        # cancel-ok.
        staged = self.consumers.cancel(m.consumer_tag) != 0
        return after(staged, self.ok(m.nowait, spec.BasicCancelOk(m.consumer_tag)))

    def on_get(self, m: spec.BasicGet) -> int:
        q = self.queue(m.queue)
        msg = q.pop_ready()
        counters = self.broker.counters
        if msg is None:
            counters["get_empty"] += 1
            self.reply(spec.BasicGetEmpty())
            return 0
        q.delivered += 1
        counters["delivered"] += 1
        counters["get_noack" if m.no_ack else "get_ack"] += 1
        self.conn.delivered += 1
        tag = self.settlement.track_get(q, msg, m.no_ack)
        flags = 0
        if m.no_ack and msg.stored:
            self.broker.forget(q, msg)
            flags = KICK
        self.conn.send(encode_content(
            self.number,
            spec.BasicGetOk(tag, msg.redelivered, msg.exchange, msg.routing_key, q.ready_count()),
            msg.properties, msg.body, self.conn.frame_max))
        return flags

    def on_nack(self, m: spec.BasicNack) -> int:
        if self.tx is not None:
            self.tx.hold_settlement(m.delivery_tag, m.multiple, m.requeue)
            return 0
        return self.settlement.nack(m.delivery_tag, m.multiple, m.requeue)

    def on_reject(self, m: spec.BasicReject) -> int:
        if self.tx is not None:
            self.tx.hold_settlement(m.delivery_tag, False, m.requeue)
            return 0
        return self.settlement.nack(m.delivery_tag, False, m.requeue)

    def on_recover(self, m: spec.BasicRecover | spec.BasicRecoverAsync) -> int:
        if not m.requeue:
            raise AmqpError(NOT_IMPLEMENTED, "basic.recover requeue=false is not implemented",
                            hard=True)
        # (recover-async, deprecated, has no reply)
        return self.settlement.recover(self.ok(not isinstance(m, spec.BasicRecover),
                                               spec.BasicRecoverOk()))

    def on_confirm_select(self, m: spec.ConfirmSelect) -> int:
        if self.tx is not None:  # (RabbitMQ's words)
            raise AmqpError(PRECONDITION_FAILED, "cannot switch from tx to confirm mode",
                            m.CLASS_ID, m.METHOD_ID)
        self.confirm = True
        if not m.nowait:
            self.reply(spec.ConfirmSelectOk())
        return 0

    # -- the tx class (transaction.py) ---------------------------------------------------

    def on_tx_select(self, m: spec.TxSelect) -> int:
        if self.confirm:
            raise AmqpError(PRECONDITION_FAILED, "cannot switch from confirm to tx mode",
                            m.CLASS_ID, m.METHOD_ID)
        if self.tx is None:
            self.tx = Transaction(self.settlement, self.conn.bounds)
        self.reply(spec.TxSelectOk())
        return 0

    def on_tx_commit(self, m: spec.TxCommit) -> AfterCommit | int:
        staged = self._transaction(m).commit(self.conn, self.number)
        # commit-ok only once the round holding what the commit staged is synced.
        return after(staged, lambda: self.reply(spec.TxCommitOk()))

    def on_tx_rollback(self, m: spec.TxRollback) -> int:
        self._transaction(m).rollback()
        self.broker.counters["tx_rollbacks"] += 1
        self.reply(spec.TxRollbackOk())
        return 0

    def _transaction(self, m: spec.Method) -> Transaction:
        if self.tx is None:
            raise AmqpError(PRECONDITION_FAILED, "channel is not transactional",
                            m.CLASS_ID, m.METHOD_ID)
        return self.tx


def _nothing() -> None:
    pass
