"""Interop with pika's BlockingConnection: every broker feature a worker relies on."""

from __future__ import annotations

from typing import Any

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker, UnroutableError

from tests.amqp.conftest import bodies, params, wait_until


def drain(ch: Any, queue: str, n: int, timeout: float = 5) -> list[tuple[Any, Any, bytes]]:
    """Consume ``n`` messages with pika's consume generator (auto_ack off, acking each)."""
    out: list[tuple[Any, Any, bytes]] = []
    for method, props, body in ch.consume(queue, inactivity_timeout=timeout):
        assert method is not None, f"only {len(out)} of {n} messages arrived"
        out.append((method, props, body))
        if len(out) == n:
            break
    return out


def test_publish_get_ack_roundtrip(ch: Any) -> None:
    ch.queue_declare("work")
    props = pika.BasicProperties(content_type="application/json", correlation_id="c-1",
                                 headers={"k": "v", "n": 3, "nested": {"a": [1, 2]}},
                                 message_id="m1", priority=3, app_id="t")
    ch.basic_publish("", "work", b'{"x": 1}', props)
    method, got, body = ch.basic_get("work")
    assert body == b'{"x": 1}' and not method.redelivered and method.message_count == 0
    assert got.content_type == "application/json" and got.correlation_id == "c-1"
    assert got.headers == {"k": "v", "n": 3, "nested": {"a": [1, 2]}}
    assert (got.message_id, got.priority, got.app_id) == ("m1", 3, "t")
    ch.basic_ack(method.delivery_tag)
    assert ch.basic_get("work") == (None, None, None)


def test_exchange_types_and_single_copy(ch: Any) -> None:
    for name in ("qa", "qb", "qc"):
        ch.queue_declare(name)
    ch.exchange_declare("fx", "fanout")
    ch.exchange_declare("tx", "topic")
    ch.queue_bind("qa", "fx")
    ch.queue_bind("qb", "fx")
    ch.queue_bind("qa", "tx", "sensors.*.temp")
    ch.queue_bind("qa", "tx", "sensors.#")  # a second matching binding: still one copy
    ch.queue_bind("qc", "tx", "#.humidity")
    ch.queue_bind("qb", "amq.direct", "rk")
    ch.basic_publish("fx", "ignored", b"fan")
    ch.basic_publish("tx", "sensors.kitchen.temp", b"t1")
    ch.basic_publish("tx", "sensors.humidity", b"h1")
    ch.basic_publish("tx", "other.x", b"nobody")
    ch.basic_publish("amq.direct", "rk", b"d1")
    ch.basic_publish("amq.direct", "zz", b"nobody")

    assert bodies(ch, "qa") == [b"fan", b"t1", b"h1"]
    assert bodies(ch, "qb") == [b"fan", b"d1"]
    assert bodies(ch, "qc") == [b"h1"]
    ch.queue_unbind("qc", "tx", "#.humidity")
    ch.basic_publish("tx", "a.humidity", b"h2")
    assert bodies(ch, "qc") == []


def test_round_robin_and_prefetch(conn: Any) -> None:
    ch = conn.channel()
    ch.queue_declare("rr")
    ch.basic_qos(prefetch_count=1)
    seen: dict[str, list[bytes]] = {"a": [], "b": []}
    held: list[Any] = []

    def make(tag: str) -> Any:
        def cb(c: Any, m: Any, p: Any, b: bytes) -> None:
            seen[tag].append(b)
            held.append((c, m))
        return cb

    ch.basic_consume("rr", make("a"), consumer_tag="a")
    ch.basic_consume("rr", make("b"), consumer_tag="b")
    for i in range(6):
        ch.basic_publish("", "rr", b"%d" % i)
    wait_until(conn, lambda: len(seen["a"]) == 1 and len(seen["b"]) == 1)
    # prefetch 1 each: exactly one in flight per consumer, the server holds the other 4
    assert ch.queue_declare("rr", passive=True).method.message_count == 4
    for total in range(3, 7):
        c, m = held.pop(0)
        c.basic_ack(m.delivery_tag)
        wait_until(conn, lambda total=total: sum(map(len, seen.values())) == total)
    assert sorted(seen["a"] + seen["b"]) == [b"%d" % i for i in range(6)]
    assert len(seen["a"]) == 3 and len(seen["b"]) == 3  # round-robin


def test_qos_global_limits_channel(conn: Any) -> None:
    ch = conn.channel()
    ch.queue_declare("g1")
    ch.queue_declare("g2")
    ch.basic_qos(prefetch_count=3, global_qos=True)
    got: list[bytes] = []
    ch.basic_consume("g1", lambda c, m, p, b: got.append(b))
    ch.basic_consume("g2", lambda c, m, p, b: got.append(b))
    for _i in range(5):
        ch.basic_publish("", "g1", b"a")
        ch.basic_publish("", "g2", b"b")
    wait_until(conn, lambda: len(got) == 3)  # shared by both consumers of the channel
    held = sum(ch.queue_declare(q, passive=True).method.message_count for q in ("g1", "g2"))
    assert held == 7 and len(got) == 3


def test_ack_multiple_nack_requeue_reject(ch: Any) -> None:
    ch.queue_declare("acks")
    for i in range(5):
        ch.basic_publish("", "acks", b"%d" % i)
    msgs = drain(ch, "acks", 5)
    ch.basic_ack(msgs[2][0].delivery_tag, multiple=True)  # acks 0, 1, 2
    ch.basic_nack(msgs[3][0].delivery_tag, requeue=True)
    ch.basic_reject(msgs[4][0].delivery_tag, requeue=False)  # discarded
    ch.cancel()
    method, _p, body = ch.basic_get("acks")
    assert body == b"3" and method.redelivered
    ch.basic_ack(method.delivery_tag)
    assert ch.basic_get("acks") == (None, None, None)


def test_unacked_requeued_when_channel_closes(conn: Any) -> None:
    ch = conn.channel()
    ch.queue_declare("rq")
    for i in range(3):
        ch.basic_publish("", "rq", b"%d" % i)
    ch.basic_qos(prefetch_count=2)  # so the third is never delivered
    drain(ch, "rq", 2)
    ch.close()  # two unacked go back to the head, redelivered
    ch2 = conn.channel()
    got = [ch2.basic_get("rq", auto_ack=True) for _ in range(3)]
    assert [b for _m, _p, b in got] == [b"0", b"1", b"2"]
    assert [m.redelivered for m, _p, _b in got] == [True, True, False]


def test_unacked_requeued_when_connection_dies(server: Any) -> None:
    c1 = pika.BlockingConnection(params(server.amqp_port))
    ch = c1.channel()
    ch.queue_declare("dies")
    ch.basic_publish("", "dies", b"x")
    m, _p, _b = ch.basic_get("dies")
    assert m is not None
    c1._impl._transport._sock.close()  # abrupt: no close handshake
    c2 = pika.BlockingConnection(params(server.amqp_port))
    ch2 = c2.channel()
    for _ in range(50):
        got = ch2.basic_get("dies", auto_ack=True)
        if got[0] is not None:
            break
        c2.sleep(0.1)
    assert got[2] == b"x" and got[0].redelivered
    c2.close()


def test_recover_requeues(ch: Any) -> None:
    ch.queue_declare("rec")
    ch.basic_publish("", "rec", b"r")
    _m, _p, _b = ch.basic_get("rec")
    ch.basic_recover(requeue=True)
    m2, _p, b = ch.basic_get("rec")
    assert b == b"r" and m2.redelivered


def test_mandatory_return_and_confirms(conn: Any) -> None:
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("cq", durable=True)
    ch.basic_publish("", "cq", b"ok", pika.BasicProperties(delivery_mode=2), mandatory=True)
    with pytest.raises(UnroutableError) as info:
        ch.basic_publish("amq.direct", "nowhere", b"lost", mandatory=True)
    assert info.value.messages[0].method.reply_code == 312
    ch.basic_publish("amq.direct", "nowhere", b"quiet")  # not mandatory: confirmed silently
    assert ch.queue_declare("cq", passive=True).method.message_count == 1


def test_queue_declare_variants(conn: Any) -> None:
    ch = conn.channel()
    res = ch.queue_declare("", exclusive=True)
    assert res.method.queue.startswith("amq.gen-")
    ch.queue_declare("eq", durable=True)
    assert ch.queue_declare("eq", durable=True).method.queue == "eq"  # equivalent: fine
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.queue_declare("eq", durable=False)
    assert info.value.reply_code == 406 and "durable" in info.value.reply_text
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.queue_declare("missing", passive=True)
    assert info.value.reply_code == 404


def test_exclusive_queue_locked_for_others(server: Any) -> None:
    c1 = pika.BlockingConnection(params(server.amqp_port))
    c1.channel().queue_declare("mine", exclusive=True)
    c2 = pika.BlockingConnection(params(server.amqp_port))
    with pytest.raises(ChannelClosedByBroker) as info:
        c2.channel().queue_declare("mine", passive=True)
    assert info.value.reply_code == 405
    c1.close()  # exclusive queue goes with its connection
    with pytest.raises(ChannelClosedByBroker) as info:
        c2.channel().queue_declare("mine", passive=True)
    assert info.value.reply_code == 404
    c2.close()


def test_purge_and_delete_conditions(conn: Any) -> None:
    ch = conn.channel()
    ch.queue_declare("pd")
    for _ in range(3):
        ch.basic_publish("", "pd", b"x")
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.queue_delete("pd", if_empty=True)
    assert info.value.reply_code == 406
    ch = conn.channel()
    assert ch.queue_purge("pd").method.message_count == 3
    tag = ch.basic_consume("pd", lambda *a: None)
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.queue_delete("pd", if_unused=True)
    assert info.value.reply_code == 406
    ch = conn.channel()
    assert ch.queue_delete("pd").method.message_count == 0
    assert tag


def test_server_cancel_notify_on_queue_delete(conn: Any) -> None:
    ch = conn.channel()
    ch.queue_declare("gone")
    cancelled: list[Any] = []
    ch.basic_consume("gone", lambda *a: None, consumer_tag="ctag")
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame))
    other = conn.channel()
    other.queue_delete("gone")
    wait_until(conn, lambda: bool(cancelled))
    assert cancelled[0].method.consumer_tag == "ctag"


def test_auto_delete_queue_and_exchange(conn: Any) -> None:
    ch = conn.channel()
    ch.queue_declare("ad", auto_delete=True)
    ch.exchange_declare("adx", "direct", auto_delete=True)
    ch.queue_bind("ad", "adx", "k")
    tag = ch.basic_consume("ad", lambda *a: None)
    ch.basic_cancel(tag)
    ch2 = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch2.queue_declare("ad", passive=True)
    assert info.value.reply_code == 404
    ch3 = conn.channel()
    with pytest.raises(ChannelClosedByBroker):
        ch3.exchange_declare("adx", passive=True)


def test_deleting_a_queue_keeps_unrelated_auto_delete_exchanges(conn: Any) -> None:
    """RabbitMQ "Exchanges" guide: an auto-delete exchange is deleted when its last binding
    is removed; an exchange that never had a binding to the deleted queue stays."""
    ch = conn.channel()
    ch.exchange_declare("ad-x", "direct", auto_delete=True)
    ch.queue_declare("ad-q", auto_delete=True)
    ch.queue_delete("ad-q")
    ch.exchange_declare("ad-x", "direct", passive=True)  # still there
    ch.exchange_delete("ad-x")


def test_exchange_declare_rules(conn: Any) -> None:
    ch = conn.channel()
    ch.exchange_declare("amq.topic", "topic", durable=True)  # equivalent re-declare
    ch.exchange_declare("ex1", "direct", durable=True)
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.exchange_declare("ex1", "fanout", durable=True)
    assert info.value.reply_code == 406
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.exchange_declare("amq.custom", "direct")
    assert info.value.reply_code == 403
    ch = conn.channel()
    ch.queue_declare("bq")
    ch.queue_bind("bq", "ex1", "k")
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.exchange_delete("ex1", if_unused=True)
    assert info.value.reply_code == 406
    ch = conn.channel()
    ch.exchange_delete("ex1")
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.basic_publish("ex1", "k", b"x")
        ch.basic_get("bq")  # the channel error arrives asynchronously
    assert info.value.reply_code == 404


@pytest.mark.parametrize("action,feature", [
    (lambda ch: ch.queue_bind("bq540", "amq.direct", "k", arguments={"x-any": 1}), "x-any"),
    (lambda ch: ch.exchange_declare("w", "x-weird"), "x-weird"),
    (lambda ch: ch.queue_declare("odd", arguments={"x-odd-argument": 5}),
     "x-odd-argument"),
])
def test_out_of_scope_answers_540(server: Any, action: Any, feature: str) -> None:
    c = pika.BlockingConnection(params(server.amqp_port))
    c.channel().queue_declare("bq540")
    with pytest.raises((ConnectionClosedByBroker, ChannelClosedByBroker)) as info:
        action(c.channel())
    assert info.value.reply_code == 540
    assert feature in info.value.reply_text
    if c.is_open:
        c.close()


def test_large_multi_frame_body(ch: Any) -> None:
    ch.queue_declare("big")
    body = bytes(range(256)) * 4096  # 1 MiB, many frames at frame_max 131072
    ch.basic_publish("", "big", body)
    _m, _p, got = ch.basic_get("big", auto_ack=True)
    assert got == body


def test_frame_max_and_heartbeat_negotiated(server: Any) -> None:
    c = pika.BlockingConnection(params(server.amqp_port, frame_max=8192, heartbeat=7))
    impl = c._impl
    assert impl.params.frame_max == 8192 and impl.params.heartbeat == 7
    ch = c.channel()
    ch.queue_declare("fm")
    ch.basic_publish("", "fm", b"z" * 50000)
    assert ch.basic_get("fm", auto_ack=True)[2] == b"z" * 50000
    c.close()


def test_server_properties_advertise_capabilities(conn: Any) -> None:
    props = conn._impl.server_properties
    assert props["product"] == b"oxiedge" or props["product"] == "oxiedge"
    caps = props["capabilities"]
    for cap in ("publisher_confirms", "basic.nack", "consumer_cancel_notify",
                "connection.blocked", "exchange_exchange_bindings"):
        assert caps[cap] is True


def test_bad_credentials_refused(start_server: Any) -> None:
    srv = start_server()
    srv.cli("user", "add", "alice", "--password-stdin", input="s3cret\n")
    good = pika.BlockingConnection(params(srv.amqp_port,
                                          credentials=pika.PlainCredentials("alice", "s3cret")))
    good.close()
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(params(srv.amqp_port,
                                       credentials=pika.PlainCredentials("alice", "wrong")))


def test_nack_multiple_requeues_in_order(ch: Any) -> None:
    ch.queue_declare("nackm")
    for i in range(4):
        ch.basic_publish("", "nackm", b"%d" % i)
    msgs = [ch.basic_get("nackm") for _ in range(4)]
    ch.basic_nack(msgs[2][0].delivery_tag, multiple=True, requeue=True)  # 0, 1, 2 back
    ch.basic_nack(msgs[3][0].delivery_tag, multiple=False, requeue=False)  # 3 dropped
    again = [ch.basic_get("nackm", auto_ack=True) for _ in range(3)]
    assert [b for _m, _p, b in again] == [b"0", b"1", b"2"]
    assert all(m.redelivered for m, _p, _b in again)
    assert ch.basic_get("nackm") == (None, None, None)


def test_unknown_delivery_tag_is_406(conn: Any) -> None:
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.basic_ack(999)
        ch.queue_declare("after-bad-ack")  # the error arrives with the next round trip
    assert info.value.reply_code == 406


def test_competing_consumers_no_loss_no_duplicates(server: Any) -> None:
    import threading

    n_per_publisher, publishers, consumers = 500, 2, 4
    total = n_per_publisher * publishers
    setup = pika.BlockingConnection(params(server.amqp_port))
    setup.channel().queue_declare("compete", durable=True)
    setup.close()
    received: dict[int, list[bytes]] = {i: [] for i in range(consumers)}
    lock = threading.Lock()
    done = threading.Event()
    errors: list[BaseException] = []

    def consume(idx: int) -> None:
        try:
            c = pika.BlockingConnection(params(server.amqp_port))
            ch = c.channel()
            ch.basic_qos(prefetch_count=10)

            def on_msg(chx: Any, m: Any, _p: Any, body: bytes) -> None:
                with lock:
                    received[idx].append(body)
                    if sum(map(len, received.values())) >= total:
                        done.set()
                chx.basic_ack(m.delivery_tag)

            ch.basic_consume("compete", on_msg)
            while not done.is_set():
                c.process_data_events(time_limit=0.1)
            c.close()
        except BaseException as exc:
            errors.append(exc)
            done.set()

    def publish(idx: int) -> None:
        try:
            c = pika.BlockingConnection(params(server.amqp_port))
            ch = c.channel()
            ch.confirm_delivery()
            for i in range(n_per_publisher):
                ch.basic_publish("", "compete", b"%d-%d" % (idx, i),
                                 pika.BasicProperties(delivery_mode=2))
            c.close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(consumers)]
    threads += [threading.Thread(target=publish, args=(i,)) for i in range(publishers)]
    for t in threads:
        t.start()
    assert done.wait(60), "not every message arrived"
    for t in threads:
        t.join(20)
    assert not errors, errors
    everything = [b for bodies in received.values() for b in bodies]
    assert len(everything) == total and len(set(everything)) == total
    assert all(len(bodies) > 0 for bodies in received.values())  # everybody got work
    for idx in range(publishers):  # every message of every publisher arrived exactly once
        mine = {b for b in everything if b.startswith(b"%d-" % idx)}
        assert mine == {b"%d-%d" % (idx, i) for i in range(n_per_publisher)}


def test_exclusive_flag_mismatch_is_resource_locked(conn: Any) -> None:
    """RabbitMQ answers 405 (not 406) when the exclusive flag differs (aiormq relies on it)."""
    ch0 = conn.channel()
    ch0.queue_declare("excl-mismatch", exclusive=True)
    ch1 = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch1.queue_declare("excl-mismatch")
    assert info.value.reply_code == 405
    ch0.queue_delete("excl-mismatch")


def test_per_message_ttl(conn: Any) -> None:
    ch = conn.channel()
    ch.queue_declare("ttl-q")
    ch.basic_publish("", "ttl-q", b"gone", pika.BasicProperties(expiration="0"))
    ch.basic_publish("", "ttl-q", b"kept", pika.BasicProperties(expiration="3600000"))
    # TTL 0 with nobody to take it: expired as soon as it is looked at (at the head)
    assert ch.queue_declare("ttl-q", passive=True).method.message_count == 1
    _m, props, body = ch.basic_get("ttl-q", auto_ack=True)
    assert body == b"kept" and props.expiration == "3600000"  # the property travels on
    # a consumer with credit still gets a TTL-0 message at once
    got: list[bytes] = []
    ch.basic_consume("ttl-q", lambda c, m, p, b: got.append(b), auto_ack=True)
    ch.basic_publish("", "ttl-q", b"now", pika.BasicProperties(expiration="0"))
    wait_until(conn, lambda: got == [b"now"])
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.basic_publish("", "ttl-q", b"bad", pika.BasicProperties(expiration="soon"))
        ch.queue_declare("ttl-q", passive=True)
    assert info.value.reply_code == 406
    ch = conn.channel()  # a digit to Python's str.isdigit, but not a number: 406 too
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.basic_publish("", "ttl-q", b"bad", pika.BasicProperties(expiration="\u00b2"))
        ch.queue_declare("ttl-q", passive=True)
    assert info.value.reply_code == 406


def test_exchange_to_exchange_bindings(conn: Any) -> None:
    ch = conn.channel()
    ch.exchange_declare("e2e.in", "topic")
    ch.exchange_declare("e2e.fan", "fanout")
    ch.exchange_declare("e2e.direct", "direct")
    ch.queue_declare("e2e.q1")
    ch.queue_declare("e2e.q2")
    ch.exchange_bind("e2e.fan", "e2e.in", "sensors.#")  # destination, source, key
    ch.exchange_bind("e2e.direct", "e2e.in", "#")
    ch.exchange_bind("e2e.in", "e2e.fan")  # a cycle: must not loop
    ch.queue_bind("e2e.q1", "e2e.fan")
    ch.queue_bind("e2e.q1", "e2e.direct", "sensors.t")  # second path to q1: one copy
    ch.queue_bind("e2e.q2", "e2e.direct", "other")
    ch.basic_publish("e2e.in", "sensors.t", b"t")
    ch.basic_publish("e2e.in", "other", b"o")

    assert bodies(ch, "e2e.q1") == [b"t"]
    assert bodies(ch, "e2e.q2") == [b"o"]
    ch.exchange_unbind("e2e.fan", "e2e.in", "sensors.#")
    ch.exchange_unbind("e2e.fan", "e2e.in", "sensors.#")  # unbinding twice is fine
    ch.basic_publish("e2e.in", "sensors.x", b"x")
    assert bodies(ch, "e2e.q1") == []
    ch.exchange_delete("e2e.direct")  # its bindings as destination go with it
    ch.basic_publish("e2e.in", "other", b"o2")
    assert bodies(ch, "e2e.q2") == []
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.exchange_bind("e2e.missing", "e2e.in")
    assert info.value.reply_code == 404


def test_queue_length_limit_and_ttl_arguments(conn: Any) -> None:
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("maxlen", arguments={"x-max-length": 2})  # overflow drop-head
    for i in range(4):
        ch.basic_publish("", "maxlen", b"%d" % i)
    assert [ch.basic_get("maxlen", auto_ack=True)[2] for _ in range(2)] == [b"2", b"3"]

    ch.queue_declare("rejecting", arguments={"x-max-length": 1,
                                             "x-overflow": "reject-publish"})
    ch.basic_publish("", "rejecting", b"first")
    with pytest.raises(pika.exceptions.NackError):
        ch.basic_publish("", "rejecting", b"second")  # full: nacked, not taken
    assert ch.basic_get("rejecting", auto_ack=True)[2] == b"first"
    ch.basic_publish("", "rejecting", b"third")  # room again: acked
    assert ch.basic_get("rejecting", auto_ack=True)[2] == b"third"

    ch.queue_declare("qttl", arguments={"x-message-ttl": 0})
    ch.basic_publish("", "qttl", b"expires")
    assert ch.queue_declare("qttl", passive=True).method.message_count == 0

    with pytest.raises(ChannelClosedByBroker) as info:
        ch.queue_declare("badlen", arguments={"x-max-length": -1})
    assert info.value.reply_code == 406


def test_headers_exchange(conn: Any) -> None:
    ch = conn.channel()
    ch.exchange_declare("hx", "headers")
    for q in ("h-all", "h-any", "h-void"):
        ch.queue_declare(q)
    ch.queue_bind("h-all", "hx", arguments={"x-match": "all", "kind": "temp", "site": 7})
    ch.queue_bind("h-any", "hx", arguments={"x-match": "any", "kind": "temp", "site": 7})
    ch.queue_bind("h-void", "amq.headers", arguments={"flag": None})  # presence only
    ch.basic_publish("hx", "", b"both", pika.BasicProperties(headers={"kind": "temp",
                                                                      "site": 7}))
    ch.basic_publish("hx", "", b"one", pika.BasicProperties(headers={"kind": "temp"}))
    ch.basic_publish("hx", "", b"none", pika.BasicProperties(headers={"kind": "hum"}))
    ch.basic_publish("amq.headers", "", b"flagged", pika.BasicProperties(headers={"flag": 0}))

    assert bodies(ch, "h-all") == [b"both"]
    assert bodies(ch, "h-any") == [b"both", b"one"]
    assert bodies(ch, "h-void") == [b"flagged"]
    ch.queue_unbind("h-any", "hx", arguments={"x-match": "any", "kind": "temp", "site": 7})
    ch.basic_publish("hx", "", b"after", pika.BasicProperties(headers={"kind": "temp"}))
    assert bodies(ch, "h-any") == []

    with pytest.raises(ChannelClosedByBroker) as info:  # RabbitMQ checks x-match on the bind
        ch.queue_bind("h-any", "hx", arguments={"x-match": "some", "kind": "temp"})
    assert info.value.reply_code == 406
    assert "invalid x-match" in info.value.reply_text
