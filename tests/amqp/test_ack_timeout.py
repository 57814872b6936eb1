"""The delivery acknowledgement timeout (RabbitMQ's ``consumer_timeout``).

The sweep on an injected clock (no sleeping): a channel holding a delivery past its
timeout is closed with 406 and RabbitMQ's words, its messages requeued; acked deliveries
never count; ``x-consumer-timeout`` of the consumer beats the queue's, which beats the
broker's default; a basic.get delivery has the default.  Then once with pika against a
real server.  ``oxiedge/amqp/acktimeout.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pika
from pika.exceptions import ChannelClosedByBroker

from oxiedge.amqp import spec
from oxiedge.amqp.acktimeout import AckTimeouts, timed_out_text
from oxiedge.amqp.errors import AmqpError
from tests.amqp.conftest import params, wait_until
from tests.amqp.test_protocol import M, MemoryOutlet, opened, play, publish


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def closed_with(outlet: MemoryOutlet, channel: int, timeout_ms: int) -> bool:
    text = AmqpError(406, timed_out_text(channel, timeout_ms)).reply_text
    return M(channel, spec.ChannelClose(406, text, 0, 0)) in outlet.written


async def test_channel_closed_past_the_default_and_messages_requeued(tmp_path: Path) -> None:
    async with opened(tmp_path) as (svc, proto):
        clock = FakeClock()
        sweep = AckTimeouts(60, clock, svc.broker.counters)
        outlet = proto._outlet
        assert isinstance(outlet, MemoryOutlet)
        await play(svc, proto, M(1, spec.ChannelOpen()) + M(1, spec.QueueDeclare(queue="t"))
                   + M(1, spec.BasicConsume(queue="t", consumer_tag="c")))
        await play(svc, proto, publish(1, "t", b"slow") + publish(1, "t", b"fast"))
        await play(svc, proto, M(1, spec.BasicAck(2, False)))  # "fast" acked at once
        assert sweep.sweep([proto]) == 0  # marks the unacked one
        clock.now += 59
        assert sweep.sweep([proto]) == 0
        clock.now += 2
        assert sweep.sweep([proto]) == 1
        assert closed_with(outlet, 1, 60_000)
        assert proto.channels[1].closing
        q = svc.broker.queues["t"]
        assert [m.body for m in q.ready] == [b"slow"] and q.ready[0].redelivered
        assert svc.broker.counters["consumer_timeouts"] == 1


async def test_consumer_beats_queue_beats_default(tmp_path: Path) -> None:
    async with opened(tmp_path) as (svc, proto):
        clock = FakeClock()
        sweep = AckTimeouts(3600, clock, svc.broker.counters)
        outlet = proto._outlet
        assert isinstance(outlet, MemoryOutlet)
        args = {"x-consumer-timeout": 20_000}
        await play(svc, proto, M(1, spec.ChannelOpen()) + M(2, spec.ChannelOpen())
                   + M(3, spec.ChannelOpen())
                   + M(1, spec.QueueDeclare(queue="qt", arguments=args))
                   + M(1, spec.QueueDeclare(queue="plain"))
                   + M(1, spec.BasicConsume(queue="qt", consumer_tag="queue's")))
        await play(svc, proto, M(2, spec.BasicConsume(
            queue="qt", consumer_tag="own", arguments={"x-consumer-timeout": 5_000})))
        await play(svc, proto, publish(1, "qt", b"a") + publish(1, "qt", b"b")
                   + publish(1, "plain", b"g") + M(3, spec.BasicGet(queue="plain")))
        sweep.sweep([proto])
        assert sweep.interval <= 5_000 / 4000  # the smallest timeout in play sets the pace
        clock.now += 6
        assert sweep.sweep([proto]) == 1 and closed_with(outlet, 2, 5_000)
        clock.now += 15
        assert sweep.sweep([proto]) == 1 and closed_with(outlet, 1, 20_000)
        clock.now += 3000
        assert sweep.sweep([proto]) == 0  # the basic.get delivery: the default, 1 h
        clock.now += 700
        assert sweep.sweep([proto]) == 1 and closed_with(outlet, 3, 3_600_000)


async def test_no_default_and_invalid_consumer_timeout(tmp_path: Path) -> None:
    async with opened(tmp_path) as (svc, proto):
        clock = FakeClock()
        sweep = AckTimeouts(0, clock, svc.broker.counters)  # 0: no default timeout
        await play(svc, proto, M(1, spec.ChannelOpen()) + M(1, spec.QueueDeclare(queue="n"))
                   + M(1, spec.BasicConsume(queue="n", consumer_tag="c"))
                   + publish(1, "n", b"x"))
        sweep.sweep([proto])
        clock.now += 10 ** 6
        assert sweep.sweep([proto]) == 0
        out, _ = await play(svc, proto, M(1, spec.BasicConsume(
            queue="n", consumer_tag="bad", arguments={"x-consumer-timeout": 0})))
        assert out.startswith(M(1, spec.ChannelClose(
            406, "PRECONDITION_FAILED - invalid arg 'x-consumer-timeout' for basic.consume: 0",
            60, 20))[:11])


def test_pika_consumer_channel_closed_with_406(start_server: Any) -> None:
    srv = start_server("--amqp-consumer-timeout", "0.5")
    conn = pika.BlockingConnection(params(srv.amqp_port))
    setup = conn.channel()
    setup.queue_declare("slowq")
    setup.basic_publish("", "slowq", b"held")
    ch = conn.channel()
    got: list[bytes] = []
    ch.basic_consume("slowq", lambda _c, _m, _p, body: got.append(body))  # never acks
    reasons: list[Any] = []
    ch._impl.add_on_close_callback(lambda _c, reason: reasons.append(reason))
    wait_until(conn, lambda: bool(reasons))  # (pika closes a consuming channel quietly)
    assert isinstance(reasons[0], ChannelClosedByBroker)
    assert reasons[0].reply_code == 406
    assert "delivery acknowledgement on channel" in reasons[0].reply_text
    assert got == [b"held"] and ch.is_closed
    method, _props, body = setup.basic_get("slowq", auto_ack=True)
    assert body == b"held" and method.redelivered
    status = json.loads(srv.cli("status", "--json").stdout)["amqp"]
    assert status["consumer_timeouts"] == 1 and status["consumer_timeout_s"] == 0.5
    conn.close()
