"""RabbitMQ's authorisation of AMQP methods, checked before a method's handler runs.

What each method needs (RabbitMQ's access-control table; ``Grants.amqp`` matches the
user's ``configure`` / ``write`` / ``read`` regexp of the vhost against the name):

===================================  ==================  ================  ==============
method                               configure           write             read
===================================  ==================  ================  ==============
exchange.declare (passive=false)     exchange
exchange.declare with an AE                              the AE            exchange
exchange.delete                      exchange
queue.declare (passive=false)        queue
queue.declare with a DLX                                 the DLX           queue
queue.delete                         queue
queue.bind / queue.unbind                                queue             exchange
exchange.bind / exchange.unbind                          destination       source
queue.purge                                                                queue
basic.consume / basic.get                                                  queue
basic.publish                                            exchange
===================================  ==================  ================  ==============

Passive declares need nothing. The default exchange is ``amq.default`` for the check, a
server-named queue (``queue.declare`` with an empty name) is checked as a fresh
``amq.gen-…`` name (a regexp cannot tell one random suffix from another). On a topic
exchange, topic permissions apply too: the ``write`` regexp to the routing key of a
publish, the ``read`` regexp to the binding key of a (queue or exchange) bind/unbind; on
``amq.topic`` the MQTT ACLs as well (``access/grants.py``). A refusal is a channel error
403 ACCESS_REFUSED worded like RabbitMQ's.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any, Protocol

from oxiedge.amqp import spec
from oxiedge.amqp.constants import ACCESS_REFUSED
from oxiedge.amqp.errors import AmqpError

if TYPE_CHECKING:
    from oxiedge.access.grants import Grants
    from oxiedge.access.rules import PermissionStore
    from oxiedge.amqp.broker import Broker
    from oxiedge.amqp.channel import Channel
    from oxiedge.amqp.exchanges import Exchange


class Principal(Protocol):
    """What the checks need of a connection (``AmqpProtocol`` is one)."""

    grants: Grants | None
    perms: PermissionStore
    broker: Broker

    @property
    def user(self) -> str:
        """The connection's user name."""


def _refuse(conn: Principal, text: str) -> AmqpError:
    conn.perms.counters["amqp_access_refused"] += 1
    return AmqpError(ACCESS_REFUSED, f"{text} refused for user '{conn.user}'")


def need(conn: Principal, op: str, kind: str, name: str) -> None:
    """Raise 403 unless the user has ``op`` on the ``kind`` (queue/exchange) ``name``."""
    grants = conn.grants
    if grants is not None and not grants.amqp(op, name):
        shown = name or "amq.default"
        raise _refuse(conn, f"access to {kind} '{shown}' in vhost '{grants.vhost}'")


def _topic_exchange(conn: Principal, name: str) -> bool:
    x = conn.broker.exchanges.get(name)
    return x is not None and x.type == "topic"


def need_topic_bind(conn: Principal, exchange: str, key: str) -> None:
    grants = conn.grants
    if grants is not None and _topic_exchange(conn, exchange) \
            and not grants.topic_bind(exchange, key):
        raise _refuse(conn, f"read access to topic '{key}' in exchange '{exchange}' in vhost "
                            f"'{grants.vhost}'")


def check_publish(conn: Principal, x: Exchange, routing_key: str) -> None:
    """basic.publish: write on the exchange, and topic write on a topic exchange."""
    need(conn, "write", "exchange", x.name)
    grants = conn.grants
    if grants is not None and x.type == "topic" and not grants.topic_publish(x.name,
                                                                            routing_key):
        raise _refuse(conn, f"write access to topic '{routing_key}' in exchange '{x.name}' in "
                            f"vhost '{grants.vhost}'")


def check_method(ch: Channel, m: spec.Method) -> None:
    """Raise 403 if the connection's user may not run ``m`` (only called while rules exist)."""
    check = _CHECKS.get(type(m))
    if check is not None:
        check(ch.conn, ch, m)


def _exchange_declare(conn: Principal, ch: Channel, m: Any) -> None:
    if m.passive:
        return
    need(conn, "configure", "exchange", m.exchange)
    ae = (m.arguments or {}).get("alternate-exchange")
    if isinstance(ae, bytes):
        ae = ae.decode("utf-8", "replace")
    if isinstance(ae, str):
        need(conn, "write", "exchange", ae)
        need(conn, "read", "exchange", m.exchange)


def _exchange_delete(conn: Principal, ch: Channel, m: Any) -> None:
    need(conn, "configure", "exchange", m.exchange)


def _exchange_bind(conn: Principal, ch: Channel, m: Any) -> None:
    need(conn, "write", "exchange", m.destination)
    need(conn, "read", "exchange", m.source)
    need_topic_bind(conn, m.source, m.routing_key)


def _queue_declare(conn: Principal, ch: Channel, m: Any) -> None:
    if m.passive:
        return
    name = m.queue or "amq.gen-" + secrets.token_urlsafe(16)
    need(conn, "configure", "queue", name)
    dlx = (m.arguments or {}).get("x-dead-letter-exchange")
    if isinstance(dlx, bytes):
        dlx = dlx.decode("utf-8", "replace")
    if isinstance(dlx, str):
        need(conn, "write", "exchange", dlx)
        need(conn, "read", "queue", name)


def _queue_name(ch: Channel, m: Any) -> str:
    return str(m.queue or ch.last_queue)


def _queue_delete(conn: Principal, ch: Channel, m: Any) -> None:
    need(conn, "configure", "queue", _queue_name(ch, m))


def _queue_bind(conn: Principal, ch: Channel, m: Any) -> None:
    need(conn, "write", "queue", _queue_name(ch, m))
    need(conn, "read", "exchange", m.exchange)
    need_topic_bind(conn, m.exchange, m.routing_key)


def _queue_read(conn: Principal, ch: Channel, m: Any) -> None:
    need(conn, "read", "queue", _queue_name(ch, m))


_CHECKS: dict[type[spec.Method], Any] = {
    spec.ExchangeDeclare: _exchange_declare,
    spec.ExchangeDelete: _exchange_delete,
    spec.ExchangeBind: _exchange_bind,
    spec.ExchangeUnbind: _exchange_bind,
    spec.QueueDeclare: _queue_declare,
    spec.QueueDelete: _queue_delete,
    spec.QueueBind: _queue_bind,
    spec.QueueUnbind: _queue_bind,
    spec.QueuePurge: _queue_read,
    spec.BasicConsume: _queue_read,
    spec.BasicGet: _queue_read,
}
