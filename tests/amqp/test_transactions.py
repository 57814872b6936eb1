"""AMQP transactions with stock pika against a real server, as RabbitMQ runs them
(rabbitmq.com/docs/semantics, "Semantics of tx"): publishes, acks, nacks and rejects of a
transactional channel take effect at ``tx.commit`` and never after ``tx.rollback``; errors
(unknown tags, missing exchanges) are immediate; a mandatory publish nobody routes is
returned at the commit; tx and confirm mode exclude each other; what a transaction holds
is bounded.  ``oxiedge/amqp/transaction.py``."""

from __future__ import annotations

import json
from typing import Any

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from tests.amqp.conftest import bodies, params

PERSISTENT = pika.BasicProperties(delivery_mode=2)


def ready(conn: Any, queue: str) -> int:
    return int(conn.channel().queue_declare(queue, passive=True).method.message_count)


def amqp_status(srv: Any) -> dict[str, Any]:
    return dict(json.loads(srv.cli("status", "--json").stdout)["amqp"])


def test_publishes_wait_for_commit_and_rollback_drops_them(conn: Any) -> None:
    tx = conn.channel()
    tx.queue_declare("txq")
    tx.tx_select()
    tx.basic_publish("", "txq", b"a")
    tx.basic_publish("", "txq", b"b")
    assert ready(conn, "txq") == 0  # nothing visible before the commit
    tx.tx_commit()
    assert ready(conn, "txq") == 2
    tx.basic_publish("", "txq", b"c")
    tx.tx_rollback()
    tx.tx_commit()  # a new transaction started at the rollback: nothing in it
    assert bodies(conn.channel(), "txq") == [b"a", b"b"]


def test_acks_wait_for_commit_and_rollback_leaves_them_unacked(conn: Any) -> None:
    setup = conn.channel()
    setup.queue_declare("txack")
    for body in (b"1", b"2", b"3"):
        setup.basic_publish("", "txack", body)
    ch = conn.channel()
    ch.tx_select()
    tags = [ch.basic_get("txack")[0].delivery_tag for _ in range(3)]
    ch.basic_ack(tags[0])
    ch.tx_rollback()
    ch.basic_ack(tags[0])  # still unacked after the rollback: acking it again is fine
    ch.basic_reject(tags[1], requeue=True)
    ch.basic_nack(tags[2], requeue=False)
    assert ready(conn, "txack") == 0  # the reject waits for the commit too
    ch.tx_commit()
    assert bodies(conn.channel(), "txack") == [b"2"]  # requeued; 1 acked, 3 dropped
    ch.close()


def test_rolled_back_ack_is_requeued_when_the_channel_closes(conn: Any) -> None:
    setup = conn.channel()
    setup.queue_declare("txclose")
    setup.basic_publish("", "txclose", b"m")
    ch = conn.channel()
    ch.tx_select()
    tag = ch.basic_get("txclose")[0].delivery_tag
    ch.basic_ack(tag)  # held, never committed
    ch.close()
    assert bodies(conn.channel(), "txclose") == [b"m"]


def test_multiple_ack_and_unknown_tags(conn: Any) -> None:
    setup = conn.channel()
    setup.queue_declare("txmulti")
    for i in range(4):
        setup.basic_publish("", "txmulti", b"%d" % i)
    ch = conn.channel()
    ch.tx_select()
    tags = [ch.basic_get("txmulti")[0].delivery_tag for _ in range(4)]
    ch.basic_ack(tags[2], multiple=True)
    ch.tx_commit()
    ch.basic_recover(requeue=True)
    assert bodies(conn.channel(), "txmulti") == [b"3"]
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.basic_ack(tags[0])  # acked and committed already: unknown now, at once
        ch.tx_commit()
    assert info.value.reply_code == 406


def test_errors_are_immediate_and_modes_exclusive(conn: Any) -> None:
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.tx_commit()
    assert info.value.reply_code == 406 and "not transactional" in info.value.reply_text
    ch = conn.channel()
    ch.confirm_delivery()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.tx_select()
    assert info.value.reply_code == 406
    ch = conn.channel()
    ch.tx_select()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.confirm_delivery()
    assert info.value.reply_code == 406
    ch = conn.channel()
    ch.tx_select()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.basic_publish("no-such-exchange", "k", b"x")
        ch.tx_commit()
    assert info.value.reply_code == 404
    ch = conn.channel()
    ch.queue_declare("txexp")
    ch.tx_select()
    ch.basic_publish("", "txexp", b"kept back")
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.basic_publish("", "txexp", b"bad", pika.BasicProperties(expiration="soon"))
        ch.tx_commit()
    assert info.value.reply_code == 406
    assert ready(conn, "txexp") == 0  # nothing of that transaction was committed
    ch = conn.channel()  # "²" is a digit to Python's str.isdigit, not an expiration
    ch.tx_select()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.basic_publish("", "txexp", b"bad", pika.BasicProperties(expiration="\u00b2"))
        ch.tx_commit()
    assert info.value.reply_code == 406
    assert ready(conn, "txexp") == 0


def test_mandatory_unroutable_is_returned_at_commit(conn: Any) -> None:
    ch = conn.channel()
    returned: list[bytes] = []
    ch.add_on_return_callback(lambda _c, _m, _p, body: returned.append(body))
    ch.tx_select()
    ch.basic_publish("amq.direct", "nobody", b"lost", mandatory=True)
    ch.tx_commit()
    conn.process_data_events(time_limit=0.2)
    assert returned == [b"lost"]


def test_bounds_close_the_channel_and_count(start_server: Any) -> None:
    srv = start_server("--amqp-tx-max-messages", "3", "--amqp-tx-max-bytes", "100")
    conn = pika.BlockingConnection(params(srv.amqp_port))
    ch = conn.channel()
    ch.queue_declare("txbound")
    ch.tx_select()
    for i in range(3):
        ch.basic_publish("", "txbound", b"%d" % i)
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.basic_publish("", "txbound", b"one too many")
        ch.tx_commit()
    assert info.value.reply_code == 406 and "transaction limit" in info.value.reply_text
    ch = conn.channel()
    ch.tx_select()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.basic_publish("", "txbound", b"x" * 200)
        ch.tx_commit()
    assert info.value.reply_code == 406
    assert ready(conn, "txbound") == 0  # both transactions dropped with their channels
    status = amqp_status(srv)
    assert status["tx_limit_refused"] == 2
    conn.close()


def test_committed_survives_sigkill_uncommitted_leaves_no_trace(start_server: Any) -> None:
    srv = start_server()
    conn = pika.BlockingConnection(params(srv.amqp_port))
    setup = conn.channel()
    setup.queue_declare("txdur", durable=True)
    setup.queue_declare("txdur2", durable=True)
    for body in (b"old1", b"old2", b"old3"):
        setup.basic_publish("", "txdur", body, PERSISTENT)
    tx = conn.channel()
    tx.tx_select()
    old = [tx.basic_get("txdur")[0].delivery_tag for _ in range(3)]
    for i in range(5):
        tx.basic_publish("", "txdur2", b"c%d" % i, PERSISTENT)
    tx.basic_ack(old[0])
    tx.tx_commit()  # commit-ok: synced
    for i in range(3):
        tx.basic_publish("", "txdur2", b"u%d" % i, PERSISTENT)
    tx.basic_ack(old[1])
    tx.basic_nack(old[2], requeue=False)
    conn.process_data_events(time_limit=0.1)
    srv.kill()
    srv.start()
    conn = pika.BlockingConnection(params(srv.amqp_port))
    ch = conn.channel()
    assert bodies(ch, "txdur2") == [b"c%d" % i for i in range(5)]
    assert bodies(ch, "txdur") == [b"old2", b"old3"]  # the committed ack only
    conn.close()


def test_aio_pika_transaction_context(server: Any) -> None:
    """aio-pika's ``channel.transaction()``: commit on a clean exit, rollback on an
    exception (its channels must not confirm: tx and confirm mode exclude each other)."""
    import asyncio

    import aio_pika

    async def main() -> list[bytes]:
        conn = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{server.amqp_port}/")
        async with conn:
            ch = await conn.channel(publisher_confirms=False)
            q = await ch.declare_queue("aio.tx")
            async with ch.transaction():
                await ch.default_exchange.publish(aio_pika.Message(b"kept"), "aio.tx")
            with pytest.raises(RuntimeError):
                async with ch.transaction():
                    await ch.default_exchange.publish(aio_pika.Message(b"gone"), "aio.tx")
                    raise RuntimeError("rolled back")
            got = []
            while (msg := await q.get(no_ack=True, fail=False)) is not None:
                got.append(msg.body)
            return got

    assert asyncio.run(asyncio.wait_for(main(), 30)) == [b"kept"]
