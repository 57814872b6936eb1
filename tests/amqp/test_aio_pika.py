"""Interop with aio-pika (asyncio; run with asyncio.run inside a sync test because the
project's pytest runs async tests under trio)."""

from __future__ import annotations

import asyncio
from typing import Any

import aio_pika
import pytest
from aio_pika.exceptions import ChannelClosed, DeliveryError


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


def url(server: Any) -> str:
    return f"amqp://guest:guest@127.0.0.1:{server.amqp_port}/"


def test_aio_pika_topic_publish_consume_ack(server: Any) -> None:
    async def main() -> None:
        conn = await aio_pika.connect(url(server))
        async with conn:
            ch = await conn.channel()  # publisher confirms on by default
            await ch.set_qos(prefetch_count=5)
            x = await ch.declare_exchange("aio.events", aio_pika.ExchangeType.TOPIC,
                                          durable=True)
            q = await ch.declare_queue("aio.q", durable=True)
            await q.bind(x, "sensor.*.reading")
            for i in range(30):
                await x.publish(aio_pika.Message(
                    b"r%d" % i, content_type="text/plain", correlation_id=f"c{i}",
                    headers={"seq": i}, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                    routing_key=f"sensor.{i % 3}.reading")
            got = []
            async with q.iterator() as it:
                async for msg in it:
                    async with msg.process():
                        got.append((msg.body, msg.correlation_id, msg.headers["seq"],
                                    msg.content_type, msg.routing_key))
                    if len(got) == 30:
                        break
            assert [g[0] for g in got] == [b"r%d" % i for i in range(30)]
            assert got[7] == (b"r7", "c7", 7, "text/plain", "sensor.1.reading")
            declared = await ch.declare_queue("aio.q", durable=True, passive=True)
            assert declared.declaration_result.message_count == 0

    run(main())


def test_aio_pika_mandatory_return_is_delivery_error(server: Any) -> None:
    async def main() -> None:
        async with await aio_pika.connect(url(server)) as conn:
            ch = await conn.channel(on_return_raises=True)
            with pytest.raises(DeliveryError) as info:
                await ch.default_exchange.publish(aio_pika.Message(b"x"),
                                                  routing_key="no-such-queue", mandatory=True)
            assert info.value.frame is not None

    run(main())


def test_aio_pika_get_nack_requeue_and_reject(server: Any) -> None:
    async def main() -> None:
        async with await aio_pika.connect(url(server)) as conn:
            ch = await conn.channel()
            q = await ch.declare_queue(exclusive=True)  # server-named
            assert q.name.startswith("amq.gen-")
            await ch.default_exchange.publish(aio_pika.Message(b"a"), routing_key=q.name)
            await ch.default_exchange.publish(aio_pika.Message(b"b"), routing_key=q.name)
            m1 = await q.get(timeout=5)
            assert m1.body == b"a" and not m1.redelivered
            await m1.nack(requeue=True)
            m1 = await q.get(timeout=5)
            assert m1.body == b"a" and m1.redelivered
            await m1.reject(requeue=False)
            m2 = await q.get(timeout=5)
            await m2.ack()
            assert await q.get(fail=False) is None

    run(main())


def test_aio_pika_channel_error_and_recovery(server: Any) -> None:
    async def main() -> None:
        async with await aio_pika.connect(url(server)) as conn:
            ch = await conn.channel()
            with pytest.raises(ChannelClosed):
                await ch.declare_queue("does-not-exist", passive=True)
            ch2 = await conn.channel()
            q = await ch2.declare_queue("after-error", auto_delete=True)
            await ch2.default_exchange.publish(aio_pika.Message(b"ok"), routing_key=q.name)
            msg = await q.get(timeout=5)
            assert msg.body == b"ok"
            await msg.ack()

    run(main())


def test_aio_pika_dead_letter_and_delivery_limit(server: Any) -> None:
    """dlx + quorum-queues "Poison Message Handling" through aio-pika: a message that
    keeps failing is redelivered with x-delivery-count, then dead-lettered."""

    async def main() -> None:
        conn = await aio_pika.connect(url(server))
        async with conn:
            ch = await conn.channel()
            dlq = await ch.declare_queue("aio.dlq", durable=True)
            q = await ch.declare_queue("aio.poison", durable=True, arguments={
                "x-queue-type": "quorum", "x-delivery-limit": 1,
                "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "aio.dlq"})
            await ch.default_exchange.publish(
                aio_pika.Message(b"bad", delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                routing_key="aio.poison")
            counts = []
            for _ in range(2):
                msg = await q.get(timeout=5)
                counts.append(msg.headers.get("x-delivery-count"))
                await msg.nack(requeue=True)
            assert counts == [None, 1]
            dead = await dlq.get(timeout=5)
            death: Any = dead.headers["x-death"][0]  # type: ignore[index]
            assert dead.body == b"bad" and death["reason"] == "delivery_limit"
            assert death["queue"] == "aio.poison" and death["count"] == 1
            await dead.ack()

    run(main())
