"""The operator's AMQP message operations: ``amqp.publish`` and ``amqp.get`` (``oxiedge
publish`` / ``oxiedge get``, rabbitmqadmin's ``publish`` and ``get``).

``publish`` goes through the one enqueue path, :meth:`Broker.publish
<oxiedge.amqp.publish.PublishPath.publish>`, as a client's ``basic.publish`` (origin AMQP:
a publish to ``amq.topic`` reaches MQTT subscribers through the bus), with a client's
bounds: ``--amqp-max-message-size``, an internal exchange refused, nothing taken in while a
resource alarm holds publishers (a client would be blocked; the operator is told). It
returns once the message is durable, and says whether it was routed (it is ``mandatory``:
an unroutable message is reported, not silently dropped).

``get`` takes up to ``count`` ready messages from the head of a queue. By default they are
put back (``requeue``, flagged redelivered, as rabbitmqadmin's ``ack_requeue_true``); with
``ack`` they are removed, their records deleted before the answer.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oxiedge.amqp import spec
from oxiedge.amqp.errors import AmqpError
from oxiedge.amqp.persist import properties_doc
from oxiedge.operations import (
    BAD_REQUEST,
    FORBIDDEN,
    NOT_FOUND,
    Args,
    Operation,
    OperationError,
)
from oxiedge.staged import COMMIT, ROUTED
from oxiedge.staged import REFUSED as QUEUE_REFUSED

if TYPE_CHECKING:
    from oxiedge.amqp.broker import Broker
    from oxiedge.amqp.ports import Alarms
    from oxiedge.amqp.queued import QueuedMessage

#: The properties an operator may set (``delivery_mode`` comes from ``persistent``).
SETTABLE = tuple(f.name for f in dataclasses.fields(spec.BasicProperties)
                 if f.name != "delivery_mode")


@dataclass(frozen=True, slots=True)
class AmqpPublished:
    exchange: str
    routing_key: str
    bytes: int
    routed: bool  # reached a queue (or, through amq.topic, an MQTT subscriber)
    refused: bool  # a queue's x-overflow=reject-publish refused it


@dataclass(frozen=True, slots=True)
class GotMessage:
    payload: str  # base64
    bytes: int
    exchange: str
    routing_key: str
    redelivered: bool
    properties: dict[str, Any]
    message_count: int  # ready messages that were behind it


class AmqpMessageOps:
    """``amqp.publish`` and ``amqp.get`` on one broker (see the module docstring)."""

    def __init__(self, broker: Broker, max_message_size: int, alarms: Alarms | None,
                 commit: Callable[[], Awaitable[None]] | None = None) -> None:
        self.broker = broker
        self.max_message_size = max_message_size
        self.alarms = alarms
        self._commit = commit if commit is not None else broker.store.commit

    async def publish(self, exchange: str, routing_key: str, body: bytes, *,
                      persistent: bool = True, properties: dict[str, Any] | None = None
                      ) -> AmqpPublished:
        x = self.broker.exchanges.get(exchange)
        if x is None:
            raise OperationError(f"NOT_FOUND - no exchange '{exchange}' in vhost '/'",
                                 NOT_FOUND)
        if x.internal:
            raise OperationError(f"ACCESS_REFUSED - cannot publish to internal exchange "
                                 f"'{exchange}' in vhost '/'", FORBIDDEN)
        if len(body) > self.max_message_size:
            raise OperationError(f"PRECONDITION_FAILED - message size {len(body)} is larger "
                                 f"than configured max size {self.max_message_size}")
        if self.alarms is not None and self.alarms.blocked:
            raise OperationError(f"publishers are held by a resource alarm: "
                                 f"{self.alarms.reason}")
        props = _properties(properties or {}, persistent)
        try:
            flags, _count = self.broker.publish(x, routing_key, props.encode(), body,
                                                persistent, props.expiration, mandatory=True)
        except AmqpError as exc:
            raise OperationError(exc.reply_text) from None
        if flags & COMMIT:
            await self._commit()
        return AmqpPublished(exchange, routing_key, len(body), bool(flags & ROUTED),
                             bool(flags & QUEUE_REFUSED))

    async def get(self, queue: str, count: int = 1, ack: bool = False) -> list[GotMessage]:
        q = self.broker.queues.get(queue)
        if q is None:
            raise OperationError(f"NOT_FOUND - no queue '{queue}' in vhost '/'", NOT_FOUND)
        taken: list[QueuedMessage] = []
        while len(taken) < count:
            msg = q.pop_ready()
            if msg is None:
                break
            taken.append(msg)
        left = q.ready_count()
        rows = [GotMessage(base64.b64encode(m.body).decode(), len(m.body), m.exchange,
                           m.routing_key, m.redelivered, properties_doc(m.properties),
                           left + len(taken) - i - 1)
                for i, m in enumerate(taken)]
        if not ack:
            q.requeue(taken)  # back in place, redelivered
            return rows
        stored = False
        for m in taken:
            stored |= m.stored is True  # (a non-persistent one: nothing to sync)
            self.broker.forget(q, m)
        q.delivered += len(taken)
        self.broker.counters["delivered"] += len(taken)
        self.broker.counters["acked"] += len(taken)
        if stored:
            await self._commit()
        return rows

    def operations(self) -> list[Operation]:
        return [
            Operation("amqp.publish", "publish a message to an exchange (payload in base64)",
                      lambda a: self.publish(
                          a.text("exchange", ""), a.text("routing_key", ""), _body(a),
                          persistent=a.flag("persistent", True),
                          properties=a.table("properties")), writes=True),
            Operation("amqp.get", "take messages from a queue's head (requeued unless ack)",
                      lambda a: self.get(a.text("queue", required=True),
                                         a.integer("count", 1, low=1, high=10_000),
                                         a.flag("ack")), writes=True),
        ]


def _properties(given: dict[str, Any], persistent: bool) -> spec.BasicProperties:
    unknown = sorted(set(given) - set(SETTABLE))
    if unknown:
        raise OperationError(f"unknown message properties {unknown} (known: "
                             f"{', '.join(SETTABLE)})", BAD_REQUEST)
    props = spec.BasicProperties(**given, delivery_mode=2 if persistent else 1)
    try:
        props.encode()  # (a wrongly typed value fails here, with its name)
    except Exception as exc:
        raise OperationError(f"bad message properties {given}: {exc}", BAD_REQUEST) from None
    return props


def _body(a: Args) -> bytes:
    try:
        return base64.b64decode(a.text("payload", ""), validate=True)
    except ValueError:
        raise OperationError("argument 'payload' must be base64", BAD_REQUEST) from None


__all__ = ["AmqpMessageOps", "AmqpPublished", "GotMessage"]
