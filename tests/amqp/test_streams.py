"""Stream queues with pika against a real server: declare, offsets, acks, refusals."""

from __future__ import annotations

import datetime
import time
from typing import Any

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

from tests.amqp.conftest import cli_rows, connect

STREAM = {"x-queue-type": "stream"}


def declare(ch: Any, name: str, **args: Any) -> Any:
    return ch.queue_declare(name, durable=True, arguments={**STREAM, **args})


def publish(ch: Any, queue: str, n: int, start: int = 0, exchange: str = "") -> None:
    """``n`` messages m<start>... , confirmed (the channel is in confirm mode)."""
    for i in range(start, start + n):
        ch.basic_publish(exchange, queue, b"m%d" % i,
                         pika.BasicProperties(delivery_mode=2, headers={"i": i}))


def take(conn: Any, queue: str, n: int, offset: Any = None, prefetch: int = 10,
         timeout: float = 5.0, ack: bool = True) -> list[tuple[int, bytes, dict[str, Any]]]:
    """Consume ``n`` messages from ``offset`` on a new channel: ``(offset, body, headers)``."""
    ch = conn.channel()
    ch.basic_qos(prefetch_count=prefetch)
    args = {} if offset is None else {"x-stream-offset": offset}
    got: list[tuple[int, bytes, dict[str, Any]]] = []
    if n:
        for m, p, body in ch.consume(queue, arguments=args, inactivity_timeout=timeout):
            if m is None:
                break
            got.append((p.headers["x-stream-offset"], body, p.headers))
            assert not m.redelivered
            if ack:
                ch.basic_ack(m.delivery_tag)
            if len(got) >= n:
                break
    else:  # nothing may come
        for m, _p, _b in ch.consume(queue, arguments=args, inactivity_timeout=0.7):
            assert m is None, "a message came"
            break
    ch.close()
    return got


def offsets(got: list[tuple[int, bytes, dict[str, Any]]]) -> list[int]:
    return [g[0] for g in got]


@pytest.fixture
def filled(conn: Any, request: pytest.FixtureRequest) -> str:
    """A stream named after the test holding m0..m9 at offsets 0..9."""
    name = "s-" + request.node.name
    ch = conn.channel()
    ch.confirm_delivery()
    declare(ch, name)
    publish(ch, name, 10)
    ch.close()
    return name


def test_first_reads_everything_in_order_with_offset_header(conn: Any, filled: str) -> None:
    got = take(conn, filled, 10, "first")
    assert offsets(got) == list(range(10))
    assert [g[1] for g in got] == [b"m%d" % i for i in range(10)]
    assert all(g[2]["i"] == g[0] for g in got)  # the publisher's headers are kept


def test_each_offset_spec(conn: Any, filled: str) -> None:
    assert offsets(take(conn, filled, 3, 5)) == [5, 6, 7]
    assert offsets(take(conn, filled, 3, -4)) == [0, 1, 2]  # below the first: the first
    assert offsets(take(conn, filled, 1, "last")) == [9]  # (each publish its own round)
    assert take(conn, filled, 0, "next") == []
    assert take(conn, filled, 0) == []  # next is the default
    assert take(conn, filled, 0, 500) == []  # past the end: the next one
    assert offsets(take(conn, filled, 2, "30m")) == [0, 1]
    an_hour_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    assert offsets(take(conn, filled, 2, an_hour_ago)) == [0, 1]
    future = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    assert take(conn, filled, 0, future) == []


def test_timestamp_between_batches(conn: Any, filled: str) -> None:
    time.sleep(1.5)  # (timestamps have one-second resolution)
    cut = datetime.datetime.now(datetime.UTC)
    time.sleep(1.1)
    ch = conn.channel()
    ch.confirm_delivery()
    publish(ch, filled, 3, 10)
    assert offsets(take(conn, filled, 3, cut)) == [10, 11, 12]


def test_next_and_last_see_new_messages(conn: Any, filled: str) -> None:
    ch = conn.channel()
    ch.basic_qos(prefetch_count=5)
    got: list[int] = []
    ch.basic_consume(filled, lambda c, m, p, b: (got.append(p.headers["x-stream-offset"]),
                                                 c.basic_ack(m.delivery_tag)),
                     arguments={"x-stream-offset": "next"})
    pub = conn.channel()
    pub.confirm_delivery()
    publish(pub, filled, 3, 10)
    deadline = time.monotonic() + 5
    while len(got) < 3 and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.05)
    assert got == [10, 11, 12]


def test_two_consumers_at_different_offsets_and_acks_move_nothing(conn: Any,
                                                                  filled: str) -> None:
    a = take(conn, filled, 10, "first")
    b = take(conn, filled, 4, 6)
    assert offsets(a) == list(range(10))
    assert offsets(b) == [6, 7, 8, 9]
    assert offsets(take(conn, filled, 10, "first")) == list(range(10))  # acks removed none
    ch = conn.channel()
    assert ch.queue_declare(filled, passive=True).method.consumer_count == 0


def test_prefetch_is_the_credit(conn: Any, filled: str) -> None:
    """Without acks a consumer gets exactly its prefetch; each ack gives one more."""
    ch = conn.channel()
    ch.basic_qos(prefetch_count=3)
    got: list[Any] = []
    ch.basic_consume(filled, lambda c, m, p, b: got.append(m),
                     arguments={"x-stream-offset": "first"})
    conn.process_data_events(time_limit=0.7)
    assert len(got) == 3
    ch.basic_ack(got[0].delivery_tag)
    conn.process_data_events(time_limit=0.7)
    assert len(got) == 4


def test_consumer_restart_resumes_from_its_offset(conn: Any, filled: str) -> None:
    first = take(conn, filled, 4, "first")
    resume = first[-1][0] + 1
    assert offsets(take(conn, filled, 6, resume)) == list(range(4, 10))


def test_bridge_publish_through_amq_topic(conn: Any, request: pytest.FixtureRequest) -> None:
    name = "s-topic-" + request.node.name
    ch = conn.channel()
    ch.confirm_delivery()
    declare(ch, name)
    ch.queue_bind(name, "amq.topic", "sensors.#")
    for i in range(3):
        ch.basic_publish("amq.topic", f"sensors.t{i}", b"r%d" % i,
                         pika.BasicProperties(delivery_mode=1))  # transient too
    got = take(conn, name, 3, "first")
    assert [g[1] for g in got] == [b"r0", b"r1", b"r2"]


def test_declare_ok_and_row(server: Any, conn: Any, filled: str) -> None:
    rows = {r["name"]: r for r in cli_rows(server, "queues")}
    row = rows[filled]
    assert row["type"] == "stream"
    assert row["ready"] == 10 and row["first_offset"] == 0 and row["next_offset"] == 10
    assert row["durable"] and row["segments"] == 1
    ok = conn.channel().queue_declare(filled, passive=True).method
    assert ok.message_count == 10  # the messages kept, as RabbitMQ


@pytest.mark.parametrize(("flags", "prop"), [({"durable": False}, "non-durable"),
                                             ({"exclusive": True}, "exclusive-owner"),
                                             ({"auto_delete": True}, "auto-delete")])
def test_stream_must_be_durable_shared(conn: Any, flags: dict[str, bool], prop: str) -> None:
    ch = conn.channel()
    kw: dict[str, Any] = {"durable": True, **flags}
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.queue_declare("s-bad-" + prop, arguments=STREAM, **kw)
    assert err.value.reply_code == 406 and f"'{prop}'" in err.value.reply_text


@pytest.mark.parametrize(("arg", "value"), [
    ("x-max-age", "bogus"), ("x-max-age", 5), ("x-max-age", "0s"), ("x-max-age", "10"),
    ("x-max-length-bytes", -1), ("x-max-length-bytes", "a"), ("x-max-length", 5),
    ("x-message-ttl", 5), ("x-dead-letter-exchange", "x"), ("x-overflow", "reject-publish"),
    ("x-max-priority", 5), ("x-expires", 1000), ("x-single-active-consumer", True),
    ("x-delivery-limit", 3), ("x-stream-max-segment-size-bytes", 0)])
def test_bad_declare_arguments_name_the_argument(conn: Any, arg: str, value: Any) -> None:
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as err:
        declare(ch, f"s-badarg-{arg}", **{arg: value})
    assert err.value.reply_code == 406 and f"'{arg}'" in err.value.reply_text


def test_accepted_declare_arguments(conn: Any) -> None:
    ch = conn.channel()
    declare(ch, "s-args", **{"x-max-age": "7D", "x-max-length-bytes": 1 << 30,
                             "x-stream-max-segment-size-bytes": 1 << 20,
                             "x-initial-cluster-size": 1,
                             "x-queue-leader-locator": "client-local"})
    declare(ch, "s-args", **{"x-max-age": "7D", "x-max-length-bytes": 1 << 30,
                             "x-stream-max-segment-size-bytes": 1 << 20,
                             "x-initial-cluster-size": 1,
                             "x-queue-leader-locator": "client-local"})
    # a re-declare without the type takes the stream's (RabbitMQ)
    ch.queue_declare("s-args", durable=True, arguments={
        "x-max-age": "7D", "x-max-length-bytes": 1 << 30,
        "x-stream-max-segment-size-bytes": 1 << 20, "x-initial-cluster-size": 1,
        "x-queue-leader-locator": "client-local"})
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.queue_declare("s-args", durable=True, arguments={"x-queue-type": "classic"})
    assert err.value.reply_code == 406


@pytest.mark.parametrize(("offset", "code"), [("bogus", 406), ("0s", 406), ("10", 406),
                                              ("1X", 406)])
def test_bad_offset_is_406_naming_it(conn: Any, filled: str, offset: Any, code: int) -> None:
    ch = conn.channel()
    ch.basic_qos(prefetch_count=10)
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.basic_consume(filled, lambda *a: None, arguments={"x-stream-offset": offset})
    assert err.value.reply_code == code and "'x-stream-offset'" in err.value.reply_text


def test_consumer_needs_prefetch(conn: Any, filled: str) -> None:
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.basic_consume(filled, lambda *a: None)
    assert err.value.reply_code == 406 and "prefetch" in err.value.reply_text
    ch = conn.channel()
    ch.basic_qos(prefetch_count=10, global_qos=True)  # a channel-wide one does not count
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.basic_consume(filled, lambda *a: None)
    assert err.value.reply_code == 406
    ch = conn.channel()
    ch.basic_qos(prefetch_count=10)
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.basic_consume(filled, lambda *a: None, arguments={"x-priority": 3})
    assert err.value.reply_code == 406 and "'x-priority'" in err.value.reply_text


@pytest.mark.parametrize("what", ["auto_ack", "get", "purge"])
def test_refused_like_rabbitmq(server: Any, filled: str, what: str) -> None:
    conn = connect(server)
    ch = conn.channel()
    ch.basic_qos(prefetch_count=10)
    with pytest.raises(ConnectionClosedByBroker) as err:
        if what == "auto_ack":
            ch.basic_consume(filled, lambda *a: None, auto_ack=True)
        elif what == "get":
            ch.basic_get(filled)
        else:
            ch.queue_purge(filled)
    assert err.value.reply_code == 540
    assert "not supported by stream queues" in err.value.reply_text


def test_delete_stream(conn: Any, filled: str) -> None:
    ch = conn.channel()
    ch.queue_delete(filled)
    declare(ch, filled)
    assert ch.queue_declare(filled, passive=True).method.message_count == 0
    assert take(conn, filled, 0, "first") == []


def test_dead_letters_land_in_a_stream(conn: Any) -> None:
    ch = conn.channel()
    ch.exchange_declare("s-dlx", "fanout", durable=True)
    declare(ch, "s-dead")
    ch.queue_bind("s-dead", "s-dlx")
    ch.queue_declare("s-work", durable=True, arguments={"x-dead-letter-exchange": "s-dlx"})
    ch.confirm_delivery()
    ch.basic_publish("", "s-work", b"bad", pika.BasicProperties(delivery_mode=2))
    m, _p, _b = ch.basic_get("s-work")
    ch.basic_reject(m.delivery_tag, requeue=False)
    got = take(conn, "s-dead", 1, "first")
    assert got[0][1] == b"bad" and got[0][0] == 0
    assert got[0][2]["x-death"][0]["reason"] == "rejected"


def _deliveries(conn: Any, queue: str, n: int) -> tuple[Any, list[Any]]:
    """A channel with ``n`` unacked deliveries of ``queue`` from the first offset."""
    ch = conn.channel()
    ch.basic_qos(prefetch_count=n)
    got: list[Any] = []
    ch.basic_consume(queue, lambda c, m, p, b: got.append(m),
                     arguments={"x-stream-offset": "first"})
    deadline = time.monotonic() + 5
    while len(got) < n:
        assert time.monotonic() < deadline, got
        conn.process_data_events(time_limit=0.1)
    return ch, got


@pytest.mark.parametrize("how", ["nack", "nack-requeue", "nack-multiple", "reject",
                                 "reject-requeue", "recover", "tx-nack"])
def test_nack_reject_recover_only_give_credit_back(conn: Any, filled: str, how: str) -> None:
    """As RabbitMQ 3.13+ settles a stream delivery: a nack, reject or recover (requeue or
    not) is an ack - the credit comes back, nothing is redelivered or removed, the
    consumer goes on at the next offset (RabbitMQ 3.10 closed the connection with 540)."""
    ch, got = _deliveries(conn, filled, 2)
    tag = got[0].delivery_tag
    if how == "recover":
        ch.basic_recover(requeue=True)
    else:
        if how == "tx-nack":
            ch.tx_select()
        if how.startswith("reject"):
            ch.basic_reject(tag, requeue=how.endswith("requeue"))
        else:
            ch.basic_nack(got[-1].delivery_tag if how == "nack-multiple" else tag,
                          multiple=how == "nack-multiple", requeue=how.endswith("requeue"))
        if how == "tx-nack":
            ch.tx_commit()
    freed = 2 if how in ("nack-multiple", "recover") else 1
    deadline = time.monotonic() + 5
    while len(got) < 2 + freed:
        assert time.monotonic() < deadline, got
        conn.process_data_events(time_limit=0.1)
    conn.process_data_events(time_limit=0.3)
    assert [m.delivery_tag for m in got] == list(range(1, 3 + freed))
    assert not any(m.redelivered for m in got)
    assert ch.queue_declare(filled, passive=True).method.message_count == 10
    ch.close()
    assert offsets(take(conn, filled, 10, "first")) == list(range(10))  # nothing removed


def test_stock_pika_stops_a_stream_consumer_with_deliveries_buffered(conn: Any,
                                                                     filled: str) -> None:
    """pika's BlockingChannel nacks (requeue) the deliveries it buffered but did not hand
    to the application when a consumer is cancelled or its channel closed, and so does its
    consume() generator's cancel(): these are only credit back, so the connection stays
    up (RabbitMQ 3.10 closed it with 540 here; 3.13+ accepts them as oxiedge does)."""
    for stop in ("basic_cancel", "close", "generator"):
        ch = conn.channel()
        ch.basic_qos(prefetch_count=10)
        if stop == "generator":
            for _m, _p, _b in ch.consume(filled, arguments={"x-stream-offset": "first"}):
                break  # one handed out (not acked), the rest still buffered in pika
            ch.cancel()
            ch.close()
        else:
            tag = ch.basic_consume(filled, lambda *a: None,
                                   arguments={"x-stream-offset": "first"})
            time.sleep(0.5)  # the deliveries arrive; pika has not dispatched them
            if stop == "basic_cancel":
                ch.basic_cancel(tag)
            ch.close()
        assert conn.channel().queue_declare(filled, passive=True).method.message_count == 10


def test_stock_aio_pika_leaves_a_stream_iterator_early(server: Any, filled: str) -> None:
    """aio-pika's queue iterator nacks (requeue) what it buffered when the ``async with``
    is left early: credit back here, a 540 on RabbitMQ 3.10 (checked side by side)."""
    import asyncio

    import aio_pika

    async def main() -> bool:
        conn = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{server.amqp_port}/")
        ch = await conn.channel()
        await ch.set_qos(prefetch_count=10)
        q = await ch.declare_queue(filled, passive=True)
        n = 0
        async with q.iterator(arguments={"x-stream-offset": "first"}) as it:
            async for msg in it:
                await msg.ack()
                n += 1
                if n == 2:
                    break
        declared = await ch.declare_queue(filled, passive=True)  # a round trip
        assert declared.declaration_result.message_count == 10
        is_open = not conn.is_closed
        await conn.close()
        return is_open

    assert asyncio.run(asyncio.wait_for(main(), 30))


def test_no_offset_tracking_on_the_server(conn: Any, filled: str) -> None:
    """A consumer that comes back under the same tag without ``x-stream-offset`` starts at
    ``next``, not after what it acked (RabbitMQ 3.10 likewise: offsets are tracked only by
    its native stream protocol)."""
    ch = conn.channel()
    ch.basic_qos(prefetch_count=20)
    got: list[bytes] = []

    def on(c: Any, m: Any, p: Any, body: bytes) -> None:
        got.append(body)
        c.basic_ack(m.delivery_tag)
    ch.basic_consume(filled, on, consumer_tag="tracked",
                     arguments={"x-stream-offset": "first"})
    deadline = time.monotonic() + 5
    while len(got) < 10:
        assert time.monotonic() < deadline
        conn.process_data_events(time_limit=0.1)
    ch.basic_cancel("tracked")
    pub = conn.channel()
    pub.confirm_delivery()
    publish(pub, filled, 1, start=10)  # while nobody consumes
    got.clear()
    ch.basic_consume(filled, on, consumer_tag="tracked")
    conn.process_data_events(time_limit=0.7)
    assert got == []  # m10 is not delivered: nothing remembered where "tracked" was
    publish(pub, filled, 1, start=11)
    deadline = time.monotonic() + 5
    while not got:
        assert time.monotonic() < deadline
        conn.process_data_events(time_limit=0.1)
    assert got == [b"m11"]
