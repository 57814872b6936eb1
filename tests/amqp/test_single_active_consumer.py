"""Single active consumer (``x-single-active-consumer``) with stock pika against a real
server, as RabbitMQ runs it (rabbitmq.com/docs/consumers): one consumer gets every
message; the next in order takes over when it cancels, its channel closes or
its connection goes, with the unacked messages it held; with consumer priorities the highest
is active (RabbitMQ 3.13+).  ``oxiedge/amqp/selection.py``."""

from __future__ import annotations

import http.client
import json
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


def _consumer_rows(server: Any) -> dict[str, dict[str, Any]]:
    rows = [json.loads(line) for line in
            server.cli("consumers", "--json").stdout.splitlines() if line.strip()]
    return {r["consumer_tag"]: r for r in rows}


def test_the_highest_priority_is_active_and_takes_over_once_settled(
        start_server: Any) -> None:
    """RabbitMQ 3.13+: a consumer of a higher priority than the active one takes over, but
    only after the active one's unacked deliveries are settled; the state shows in
    ``oxiedge consumers`` and in the management API's consumer objects."""
    server = start_server("--http-port", "0")
    conn = pika.BlockingConnection(params(server.amqp_port))
    setup = conn.channel()
    setup.queue_declare("sacp", arguments=SAC)
    got: list[tuple[str, bytes, int]] = []
    low = conn.channel()
    low.basic_consume("sacp", lambda ch, m, _p, body: got.append(("low", body, m.delivery_tag)),
                      consumer_tag="low")
    for i in range(2):
        setup.basic_publish("", "sacp", b"%d" % i)
    wait_until(conn, lambda: len(got) == 2)
    high = conn.channel()
    high.basic_consume("sacp", lambda _c, _m, _p, body: got.append(("high", body, 0)),
                       auto_ack=True, consumer_tag="high", arguments={"x-priority": 5})
    for i in range(2, 4):
        setup.basic_publish("", "sacp", b"%d" % i)
    conn.process_data_events(time_limit=0.3)
    assert [g[0] for g in got] == ["low", "low"]  # neither gets more before the settle
    rows = _consumer_rows(server)
    assert (rows["low"]["activity_status"], rows["low"]["active"]) == ("single_active", True)
    assert (rows["high"]["activity_status"], rows["high"]["priority"]) == ("waiting", 5)
    low.basic_ack(got[1][2], multiple=True)
    wait_until(conn, lambda: len(got) == 4)
    assert got[2:] == [("high", b"2", 0), ("high", b"3", 0)]
    rows = _consumer_rows(server)
    assert rows["high"]["activity_status"] == "single_active"
    assert (rows["low"]["activity_status"], rows["low"]["active"]) == ("waiting", False)
    api = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    api.request("GET", "/api/consumers")
    listed = {c["consumer_tag"]: c for c in json.loads(api.getresponse().read())}
    assert (listed["high"]["active"], listed["high"]["activity_status"]) == \
        (True, "single_active")
    assert listed["high"]["arguments"] == {"x-priority": 5}
    assert (listed["low"]["active"], listed["low"]["activity_status"]) == (False, "waiting")
    conn.close()


def test_takeover_goes_to_the_highest_priority_left(conn: Any) -> None:
    setup = conn.channel()
    setup.queue_declare("sacq", arguments=SAC)
    got: list[tuple[str, bytes]] = []
    chans = {}
    for name, prio in (("a", 0), ("b", 1), ("c", 3), ("d", 1)):
        chans[name] = ch = conn.channel()
        ch.basic_consume("sacq", collector(got, name), auto_ack=True, consumer_tag=name,
                         arguments={"x-priority": prio})
    setup.basic_publish("", "sacq", b"0")
    wait_until(conn, lambda: len(got) == 1)
    assert got == [("c", b"0")]
    chans["c"].basic_cancel("c")
    setup.basic_publish("", "sacq", b"1")
    wait_until(conn, lambda: len(got) == 2)
    assert got[-1] == ("b", b"1")  # priority 1, registered before d
    chans["b"].close()
    setup.basic_publish("", "sacq", b"2")
    wait_until(conn, lambda: len(got) == 3)
    assert got[-1] == ("d", b"2")


class _Candidate:
    def __init__(self, name: str, priority: int = 0) -> None:
        self.name, self.priority, self.unacked, self.credit = name, priority, 0, True

    def has_credit(self) -> bool:
        return self.credit


def test_selector_table() -> None:
    """``selection.SingleActive`` without a socket: who is active as consumers come, hold
    deliveries, settle and go."""
    from oxiedge.amqp.selection import SingleActive, activity, insert_ranked

    sac = SingleActive()
    consumers: list[_Candidate] = []
    a, b, c = _Candidate("a"), _Candidate("b", 5), _Candidate("c", 5)
    insert_ranked(consumers, a)
    assert sac.pick(consumers) is a
    a.unacked = 2
    insert_ranked(consumers, b)
    assert sac.pick(consumers) is None  # b waits for a's deliveries to settle
    assert [activity(sac, x, consumers) for x in (a, b)] == ["single_active", "waiting"]
    a.unacked = 0
    assert sac.pick(consumers) is b
    insert_ranked(consumers, c)  # same priority, later: b stays
    assert sac.pick(consumers) is b
    b.credit = False
    assert sac.pick(consumers) is None  # the queue waits for the active one
    consumers.remove(b)
    sac.removed(b)
    assert sac.pick(consumers) is c
    assert activity(object(), a, consumers) == "up"
