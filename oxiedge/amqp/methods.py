"""The handlers of the exchange and queue classes (declare, bind, unbind, purge, delete),
and the dispatch of every channel method other than ``basic.publish`` / ``basic.ack``
(which the protocol handles itself, batched per burst).

Handlers are synchronous; they return what is left to do (``channel.py``'s module
docstring): flags, or an :class:`~oxiedge.amqp.channel.AfterCommit` whose ``then()``
sends the reply once the durable writes it promises are committed.
"""

from __future__ import annotations

from typing import Any

from oxiedge.amqp import authz, spec
from oxiedge.amqp.channel import AfterCommit, Channel, after
from oxiedge.amqp.constants import ACCESS_REFUSED, NOT_IMPLEMENTED, PRECONDITION_FAILED
from oxiedge.amqp.errors import AmqpError
from oxiedge.amqp.queued import QueueConsumer


def handle(ch: Channel, method: spec.Method) -> int | AfterCommit:
    """Run the handler of a non-publish channel method."""
    handler = _HANDLERS.get(type(method))
    if handler is None:
        raise AmqpError(NOT_IMPLEMENTED, f"{method.NAME} is not implemented",
                        method.CLASS_ID, method.METHOD_ID, hard=True)
    if ch.conn.perms.active:  # docs/permissions.md: nothing to check without rules
        authz.check_method(ch, method)
    result: int | AfterCommit = handler(ch, method)
    return result


def exchange_declare(ch: Channel, m: spec.ExchangeDeclare) -> int | AfterCommit:
    _x, staged = ch.broker.topology.declare_exchange(
        m.exchange, m.type, passive=m.passive, durable=m.durable,
        auto_delete=m.auto_delete, internal=m.internal, arguments=m.arguments)
    return after(staged, ch.ok(m.nowait, spec.ExchangeDeclareOk()))

def exchange_delete(ch: Channel, m: spec.ExchangeDelete) -> int | AfterCommit:
    # An unknown exchange is deleted successfully (idempotent, as in RabbitMQ).
    return after(ch.broker.topology.delete_exchange(m.exchange, m.if_unused),
                  ch.ok(m.nowait, spec.ExchangeDeleteOk()))

def exchange_bind(ch: Channel, m: spec.ExchangeBind) -> int | AfterCommit:
    return after(ch.broker.topology.bind_exchange(m.destination, m.source, m.routing_key,
                                                     m.arguments),
                  ch.ok(m.nowait, spec.ExchangeBindOk()))

def exchange_unbind(ch: Channel, m: spec.ExchangeUnbind) -> int | AfterCommit:
    return after(ch.broker.topology.unbind_exchange(m.destination, m.source, m.routing_key),
                  ch.ok(m.nowait, spec.ExchangeUnbindOk()))

def queue_declare(ch: Channel, m: spec.QueueDeclare) -> int | AfterCommit:
    conn = ch.conn
    if not m.passive and (not m.queue or m.queue not in ch.broker.queues):
        conn.bounds.check_queue_limit(m.queue)
    q, staged = ch.broker.declare_queue(
        m.queue, passive=m.passive, durable=m.durable, exclusive=m.exclusive,
        auto_delete=m.auto_delete, arguments=m.arguments, owner=conn)
    if q.exclusive_owner is conn:
        conn.exclusive_queues[q.name] = q
    if not m.passive:
        conn.bounds.queue_created(q)
    ch.last_queue = q.name

    def reply() -> None:
        q.expire_head()  # (after the commit: the counts are those of now)
        if not m.nowait:
            ch.reply(spec.QueueDeclareOk(q.name, q.ready_count(), len(q.consumers)))

    return after(staged, reply)

def queue_bind(ch: Channel, m: spec.QueueBind) -> int | AfterCommit:
    q = ch.queue(m.queue)
    return after(ch.broker.topology.bind(q, m.exchange, m.routing_key, m.arguments),
                  ch.ok(m.nowait, spec.QueueBindOk()))

def queue_unbind(ch: Channel, m: spec.QueueUnbind) -> int | AfterCommit:
    name = m.queue or ch.last_queue
    staged = False
    if name in ch.broker.queues and m.exchange in ch.broker.exchanges:
        q = ch.queue(name)
        staged = ch.broker.topology.unbind(q, m.exchange, m.routing_key, m.arguments)
    elif not m.exchange:
        raise AmqpError(ACCESS_REFUSED, "operation not permitted on the default exchange")
    # else: unbinding from a queue or exchange that is gone succeeds, as in RabbitMQ
    return after(staged, lambda: ch.reply(spec.QueueUnbindOk()))

def queue_purge(ch: Channel, m: spec.QueuePurge) -> int | AfterCommit:
    q = ch.queue(m.queue)
    count = ch.broker.purge(q)
    return after(q.doc_id is not None, ch.ok(m.nowait, spec.QueuePurgeOk(count)))

def queue_delete(ch: Channel, m: spec.QueueDelete) -> int | AfterCommit:
    name = m.queue or ch.last_queue
    if name not in ch.broker.queues:
        # Deleting what does not exist succeeds, as in RabbitMQ (delete is idempotent).
        if not m.nowait:
            ch.reply(spec.QueueDeleteOk(0))
        return 0
    q = ch.queue(name)
    if m.if_unused and q.consumers:
        raise AmqpError(PRECONDITION_FAILED, f"queue '{q.name}' in vhost '/' in use")
    if m.if_empty and q.ready_count():
        raise AmqpError(PRECONDITION_FAILED, f"queue '{q.name}' in vhost '/' not empty")
    cancelled: list[QueueConsumer] = []
    count = ch.broker.delete_queue(q, cancelled.append)
    ch.conn.exclusive_queues.pop(q.name, None)

    def reply() -> None:
        if not m.nowait:
            ch.reply(spec.QueueDeleteOk(count))
        # The consumers hear basic.cancel only after delete-ok, as from RabbitMQ (whose
        # queue process dies asynchronously): a client waiting for delete-ok on the
        # same channel must not see a cancel first.
        for consumer in cancelled:
            consumer.server_cancelled()

    return after(q.doc_id is not None, reply)


#: basic.publish and basic.ack never get here: the protocol handles them itself.
_HANDLERS: dict[type[spec.Method], Any] = {
    spec.ChannelFlow: Channel.on_flow,
    spec.AccessRequest: Channel.on_access_request,
    spec.ExchangeDeclare: exchange_declare,
    spec.ExchangeDelete: exchange_delete,
    spec.ExchangeBind: exchange_bind,
    spec.ExchangeUnbind: exchange_unbind,
    spec.QueueDeclare: queue_declare,
    spec.QueueBind: queue_bind,
    spec.QueueUnbind: queue_unbind,
    spec.QueuePurge: queue_purge,
    spec.QueueDelete: queue_delete,
    spec.BasicQos: Channel.on_qos,
    spec.BasicConsume: Channel.on_consume,
    spec.BasicCancel: Channel.on_cancel,
    spec.BasicGet: Channel.on_get,
    spec.BasicNack: Channel.on_nack,
    spec.BasicReject: Channel.on_reject,
    spec.BasicRecover: Channel.on_recover,
    spec.BasicRecoverAsync: Channel.on_recover,
    spec.ConfirmSelect: Channel.on_confirm_select,
    spec.TxSelect: Channel.on_tx_select,
    spec.TxCommit: Channel.on_tx_commit,
    spec.TxRollback: Channel.on_tx_rollback,
}
