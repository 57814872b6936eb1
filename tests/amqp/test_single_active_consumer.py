"""Single active consumer (``x-single-active-consumer``) with stock pika against a real
server, as RabbitMQ runs it (rabbitmq.com/docs/consumers): one consumer gets every
message; the next in registration order takes over when it cancels, its channel closes or
its connection goes, with the unacked messages it held.  ``oxiedge/amqp/selection.py``."""

from __future__ import annotations

from typing import Any

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from tests.amqp.conftest import params, wait_until

SAC = {"x-single-active-consumer": True}


def collector(got: list[tuple[str, bytes]], name: str) -> Any:
    return lambda _c, _m, _p, body: got.append((name, body))


def test_one_active_then_takeover_in_registration_order(conn: Any) -> None:
    setup = conn.channel()
    setup.queue_declare("sac", arguments=SAC)
    got: list[tuple[str, bytes]] = []
    chans = {name: conn.channel() for name in ("a", "b", "c")}
    for name, ch in chans.items():
        ch.basic_consume("sac", collector(got, name), auto_ack=True, consumer_tag=name)
    for i in range(3):
        setup.basic_publish("", "sac", b"%d" % i)
    wait_until(conn, lambda: len(got) == 3)
    assert {name for name, _b in got} == {"a"}
    chans["a"].basic_cancel("a")
    setup.basic_publish("", "sac", b"3")
    wait_until(conn, lambda: len(got) == 4)
    assert got[-1] == ("b", b"3")
    chans["b"].close()
    setup.basic_publish("", "sac", b"4")
    wait_until(conn, lambda: len(got) == 5)
    assert got[-1] == ("c", b"4")


def test_unacked_go_to_the_next_consumer(server: Any) -> None:
    first = pika.BlockingConnection(params(server.amqp_port))
    second = pika.BlockingConnection(params(server.amqp_port))
    setup = second.channel()
    setup.queue_declare("sac2", arguments=SAC)
    got: list[tuple[str, bytes]] = []
    ch1 = first.channel()
    ch1.basic_qos(prefetch_count=2)
    ch1.basic_consume("sac2", collector(got, "first"))
    ch2 = second.channel()
    ch2.basic_consume("sac2", collector(got, "second"), auto_ack=True)
    for i in range(4):
        setup.basic_publish("", "sac2", b"%d" % i)
    wait_until(first, lambda: len(got) == 2)
    second.process_data_events(time_limit=0.2)
    # The active consumer is at its prefetch: the others still get nothing.
    assert got == [("first", b"0"), ("first", b"1")]
    first.close()  # its two unacked go back; the second consumer takes over
    wait_until(second, lambda: len(got) == 6)
    assert got[2:] == [("second", b"0"), ("second", b"1"), ("second", b"2"),
                       ("second", b"3")]
    second.close()


def test_single_active_consumer_value_is_checked(conn: Any) -> None:
    with pytest.raises(ChannelClosedByBroker) as info:
        conn.channel().queue_declare("sacbad", arguments={"x-single-active-consumer": "yes"})
    assert info.value.reply_code == 406
    conn.channel().queue_declare("sacoff", arguments={"x-single-active-consumer": False})


def test_sac_survives_restart(start_server: Any) -> None:
    srv = start_server()
    c = pika.BlockingConnection(params(srv.amqp_port))
    c.channel().queue_declare("sac.dur", durable=True, arguments=SAC)
    c.close()
    srv.restart()
    c = pika.BlockingConnection(params(srv.amqp_port))
    got: list[tuple[str, bytes]] = []
    for name in ("x", "y"):
        c.channel().basic_consume("sac.dur", collector(got, name), auto_ack=True)
    setup = c.channel()
    for i in range(3):
        setup.basic_publish("", "sac.dur", b"%d" % i)
    wait_until(c, lambda: len(got) == 3)
    assert {name for name, _b in got} == {"x"}
    c.close()
