"""AMQP permissions (RabbitMQ's configure/write/read and topic permissions) with pika."""

from __future__ import annotations

from collections.abc import Callable

import pika
import pika.exceptions
import pytest

from tests.conftest import ServerProcess
from tests.permissions.conftest import allowed, amqp, refused, rules

Serve = Callable[..., ServerProcess]

RULES = rules({
    "worker": {"vhosts": {"/": {"configure": r"^(jobs|amq\.gen-.*)$",
                                "write": r"^(jobs|amq\.gen-.*|amq\.default|work\.x)$",
                                "read": r"^(jobs|amq\.gen-.*|work\.x)$"}}},
    # configure on exchanges only: the alternate-exchange rule (write on the AE, read on it)
    "builder": {"vhosts": {"/": {"configure": r"^b\.", "write": r"^(ae\.ok|b\.)",
                                 "read": r"^b\.ok$"}}},
    "outsider": {"vhosts": {"/other": {"configure": ".*", "write": ".*", "read": ".*"}}},
    "t": {"topics": {"/": {"events": {"write": r"^t\.{username}\.", "read": r"^t\."}}}},
    "dev": {"topics": {"/": {"events": {"write": r"^dev\.{client_id}\.", "read": ".*"}}}},
})


def test_each_method_needs_its_permission(serve_with: Serve) -> None:
    server = serve_with(["admin", "worker", "outsider", "t", "builder"], RULES)
    port = server.amqp_port
    with amqp(port, "admin") as admin:  # no rules for admin: everything, as before
        ch = admin.channel()
        ch.queue_declare("other")
        ch.exchange_declare("work.x", "direct")
        ch.exchange_declare("events", "topic")
    with amqp(port, "worker") as w:
        # queue.declare: configure on the queue (a server-named one is amq.gen-*)
        allowed(w, lambda ch: ch.queue_declare("jobs", durable=True))
        assert allowed(w, lambda ch: ch.queue_declare("", exclusive=True)).method.queue \
            .startswith("amq.gen-")
        text = refused(w, lambda ch: ch.queue_declare("other2"))
        assert text == "ACCESS_REFUSED - access to queue 'other2' in vhost '/' refused for " \
                       "user 'worker'"
        allowed(w, lambda ch: ch.queue_declare("other", passive=True))  # passive: nothing
        # queue.declare with a DLX: write on the DLX
        refused(w, lambda ch: ch.queue_declare("", exclusive=True,
                                               arguments={"x-dead-letter-exchange": "amq.fanout"}))
        allowed(w, lambda ch: ch.queue_declare("", exclusive=True,
                                               arguments={"x-dead-letter-exchange": "work.x"}))
        # exchange.declare / delete: configure on the exchange
        refused(w, lambda ch: ch.exchange_declare("mine", "fanout"))
        allowed(w, lambda ch: ch.exchange_declare("work.x", "direct", passive=True))
        refused(w, lambda ch: ch.exchange_delete("work.x"))
        # exchange.bind / unbind: write on the destination, read on the source
        refused(w, lambda ch: ch.exchange_bind("work.x", "amq.direct", "k"))  # read amq.direct
        refused(w, lambda ch: ch.exchange_bind("amq.direct", "work.x", "k"))  # write amq.direct
        refused(w, lambda ch: ch.exchange_unbind("amq.direct", "work.x", "k"))
        # queue.bind: write on the queue, read on the exchange
        allowed(w, lambda ch: ch.queue_bind("jobs", "work.x", "k"))
        refused(w, lambda ch: ch.queue_bind("jobs", "amq.direct", "k"))
        refused(w, lambda ch: ch.queue_bind("other", "work.x", "k"))
        refused(w, lambda ch: ch.queue_unbind("other", "work.x", "k"))
        # basic.publish: write on the exchange (the default exchange is amq.default)
        allowed(w, lambda ch: ch.basic_publish("", "jobs", b"via default"))
        allowed(w, lambda ch: ch.basic_publish("work.x", "k", b"via work.x"))
        text = refused(w, lambda ch: ch.basic_publish("amq.fanout", "", b"no"))
        assert "access to exchange 'amq.fanout'" in text
        # basic.get / consume / purge: read on the queue; delete: configure
        ch = w.channel()
        bodies = [ch.basic_get("jobs", auto_ack=True)[2] for _ in range(2)]
        assert sorted(bodies) == [b"via default", b"via work.x"]
        refused(w, lambda ch: ch.basic_get("other"))
        refused(w, lambda ch: ch.basic_consume("other", lambda *a: None))
        refused(w, lambda ch: ch.queue_purge("other"))
        allowed(w, lambda ch: ch.queue_purge("jobs"))
        refused(w, lambda ch: ch.queue_delete("other"))
        allowed(w, lambda ch: ch.queue_delete("jobs"))
    with amqp(port, "admin") as admin:
        admin.channel().exchange_declare("ae.ok", "fanout")
    with amqp(port, "builder") as b:
        # exchange.declare with an alternate exchange: write on the AE, read on the exchange
        allowed(b, lambda ch: ch.exchange_declare(
            "b.ok", "direct", arguments={"alternate-exchange": "ae.ok"}))
        refused(b, lambda ch: ch.exchange_declare(  # no read on b.other
            "b.other", "direct", arguments={"alternate-exchange": "ae.ok"}))
        refused(b, lambda ch: ch.exchange_declare(  # no write on amq.fanout
            "b.ok", "direct", arguments={"alternate-exchange": "amq.fanout"}))
        allowed(b, lambda ch: ch.exchange_declare("b.plain", "fanout"))
        allowed(b, lambda ch: ch.exchange_delete("b.plain"))
    # permissions only in another vhost: '/' is refused at connection.open (530)
    with pytest.raises((pika.exceptions.ProbableAccessDeniedError,
                        pika.exceptions.ConnectionClosedByBroker)) as info:
        amqp(port, "outsider")
    assert "access to vhost '/' refused for user 'outsider'" in str(info.value)


def test_topic_permissions_on_a_topic_exchange(serve_with: Serve) -> None:
    server = serve_with(["admin", "t", "dev"], RULES)
    port = server.amqp_port
    with amqp(port, "admin") as admin:
        admin.channel().exchange_declare("events", "topic")
    with amqp(port, "t") as t:
        q = allowed(t, lambda ch: ch.queue_declare("", exclusive=False)).method.queue
        # write regexp against the routing key ({username} expanded), read against the binding
        allowed(t, lambda ch: ch.basic_publish("events", "t.t.ok", b"1"))
        text = refused(t, lambda ch: ch.basic_publish("events", "t.other.x", b"2"))
        assert text == ("ACCESS_REFUSED - write access to topic 't.other.x' in exchange "
                        "'events' in vhost '/' refused for user 't'")
        allowed(t, lambda ch: ch.queue_bind(q, "events", "t.#"))
        text = refused(t, lambda ch: ch.queue_bind(q, "events", "#"))
        assert "read access to topic '#' in exchange 'events'" in text
        refused(t, lambda ch: ch.queue_unbind(q, "events", "x.#"))
        allowed(t, lambda ch: ch.basic_publish("events", "t.t.seen", b"3"))
        got = allowed(t, lambda ch: ch.basic_get(q, auto_ack=True))
        assert got[2] == b"3"
        # a non-topic exchange has no topic permissions
        allowed(t, lambda ch: ch.basic_publish("amq.direct", "anything", b"4"))
    # {client_id}: the AMQP client property client_id
    params = pika.ConnectionParameters(
        "127.0.0.1", port, credentials=pika.PlainCredentials("dev", "pw-of-dev"),
        client_properties={"client_id": "d7"}, connection_attempts=1, socket_timeout=5)
    with pika.BlockingConnection(params) as dev:
        allowed(dev, lambda ch: ch.basic_publish("events", "dev.d7.temp", b"5"))
        refused(dev, lambda ch: ch.basic_publish("events", "dev.d8.temp", b"6"))
