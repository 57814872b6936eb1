"""One AMQP channel: its consumers, unacked deliveries, QoS and confirm mode, and the
handlers of the channel-level methods (exchange, queue, basic, confirm classes).

``basic.publish`` is not handled here: publishing is batched per connection (a burst of
frames is routed, written as one group-commit contribution, then confirmed), see
``connection.py``.  Handlers raise :class:`AmqpError`; a soft code closes this channel, a
hard one the connection.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

from oxiedge.amqp import authz, deadletter, persist, spec
from oxiedge.amqp.codec import encode_content, encode_method
from oxiedge.amqp.constants import (
    ACCESS_REFUSED,
    NOT_ALLOWED,
    NOT_IMPLEMENTED,
    PRECONDITION_FAILED,
)
from oxiedge.amqp.errors import AmqpError
from oxiedge.amqp.queues import Consumer, Queue, QueuedMessage

if TYPE_CHECKING:
    from oxiedge.amqp.broker import Broker
    from oxiedge.amqp.connection import AmqpConnection

#: An unacked delivery: (queue, message, consumer or None for basic.get).
Unacked = tuple[Queue, QueuedMessage, "Consumer | None"]


class Channel:
    """State of one open channel of one connection."""

    def __init__(self, conn: AmqpConnection, number: int) -> None:
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
            self.conn.stalled = True  # the writer re-dispatches once the buffer drains
            return False
        if no_ack:
            return True
        if len(self.unacked) >= self.conn.unacked_limit:
            return False  # bound memory even for consumers without prefetch that never ack
        return not self.global_prefetch or self.global_unacked < self.global_prefetch

    def deliver(self, consumer: Consumer, msg: QueuedMessage) -> None:
        """Send ``basic.deliver`` + content; track it unless the consumer is no-ack."""
        self.next_tag += 1
        tag = self.next_tag
        queue = consumer.queue
        self.broker.counters["delivered"] += 1
        self.conn.delivered += 1
        if consumer.no_ack:
            self.broker.forget(queue, msg)
            self.conn.dirty = True
        else:
            self.unacked[tag] = (queue, msg, consumer)
            consumer.unacked += 1
            self.global_unacked += 1
            queue.unacked += 1
        self.conn.send(encode_content(
            self.number,
            spec.BasicDeliver(consumer.tag, tag, msg.redelivered, msg.exchange, msg.routing_key),
            msg.properties, msg.body, self.conn.frame_max))

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
        for queue, _msg, consumer in out:
            queue.unacked -= 1
            if consumer is not None:
                consumer.unacked -= 1
                self.global_unacked -= 1
                touched.add(queue)
        self._touched = touched
        return out

    def _redispatch(self) -> None:
        if self.global_prefetch or self._was_capped:
            for c in list(self.consumers.values()):
                c.queue.dispatch()
        else:
            for q in self._touched:
                q.dispatch()

    def ack(self, tag: int, multiple: bool) -> None:
        """basic.ack: delete the durable records by (queue, seq)."""
        broker = self.broker
        settled = self._take(tag, multiple)
        for queue, msg, _consumer in settled:
            if msg.stored:
                broker.forget(queue, msg)
                self.conn.dirty = self.conn.unsynced = True
        broker.counters["acked"] += len(settled)
        self._redispatch()

    def nack(self, tag: int, multiple: bool, requeue: bool) -> None:
        """basic.nack / basic.reject: requeue at the head (redelivered) or discard."""
        settled = self._take(tag, multiple)
        self._settle_rejected(settled, requeue)
        self._redispatch()

    def _settle_rejected(self, settled: list[Unacked], requeue: bool) -> None:
        broker = self.broker
        if requeue:
            by_queue: dict[Queue, list[QueuedMessage]] = {}
            for queue, msg, _c in settled:
                by_queue.setdefault(queue, []).append(msg)
            for queue, msgs in by_queue.items():
                if queue.deleted:
                    for m in msgs:
                        broker.forget(queue, m)
                    self.conn.dirty = True
                    continue
                if queue.delivery_limit is not None:
                    msgs = self._count_returns(queue, msgs)
                queue.requeue(msgs)
            broker.counters["requeued"] += len(settled)
        else:
            for queue, msg, _c in settled:
                if queue.dlx is not None and not queue.deleted:
                    # basic.reject / basic.nack requeue=false: dead-lettered (RabbitMQ dlx)
                    broker.dead_letter(queue, msg, deadletter.REJECTED)
                    self.conn.dirty = self.conn.unsynced = True
                elif msg.stored:
                    broker.forget(queue, msg)
                    self.conn.dirty = True
            broker.counters["discarded"] += len(settled)

    def _count_returns(self, queue: Queue, msgs: list[QueuedMessage]) -> list[QueuedMessage]:
        """Quorum-queue poison-message handling: every return of a delivered message
        (nack/reject with requeue, a closed channel, recover) counts; the redelivery
        carries ``x-delivery-count``; past ``x-delivery-limit`` the message is
        dead-lettered (reason ``delivery_limit``) or, without a DLX, dropped and counted.
        Only queues with a limit pay for this (one decode per return)."""
        broker = self.broker
        limit = queue.delivery_limit
        assert limit is not None
        back: list[QueuedMessage] = []
        for msg in msgs:
            count = deadletter.delivery_count_of(msg.properties) + 1
            if count > limit:
                broker.counters["delivery_limit"] += 1
                broker.dead_letter(queue, msg, deadletter.DELIVERY_LIMIT)
                self.conn.dirty = self.conn.unsynced = True
                continue
            msg.properties = deadletter.with_delivery_count(msg.properties, count)
            if msg.stored:  # the count survives a restart with the message
                broker.store_message(queue, msg, persist.encode_record(
                    msg.exchange, msg.routing_key, msg.properties, msg.body, msg.expires))
                broker.counters["persisted"] -= 1
                self.conn.dirty = self.conn.unsynced = True
            back.append(msg)
        return back

    # -- closing -------------------------------------------------------------------------

    def release(self) -> None:
        """The channel is gone: cancel its consumers, requeue its unacked messages."""
        self.closing = True
        for consumer in list(self.consumers.values()):
            self._drop_consumer(consumer)
        self.consumers.clear()
        if self.unacked:
            settled = list(self.unacked.values())
            self.unacked.clear()
            for queue, _msg, owner in settled:
                queue.unacked -= 1
                if owner is not None:
                    owner.unacked -= 1
            self.global_unacked = 0
            self._settle_rejected(settled, requeue=True)

    def _drop_consumer(self, consumer: Consumer) -> None:
        queue = consumer.queue
        queue.remove_consumer(consumer)
        self.consumers.pop(consumer.tag, None)
        if queue.auto_delete and queue.had_consumer and not queue.consumers and not queue.deleted:
            # Auto-delete queues go when their last consumer goes (spec queue.declare).
            self.broker.delete_queue(queue, self.conn.server_cancel)
            self.conn.dirty = True

    # -- method handlers -----------------------------------------------------------------

    async def handle(self, method: spec.Method) -> None:
        """Run the handler of a non-publish channel method."""
        handler = _HANDLERS.get(type(method))
        if handler is None:
            raise AmqpError(NOT_IMPLEMENTED, f"{method.NAME} is not implemented",
                            method.CLASS_ID, method.METHOD_ID, hard=True)
        if self.conn.perms.active:  # docs/permissions.md: nothing to check without rules
            authz.check_method(self, method)
        await handler(self, method)

    async def _commit_if(self, staged: bool) -> None:
        if staged:
            await self.conn.commit()

    async def on_flow(self, m: spec.ChannelFlow) -> None:
        if not m.active:
            raise AmqpError(NOT_IMPLEMENTED, "channel.flow active=false is not implemented",
                            hard=True)
        self.reply(spec.ChannelFlowOk(active=True))

    async def on_access_request(self, m: spec.AccessRequest) -> None:
        self.reply(spec.AccessRequestOk(ticket=1))

    async def on_exchange_declare(self, m: spec.ExchangeDeclare) -> None:
        _x, staged = self.broker.declare_exchange(
            m.exchange, m.type, passive=m.passive, durable=m.durable,
            auto_delete=m.auto_delete, internal=m.internal, arguments=m.arguments)
        await self._commit_if(staged)
        if not m.nowait:
            self.reply(spec.ExchangeDeclareOk())

    async def on_exchange_delete(self, m: spec.ExchangeDelete) -> None:
        # An unknown exchange is deleted successfully (idempotent, as in RabbitMQ).
        await self._commit_if(self.broker.delete_exchange(m.exchange, m.if_unused))
        if not m.nowait:
            self.reply(spec.ExchangeDeleteOk())

    async def on_exchange_bind(self, m: spec.ExchangeBind) -> None:
        await self._commit_if(self.broker.bind_exchange(m.destination, m.source,
                                                        m.routing_key, m.arguments))
        if not m.nowait:
            self.reply(spec.ExchangeBindOk())

    async def on_exchange_unbind(self, m: spec.ExchangeUnbind) -> None:
        await self._commit_if(self.broker.unbind_exchange(m.destination, m.source,
                                                          m.routing_key))
        if not m.nowait:
            self.reply(spec.ExchangeUnbindOk())

    async def on_queue_declare(self, m: spec.QueueDeclare) -> None:
        conn = self.conn
        if not m.passive and (not m.queue or m.queue not in self.broker.queues):
            conn.check_queue_limit(m.queue)
        q, staged = self.broker.declare_queue(
            m.queue, passive=m.passive, durable=m.durable, exclusive=m.exclusive,
            auto_delete=m.auto_delete, arguments=m.arguments, owner=self.conn)
        if q.exclusive_owner is conn:
            conn.exclusive_queues[q.name] = q
        if not m.passive:
            conn.created_queues.add(q)
        self.last_queue = q.name
        await self._commit_if(staged)
        q.expire_head()
        if not m.nowait:
            self.reply(spec.QueueDeclareOk(q.name, len(q.ready), len(q.consumers)))

    def _queue(self, name: str) -> Queue:
        # An empty queue name means "the last queue declared on this channel" (spec 1.7.2.3).
        return self.broker.get_queue(name or self.last_queue, self.conn)

    async def on_queue_bind(self, m: spec.QueueBind) -> None:
        q = self._queue(m.queue)
        await self._commit_if(self.broker.bind(q, m.exchange, m.routing_key, m.arguments))
        if not m.nowait:
            self.reply(spec.QueueBindOk())

    async def on_queue_unbind(self, m: spec.QueueUnbind) -> None:
        name = m.queue or self.last_queue
        if name in self.broker.queues and m.exchange in self.broker.exchanges:
            q = self._queue(name)
            await self._commit_if(self.broker.unbind(q, m.exchange, m.routing_key,
                                                     m.arguments))
        elif not m.exchange:
            raise AmqpError(ACCESS_REFUSED, "operation not permitted on the default exchange")
        # else: unbinding from a queue or exchange that is gone succeeds, as in RabbitMQ
        self.reply(spec.QueueUnbindOk())

    async def on_queue_purge(self, m: spec.QueuePurge) -> None:
        q = self._queue(m.queue)
        count = self.broker.purge(q)
        await self._commit_if(q.doc_id is not None)
        if not m.nowait:
            self.reply(spec.QueuePurgeOk(count))

    async def on_queue_delete(self, m: spec.QueueDelete) -> None:
        name = m.queue or self.last_queue
        if name not in self.broker.queues:
            # Deleting what does not exist succeeds, as in RabbitMQ (delete is idempotent).
            if not m.nowait:
                self.reply(spec.QueueDeleteOk(0))
            return
        q = self._queue(name)
        if m.if_unused and q.consumers:
            raise AmqpError(PRECONDITION_FAILED, f"queue '{q.name}' in vhost '/' in use")
        if m.if_empty and q.ready:
            raise AmqpError(PRECONDITION_FAILED, f"queue '{q.name}' in vhost '/' not empty")
        cancelled: list[Consumer] = []
        count = self.broker.delete_queue(q, cancelled.append)
        self.conn.exclusive_queues.pop(q.name, None)
        await self._commit_if(q.doc_id is not None)
        if not m.nowait:
            self.reply(spec.QueueDeleteOk(count))
        # The consumers hear basic.cancel only after delete-ok, as from RabbitMQ (whose
        # queue process dies asynchronously): a client waiting for delete-ok on the same
        # channel must not see a cancel first.
        for consumer in cancelled:
            self.conn.server_cancel(consumer)

    async def on_qos(self, m: spec.BasicQos) -> None:
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

    async def on_consume(self, m: spec.BasicConsume) -> None:
        q = self._queue(m.queue)
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
        self.conn.check_consumer_limit()
        consumer = Consumer(tag, self, q, m.no_ack, m.exclusive, self.prefetch)
        self.consumers[tag] = consumer
        q.consumers.append(consumer)
        q.had_consumer = True
        if not m.nowait:
            self.reply(spec.BasicConsumeOk(tag))
        q.dispatch()

    async def on_cancel(self, m: spec.BasicCancel) -> None:
        consumer = self.consumers.get(m.consumer_tag)
        if consumer is not None:
            self._drop_consumer(consumer)
            if self.conn.dirty:
                await self.conn.commit()
        if not m.nowait:
            self.reply(spec.BasicCancelOk(m.consumer_tag))

    async def on_get(self, m: spec.BasicGet) -> None:
        q = self._queue(m.queue)
        msg = q.pop_ready()
        if msg is None:
            self.reply(spec.BasicGetEmpty())
            return
        q.delivered += 1
        self.broker.counters["delivered"] += 1
        self.conn.delivered += 1
        self.next_tag += 1
        tag = self.next_tag
        if m.no_ack:
            self.broker.forget(q, msg)
            self.conn.dirty = True
        else:
            self.unacked[tag] = (q, msg, None)
            q.unacked += 1
        self.conn.send(encode_content(
            self.number,
            spec.BasicGetOk(tag, msg.redelivered, msg.exchange, msg.routing_key, len(q.ready)),
            msg.properties, msg.body, self.conn.frame_max))

    async def on_nack(self, m: spec.BasicNack) -> None:
        self.nack(m.delivery_tag, m.multiple, m.requeue)

    async def on_reject(self, m: spec.BasicReject) -> None:
        self.nack(m.delivery_tag, False, m.requeue)

    async def on_recover(self, m: spec.BasicRecover | spec.BasicRecoverAsync) -> None:
        if not m.requeue:
            raise AmqpError(NOT_IMPLEMENTED, "basic.recover requeue=false is not implemented",
                            hard=True)
        settled = self._take(0, True)
        self._settle_rejected(settled, requeue=True)
        if isinstance(m, spec.BasicRecover):  # recover-async (deprecated) has no reply
            self.reply(spec.BasicRecoverOk())
        self._redispatch()

    async def on_confirm_select(self, m: spec.ConfirmSelect) -> None:
        self.confirm = True
        if not m.nowait:
            self.reply(spec.ConfirmSelectOk())

    async def on_tx(self, m: spec.Method) -> None:
        raise AmqpError(NOT_IMPLEMENTED, "transactions (tx.select) are not implemented",
                        m.CLASS_ID, m.METHOD_ID, hard=True)


#: basic.publish and basic.ack never get here: the connection's reader handles them itself.
_HANDLERS: dict[type[spec.Method], Any] = {
    spec.ChannelFlow: Channel.on_flow,
    spec.AccessRequest: Channel.on_access_request,
    spec.ExchangeDeclare: Channel.on_exchange_declare,
    spec.ExchangeDelete: Channel.on_exchange_delete,
    spec.ExchangeBind: Channel.on_exchange_bind,
    spec.ExchangeUnbind: Channel.on_exchange_unbind,
    spec.QueueDeclare: Channel.on_queue_declare,
    spec.QueueBind: Channel.on_queue_bind,
    spec.QueueUnbind: Channel.on_queue_unbind,
    spec.QueuePurge: Channel.on_queue_purge,
    spec.QueueDelete: Channel.on_queue_delete,
    spec.BasicQos: Channel.on_qos,
    spec.BasicConsume: Channel.on_consume,
    spec.BasicCancel: Channel.on_cancel,
    spec.BasicGet: Channel.on_get,
    spec.BasicNack: Channel.on_nack,
    spec.BasicReject: Channel.on_reject,
    spec.BasicRecover: Channel.on_recover,
    spec.BasicRecoverAsync: Channel.on_recover,
    spec.ConfirmSelect: Channel.on_confirm_select,
    spec.TxSelect: Channel.on_tx,
    spec.TxCommit: Channel.on_tx,
    spec.TxRollback: Channel.on_tx,
}
