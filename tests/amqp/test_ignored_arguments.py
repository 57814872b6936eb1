"""Queue arguments RabbitMQ accepts and ignores on one node (``x-queue-mode: lazy`` since
3.12, leader placement, quorum replication sizes): accepted with RabbitMQ's value checks,
kept with the queue (re-declares compare them, restarts keep them) and shown, changing
nothing.  docs/rabbitmq-semantics.md, "Accepted and ignored"."""

from __future__ import annotations

from typing import Any

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from tests.amqp.conftest import bodies, cli_rows, params

IGNORED = {
    "x-queue-mode": "lazy",
    "x-queue-version": 2,
    "x-queue-master-locator": "min-masters",
    "x-queue-leader-locator": "client-local",
    "x-max-in-memory-length": 10,
    "x-max-in-memory-bytes": 4096,
}


def test_lazy_queue_is_a_plain_queue(conn: Any) -> None:
    ch = conn.channel()
    ch.queue_declare("lazy1", arguments={"x-queue-mode": "lazy"})
    ch.queue_declare("lazy1", arguments={"x-queue-mode": "lazy"})  # equivalent
    for i in range(3):
        ch.basic_publish("", "lazy1", b"m%d" % i)
    assert bodies(ch, "lazy1") == [b"m0", b"m1", b"m2"]
    ch.queue_declare("dflt", arguments={"x-queue-mode": "default"})


def test_quorum_sizes_accepted(conn: Any) -> None:
    ch = conn.channel()
    ch.queue_declare("qsize", durable=True, arguments={
        "x-queue-type": "quorum", "x-quorum-initial-group-size": 3,
        "x-quorum-target-group-size": 3})


@pytest.mark.parametrize("args", [
    {"x-queue-mode": "eager"},
    {"x-queue-version": 3},
    {"x-queue-leader-locator": "nearest"},
    {"x-quorum-initial-group-size": 0},
    {"x-max-in-memory-length": -1},
])
def test_invalid_values_are_406(conn: Any, args: dict[str, Any]) -> None:
    with pytest.raises(ChannelClosedByBroker) as info:
        conn.channel().queue_declare("badlazy", arguments=args)
    assert info.value.reply_code == 406


def test_redeclare_must_match(conn: Any) -> None:
    ch = conn.channel()
    ch.queue_declare("lazy2", arguments={"x-queue-mode": "lazy"})
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.queue_declare("lazy2", arguments={"x-queue-mode": "default"})
    assert info.value.reply_code == 406


def test_arguments_survive_restart_and_are_shown(start_server: Any) -> None:
    srv = start_server()
    c = pika.BlockingConnection(params(srv.amqp_port))
    ch = c.channel()
    ch.queue_declare("keep", durable=True, arguments=IGNORED)
    ch.basic_publish("", "keep", b"x", pika.BasicProperties(delivery_mode=2))
    c.close()
    srv.restart()
    row = next(r for r in cli_rows(srv, "queues") if r["name"] == "keep")
    assert row["arguments"] == IGNORED
    c = pika.BlockingConnection(params(srv.amqp_port))
    ch = c.channel()
    ch.queue_declare("keep", durable=True, arguments=IGNORED)  # still equivalent
    assert bodies(ch, "keep") == [b"x"]
    c.close()
