"""RabbitMQ's production semantics with pika, each test naming the RabbitMQ doc section it
follows (rabbitmq.com/docs: dlx, ttl, maxlength, quorum-queues, ae)."""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, NackError

from tests.amqp.conftest import wait_queue_gone, wait_until


def collect(conn: Any, ch: Any, queue: str) -> list[tuple[Any, Any, bytes]]:
    """Consume ``queue`` (auto-ack) into a list the test waits on."""
    got: list[tuple[Any, Any, bytes]] = []
    ch.basic_consume(queue, lambda c, m, p, b: got.append((m, p, b)), auto_ack=True)
    return got


def deaths(props: Any) -> list[dict[str, Any]]:
    return list(props.headers["x-death"])


def test_reject_and_nack_are_dead_lettered_with_x_death(conn: Any) -> None:
    """dlx: "Dead-Lettered Messages" — rejected (requeue=false) messages are republished
    to the DLX with the dead-letter routing key; x-death has queue, reason, count,
    exchange, routing-keys, time; x-first-death-* and x-last-death-* are set."""
    ch = conn.channel()
    ch.exchange_declare("dlx.direct", "direct")
    ch.queue_declare("dlq1")
    ch.queue_bind("dlq1", "dlx.direct", "dead")
    ch.queue_declare("work1", arguments={"x-dead-letter-exchange": "dlx.direct",
                                         "x-dead-letter-routing-key": "dead"})
    ch.exchange_declare("in1", "topic")
    ch.queue_bind("work1", "in1", "jobs.#")
    ch.basic_publish("in1", "jobs.a", b"r", pika.BasicProperties(headers={"app": "x"},
                                                                 delivery_mode=2))
    ch.basic_publish("in1", "jobs.b", b"n")
    m1, _p, _b = ch.basic_get("work1")
    ch.basic_reject(m1.delivery_tag, requeue=False)
    m2, _p, _b = ch.basic_get("work1")
    ch.basic_nack(m2.delivery_tag, requeue=False)
    got = collect(conn, ch, "dlq1")
    wait_until(conn, lambda: len(got) == 2)
    (m, props, body), (m_b, props_b, _body_b) = got
    assert body == b"r" and m.exchange == "dlx.direct" and m.routing_key == "dead"
    assert props.delivery_mode == 2 and props.headers["app"] == "x"
    (death,) = deaths(props)
    assert death["queue"] == "work1" and death["reason"] == "rejected"
    assert death["count"] == 1 and death["exchange"] == "in1"
    assert death["routing-keys"] == ["jobs.a"]
    assert isinstance(death["time"], datetime)
    assert abs(death["time"].timestamp() - time.time()) < 60
    h = props.headers
    assert (h["x-first-death-queue"], h["x-first-death-reason"], h["x-first-death-exchange"]) \
        == ("work1", "rejected", "in1")
    assert (h["x-last-death-queue"], h["x-last-death-reason"]) == ("work1", "rejected")
    assert deaths(props_b)[0]["routing-keys"] == ["jobs.b"] and m_b.routing_key == "dead"


def test_dead_letter_counters_in_queue_rows(server: Any, conn: Any) -> None:
    """`oxiedge queues` and `oxiedge status` count what was dead-lettered."""
    ch = conn.channel()
    ch.queue_declare("cnt.dlq")
    ch.queue_declare("cnt.src", arguments={"x-dead-letter-exchange": "",
                                           "x-dead-letter-routing-key": "cnt.dlq"})
    for _ in range(2):
        ch.basic_publish("", "cnt.src", b"x")
        method, _p, _b = ch.basic_get("cnt.src")
        ch.basic_reject(method.delivery_tag, requeue=False)
    ch.queue_declare("cnt.src", passive=True)  # a round trip after the rejects
    rows = {r["name"]: r for r in map(json.loads, server.cli("queues", "--json").stdout
                                      .splitlines())}
    assert rows["cnt.src"]["dead_lettered"] == 2 and rows["cnt.src"]["type"] == "classic"
    assert rows["cnt.dlq"]["ready"] == 2
    assert json.loads(server.cli("status", "--json").stdout)["amqp"]["dead_lettered"] >= 2


def test_x_death_entries_merge_per_queue_and_reason(conn: Any) -> None:
    """dlx: "x-death" — one entry per (queue, reason); a repeat increments count and
    moves the entry to the front (most recent first); x-first-death-* never changes."""
    ch = conn.channel()
    # a <-> b through the default exchange; clients reject, so the cycle is allowed
    ch.queue_declare("cyc.a", arguments={"x-dead-letter-exchange": "",
                                         "x-dead-letter-routing-key": "cyc.b"})
    ch.queue_declare("cyc.b", arguments={"x-dead-letter-exchange": "",
                                         "x-dead-letter-routing-key": "cyc.a"})
    ch.basic_publish("", "cyc.a", b"m")
    for queue in ("cyc.a", "cyc.b", "cyc.a"):
        method, _props, _body = ch.basic_get(queue)
        assert method is not None, queue
        ch.basic_reject(method.delivery_tag, requeue=False)
    method, props, body = ch.basic_get("cyc.b", auto_ack=True)
    assert body == b"m"
    d = deaths(props)
    assert [(e["queue"], e["reason"], e["count"]) for e in d] == [
        ("cyc.a", "rejected", 2), ("cyc.b", "rejected", 1)]
    assert d[0]["exchange"] == "" and d[0]["routing-keys"] == ["cyc.a"]  # first time's
    assert props.headers["x-first-death-queue"] == "cyc.a"
    assert props.headers["x-last-death-queue"] == "cyc.a"
    assert method.routing_key == "cyc.b" and method.exchange == ""


def test_automatic_dead_letter_cycle_is_dropped(conn: Any) -> None:
    """dlx: "Dead-lettering cycles" — a message expiring back into the queue it expired
    from (no rejection in the cycle) is dropped, not looped."""
    ch = conn.channel()
    ch.queue_declare("selfloop", arguments={"x-message-ttl": 0,
                                            "x-dead-letter-exchange": ""})
    ch.basic_publish("", "selfloop", b"x")
    ok = ch.queue_declare("selfloop", passive=True)
    assert ok.method.message_count == 0


def test_expired_messages_are_dead_lettered_by_the_queue_timer(conn: Any) -> None:
    """ttl: "Per-Message TTL in Publishers" + dlx: expired messages are dead-lettered
    (reason expired) with original-expiration, and the expiration property is removed.
    Nobody looks at the source queue: its head timer expires the message."""
    ch = conn.channel()
    ch.queue_declare("ttl.dlq")
    ch.queue_declare("ttl.src", arguments={"x-dead-letter-exchange": "",
                                           "x-dead-letter-routing-key": "ttl.dlq"})
    got = collect(conn, ch, "ttl.dlq")
    ch.basic_publish("", "ttl.src", b"short", pika.BasicProperties(expiration="50"))
    wait_until(conn, lambda: len(got) == 1, timeout=5)
    _m, props, body = got[0]
    assert body == b"short" and props.expiration is None
    (death,) = deaths(props)
    assert death["reason"] == "expired" and death["original-expiration"] == "50"


def test_per_message_ttl_expires_only_at_the_head(conn: Any) -> None:
    """ttl: "Per-Message TTL Caveats" — a message expires only once it reaches the head:
    a short-TTL message behind a long-lived one waits (RabbitMQ classic and quorum alike)."""
    ch = conn.channel()
    ch.queue_declare("hol.dlq")
    ch.queue_declare("hol.src", arguments={"x-dead-letter-exchange": "",
                                           "x-dead-letter-routing-key": "hol.dlq"})
    ch.basic_publish("", "hol.src", b"long", pika.BasicProperties(expiration="600000"))
    ch.basic_publish("", "hol.src", b"short", pika.BasicProperties(expiration="20"))
    got = collect(conn, ch, "hol.dlq")
    conn.process_data_events(time_limit=0.4)  # well past 20 ms
    assert got == []  # blocked behind the head
    assert ch.queue_declare("hol.src", passive=True).method.message_count == 2
    _m, _p, body = ch.basic_get("hol.src", auto_ack=True)
    assert body == b"long"
    wait_until(conn, lambda: len(got) == 1)  # now at the head: expired at once
    assert got[0][2] == b"short"


def test_queue_ttl_takes_the_earlier_deadline(conn: Any) -> None:
    """ttl: "Define Message TTL for Queues" — with both, the lower TTL applies."""
    ch = conn.channel()
    ch.queue_declare("qttl.dlq")
    ch.queue_declare("qttl.src", arguments={"x-message-ttl": 30,
                                            "x-dead-letter-exchange": "",
                                            "x-dead-letter-routing-key": "qttl.dlq"})
    got = collect(conn, ch, "qttl.dlq")
    ch.basic_publish("", "qttl.src", b"a", pika.BasicProperties(expiration="600000"))
    wait_until(conn, lambda: len(got) == 1, timeout=5)
    assert deaths(got[0][1])[0]["reason"] == "expired"


def test_drop_head_dead_letters_the_dropped(conn: Any) -> None:
    """maxlength: "Overflow Behaviour" drop-head — the oldest ready messages are dropped
    and dead-lettered (reason maxlen)."""
    ch = conn.channel()
    ch.queue_declare("ml.dlq")
    ch.queue_declare("ml.src", arguments={"x-max-length": 2, "x-dead-letter-exchange": "",
                                          "x-dead-letter-routing-key": "ml.dlq"})
    for i in range(3):
        ch.basic_publish("", "ml.src", b"%d" % i)
    _m, props, body = ch.basic_get("ml.dlq", auto_ack=True)
    assert body == b"0" and deaths(props)[0]["reason"] == "maxlen"
    assert [ch.basic_get("ml.src", auto_ack=True)[2] for _ in range(2)] == [b"1", b"2"]


def test_max_length_bytes_drop_head_and_reject_publish(conn: Any) -> None:
    """maxlength: "Define Max Queue Length Using x-max-length-bytes" — the total body bytes
    of ready messages; drop-head drops the oldest, reject-publish nacks the new one."""
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("mlb.drop", arguments={"x-max-length-bytes": 10})
    for body in (b"aaaa", b"bbbb", b"cccc"):
        ch.basic_publish("", "mlb.drop", body)
    assert ch.queue_declare("mlb.drop", passive=True).method.message_count == 2
    assert ch.basic_get("mlb.drop", auto_ack=True)[2] == b"bbbb"
    ch.queue_declare("mlb.rej", arguments={"x-max-length-bytes": 8,
                                           "x-overflow": "reject-publish"})
    ch.basic_publish("", "mlb.rej", b"aaaa")
    ch.basic_publish("", "mlb.rej", b"bbbb")
    with pytest.raises(NackError):
        ch.basic_publish("", "mlb.rej", b"c")
    method, _p, _b = ch.basic_get("mlb.rej")  # unacked messages do not count
    ch.basic_publish("", "mlb.rej", b"dddd")
    ch.basic_ack(method.delivery_tag)
    assert ch.queue_declare("mlb.rej", passive=True).method.message_count == 2


def test_reject_publish_dlx_nacks_and_dead_letters(conn: Any) -> None:
    """maxlength: "Overflow Behaviour" reject-publish-dlx — the publisher gets basic.nack
    and the refused message is dead-lettered (reason maxlen)."""
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("rpd.dlq")
    ch.queue_declare("rpd.src", arguments={"x-max-length": 1,
                                           "x-overflow": "reject-publish-dlx",
                                           "x-dead-letter-exchange": "",
                                           "x-dead-letter-routing-key": "rpd.dlq"})
    ch.basic_publish("", "rpd.src", b"kept")
    with pytest.raises(NackError):
        ch.basic_publish("", "rpd.src", b"refused")
    _m, props, body = ch.basic_get("rpd.dlq", auto_ack=True)
    assert body == b"refused" and deaths(props)[0]["reason"] == "maxlen"
    assert ch.basic_get("rpd.src", auto_ack=True)[2] == b"kept"


def test_delivery_limit_counts_returns_then_dead_letters(conn: Any) -> None:
    """quorum-queues: "Poison Message Handling" — each return of a delivered message
    counts; redeliveries carry x-delivery-count; past x-delivery-limit the message is
    dead-lettered with reason delivery_limit."""
    ch = conn.channel()
    ch.queue_declare("poison.dlq")
    ch.queue_declare("poison", durable=True, arguments={
        "x-queue-type": "quorum", "x-delivery-limit": 2, "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": "poison.dlq"})
    ch.basic_publish("", "poison", b"p", pika.BasicProperties(delivery_mode=2))
    counts = []
    for _ in range(3):
        method, props, _b = ch.basic_get("poison")
        assert method is not None
        counts.append((props.headers or {}).get("x-delivery-count"))
        ch.basic_nack(method.delivery_tag, requeue=True)
    assert counts == [None, 1, 2]
    assert ch.basic_get("poison")[0] is None
    _m, props, body = ch.basic_get("poison.dlq", auto_ack=True)
    assert body == b"p" and deaths(props)[0]["reason"] == "delivery_limit"
    assert "x-delivery-count" not in props.headers


def test_delivery_limit_without_dlx_drops_and_counts(server: Any, conn: Any) -> None:
    """quorum-queues: "Poison Message Handling" — without a DLX the message is dropped;
    a closed channel counts as a return (a crashing consumer)."""
    ch = conn.channel()
    ch.queue_declare("poison2", arguments={"x-delivery-limit": 0})
    ch.basic_publish("", "poison2", b"p")
    other = conn.channel()
    assert other.basic_get("poison2")[0] is not None
    other.close()  # the unacked delivery returns: count 1 > limit 0
    assert ch.queue_declare("poison2", passive=True).method.message_count == 0
    status = json.loads(server.cli("status", "--json").stdout)
    assert status["amqp"]["delivery_limit"] >= 1


def test_queue_type_rules(conn: Any) -> None:
    """quorum-queues: "Feature Matrix" — quorum queues are durable, never exclusive or
    auto-delete (406, RabbitMQ's property names); a re-declare without x-queue-type keeps
    the type; a classic queue may say so."""
    ch = conn.channel()
    ch.queue_declare("qq", durable=True, arguments={"x-queue-type": "quorum"})
    ch.queue_declare("qq", durable=True)
    ch.queue_declare("cq", arguments={"x-queue-type": "classic"})
    for kw, prop in (({"durable": False}, "non-durable"),
                     ({"durable": True, "exclusive": True}, "exclusive-owner"),
                     ({"durable": True, "auto_delete": True}, "auto-delete")):
        bad = conn.channel()
        with pytest.raises(ChannelClosedByBroker) as info:
            bad.queue_declare("qq.bad", arguments={"x-queue-type": "quorum"}, **kw)
        assert info.value.reply_code == 406 and prop in info.value.reply_text


@pytest.mark.parametrize("args", [
    {"x-expires": 0},
    {"x-message-ttl": -1},
    {"x-max-length-bytes": "10"},
    {"x-overflow": "drop-tail"},
    {"x-dead-letter-routing-key": "k"},
    {"x-delivery-limit": "3"},
    {"x-queue-type": "fancy"},
])
def test_invalid_arguments_are_406(conn: Any, args: dict[str, Any]) -> None:
    """dlx/ttl/maxlength: invalid argument values are refused with PRECONDITION_FAILED."""
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.queue_declare("badargs", arguments=args)
    assert info.value.reply_code == 406


def test_x_expires_deletes_unused_queue(conn: Any) -> None:
    """ttl: "Queue TTL" — x-expires deletes a queue unused (no consumer, no get, no
    re-declare) for that long; a consumer keeps it alive."""
    ch = conn.channel()
    ch.queue_declare("exp.idle", arguments={"x-expires": 150})
    ch.queue_declare("exp.busy", arguments={"x-expires": 150})
    ch.basic_consume("exp.busy", lambda *a: None)
    wait_queue_gone(conn, "exp.idle", 5, 0.05, "x-expires did not delete the queue")
    assert ch.queue_declare("exp.busy", passive=True).method.consumer_count == 1


def test_alternate_exchange(conn: Any) -> None:
    """ae: "Alternate Exchanges" — what an exchange cannot route goes to its alternate
    (no basic.return for mandatory); routable messages do not; the argument is part of
    the exchange's equivalence."""
    ch = conn.channel()
    ch.confirm_delivery()
    ch.exchange_declare("ae.unrouted", "fanout")
    ch.queue_declare("ae.catch")
    ch.queue_bind("ae.catch", "ae.unrouted")
    ch.exchange_declare("ae.main", "direct", arguments={"alternate-exchange": "ae.unrouted"})
    ch.queue_declare("ae.ok")
    ch.queue_bind("ae.ok", "ae.main", "known")
    ch.basic_publish("ae.main", "known", b"k", mandatory=True)
    ch.basic_publish("ae.main", "other", b"o", mandatory=True)  # no UnroutableError
    assert ch.basic_get("ae.ok", auto_ack=True)[2] == b"k"
    assert ch.basic_get("ae.catch", auto_ack=True)[2] == b"o"
    assert ch.basic_get("ae.catch")[0] is None
    bad = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        bad.exchange_declare("ae.main", "direct", arguments={"alternate-exchange": "x"})
    assert info.value.reply_code == 406


def test_quorum_queue_default_delivery_limit_is_20(conn: Any) -> None:
    """quorum-queues: "Poison Message Handling" — RabbitMQ 4.x gives quorum queues a
    delivery limit of 20 when none is set: the 21st return drops the message."""
    ch = conn.channel()
    ch.queue_declare("qq.default", durable=True, arguments={"x-queue-type": "quorum"})
    ch.basic_publish("", "qq.default", b"p")
    last = None
    for _ in range(21):
        method, props, _b = ch.basic_get("qq.default")
        assert method is not None
        last = (props.headers or {}).get("x-delivery-count")
        ch.basic_nack(method.delivery_tag, requeue=True)
    assert last == 20
    assert ch.basic_get("qq.default")[0] is None
