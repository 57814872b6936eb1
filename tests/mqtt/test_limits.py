"""The MQTT bounds of issue 14 in the sans-IO core, on a real RocksDB store: SUBSCRIBE
replacement (MQTT-3.8.4-3), the paced retained replay, topic bounds, retained / queue /
session bounds, and the codec's side of them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from oxiedge.mqtt import codec, persist
from oxiedge.mqtt.broker import REPLAY_BATCH, Broker
from oxiedge.mqtt.codec import Decoder, ProtocolError, TopicTooLong, decode_all, encode
from oxiedge.mqtt.packets import Publish, Pubrel, Subscribe
from oxiedge.mqtt.session import Limits
from oxiedge.mqtt.topics import topic_limit_problem
from oxiedge.store import Store


class Wire:
    """Captures what a session writes; ``out_bytes`` is set by the test (back-pressure)."""

    def __init__(self) -> None:
        self.out_bytes = 0
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data

    def publishes(self) -> list[Publish]:
        out, self.data = decode_all(self.data), b""
        return [p for p in out if isinstance(p, Publish)]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(tmp_path / "db")
    yield s
    s.close()


def _retain(b: Broker, n: int, qos: int = 0) -> None:
    for i in range(n):
        b.route(f"r/{i}", b"v%d" % i, qos, True)


def test_identical_filters_in_one_packet_are_one_subscription(store: Store) -> None:
    b = Broker(store, Limits(100))
    s, _, _ = b.open_session("dup", clean=False)
    store.commit_blocking()
    packet = [("a/#", 0), ("b", 1), ("a/#", 2)] + [("#", 1)] * 1000
    codes, resulting, staged = b.subscribe(s, packet)
    assert codes == [0, 1, 2] + [1] * 1000  # one code per filter as sent (MQTT-3.8.4-5)
    assert resulting == [("b", 1), ("a/#", 2), ("#", 1)]  # the last occurrence wins
    assert staged and len(b.subscriptions) == 3 and s.subs["a/#"] == 2
    store.commit_blocking()
    # The same subscriptions again change nothing: no record is staged.
    codes, resulting, staged = b.subscribe(s, [("#", 1)] * 10)
    assert (codes, resulting, staged) == ([1] * 10, [("#", 1)], False)
    assert not store.committer.pending


def test_retained_replay_once_per_resulting_subscription() -> None:
    b = Broker(None, Limits(100))
    _retain(b, 5)
    s, _, _ = b.open_session("r", clean=True)
    wire = s.conn = Wire()
    _codes, resulting, _ = b.subscribe(s, [("#", 0)] * 100_000)
    b.queue_retained(s, resulting)
    b.replay_step(s)
    sent = wire.publishes()
    assert sorted(p.topic for p in sent) == [f"r/{i}" for i in range(5)]
    assert all(p.retain for p in sent) and s.replay is None  # MQTT-3.3.1-8
    # A later SUBSCRIBE of the same filter owes them again (MQTT-3.8.4-3), once.
    for _ in range(3):
        b.queue_retained(s, b.subscribe(s, [("#", 0)])[1])
    assert s.replay is not None and s.replay.owed() == 1
    b.replay_step(s)
    assert len(wire.publishes()) == 5


def test_replay_waits_for_the_output_buffer_and_is_bounded_per_step() -> None:
    b = Broker(None, Limits(100, out_limit=1000))
    _retain(b, 3 * REPLAY_BATCH)
    s, _, _ = b.open_session("slow", clean=True)
    wire = s.conn = Wire()
    b.queue_retained(s, b.subscribe(s, [("r/+", 0)])[1])
    wire.out_bytes = 1000  # full: nothing goes out
    b.replay_step(s)
    assert wire.publishes() == []
    wire.out_bytes = 0
    b.replay_step(s)
    assert len(wire.publishes()) == REPLAY_BATCH  # one step, then other tasks run
    b.replay_step(s)
    b.replay_step(s)
    assert len(wire.publishes()) == 2 * REPLAY_BATCH
    b.replay_step(s)
    assert wire.publishes() == [] and s.replay is None


def test_replay_of_qos1_follows_the_inflight_window(store: Store) -> None:
    b = Broker(store, Limits(100, max_inflight=2))
    _retain(b, 5, qos=1)
    s, _, _ = b.open_session("win", clean=False)
    wire = s.conn = Wire()
    b.queue_retained(s, b.subscribe(s, [("r/#", 1)])[1])
    b.replay_step(s)
    # Two in flight, one waiting in the queue: the replay stops there, not at 5.
    assert len(wire.publishes()) == 2 and len(s.queue) == 1
    for pid in list(s.inflight):
        s.on_puback(pid)
    b.replay_step(s)
    for pid in list(s.inflight):
        s.on_puback(pid)
    b.replay_step(s)
    assert len(wire.publishes()) == 3 and s.replay is None and not s.queue


def test_unsubscribe_cancels_the_owed_replay() -> None:
    b = Broker(None, Limits(100, out_limit=10))
    _retain(b, 10)
    s, _, _ = b.open_session("u", clean=True)
    wire = s.conn = Wire()
    b.queue_retained(s, b.subscribe(s, [("r/#", 0)])[1])
    wire.out_bytes = 10
    b.replay_step(s)
    b.unsubscribe(s, ["r/#"])  # MQTT-3.10.4-2: nothing more for the deleted subscription
    wire.out_bytes = 0
    b.replay_step(s)
    assert wire.publishes() == [] and s.replay is None


def test_topic_bounds_refuse_filters_with_0x80() -> None:
    b = Broker(None, Limits(100, max_topic_levels=3, max_topic_length=20))
    s, _, _ = b.open_session("t", clean=True)
    codes, resulting, _ = b.subscribe(s, [("a/b/c/d", 0), ("a/b/c/d/e", 1), ("x" * 21, 0),
                                          ("a/+/#", 1), ("a/b#", 0)])  # fmt: skip
    assert codes == [0, 0x80, 0x80, 1, 0x80]
    assert resulting == [("a/b/c/d", 0), ("a/+/#", 1)]
    assert b.stats.topics_refused == 2  # the malformed 'a/b#' is not a bound
    assert topic_limit_problem("/" * 200, 200, 4096) is None
    assert topic_limit_problem("/" * 201, 200, 4096) is not None
    assert topic_limit_problem("é" * 2049, 200, 4096) is not None  # bytes, not characters


def test_subscriptions_per_session_bound() -> None:
    b = Broker(None, Limits(100, max_subscriptions=3))
    s, _, _ = b.open_session("m", clean=True)
    codes, _, _ = b.subscribe(s, [(f"f/{i}", 1) for i in range(5)] + [("f/0", 2)])
    assert codes == [1, 1, 1, 0x80, 0x80, 2]  # re-subscribing a held filter still works
    assert b.stats.subscriptions_refused == 2 and len(s.subs) == 3


def test_subscription_levels_bound_all_sessions_together() -> None:
    b = Broker(None, Limits(100, max_subscription_levels=10))
    a, _, _ = b.open_session("a", clean=True)
    c, _, _ = b.open_session("c", clean=True)
    assert b.subscribe(a, [("x/y/z", 0), ("x/y/z", 1), ("p/q", 0)])[0] == [0, 1, 0]
    assert b.subscription_levels == 5  # a repeated filter counts once
    assert b.subscribe(c, [("1/2/3/4", 0), ("5/6", 0)])[0] == [0, 0x80]
    assert b.stats.subscriptions_refused == 1
    b.unsubscribe(a, ["p/q"])
    assert b.subscribe(c, [("5/6", 0)])[0] == [0]
    b.discard_session(a)
    b.discard_session(c)
    assert b.subscription_levels == 0


def test_retained_bounds_count_and_bytes(store: Store) -> None:
    b = Broker(store, Limits(100, retained_max=3, retained_bytes=100))
    for i in range(5):
        b.route(f"k/{i}", b"x", 1, True)
    assert len(b.retained) == 3 and b.stats.retained_refused == 2
    b.route("k/0", b"y" * 10, 1, True)  # replacing an existing topic is within the count
    assert b.retained.get("k/0").msg.payload == b"y" * 10  # type: ignore[union-attr]
    b.route("k/1", b"z" * 200, 1, True)  # over the bytes: refused, and the stale one goes
    assert b.retained.get("k/1") is None and b.stats.retained_refused == 3
    assert b.retained_bytes == sum(len(t) + len(r.msg.payload) for t, r in b.retained.items())
    store.commit_blocking()
    again = Broker(store, Limits(100))
    again.recover()
    assert sorted(t for t, _ in again.retained.items()) == ["k/0", "k/2"]
    assert again.retained_bytes == b.retained_bytes


def test_queue_bytes_bound_drops_oldest_and_recovery_applies_it(store: Store) -> None:
    b = Broker(store, Limits(1000, queue_bytes=1000))
    s, _, _ = b.open_session("q", clean=False)
    b.subscribe(s, [("q", 1)])
    for i in range(20):
        b.route("q", bytes([i]) * 99, 1, False)  # 100 bytes with the topic
    assert [p.msg.payload[0] for p in s.queue] == list(range(10, 20))
    assert s.queue_bytes == 1000 and b.stats.dropped_queue_bytes == 10
    store.commit_blocking()
    assert len(list(store.iter_raw(persist.CF, persist.MSG))) == 10
    smaller = Broker(store, Limits(1000, queue_bytes=500))
    assert smaller.recover() == (1, 5)
    r = smaller.sessions["q"]
    assert [p.msg.payload[0] for p in r.queue] == list(range(15, 20)) and r.queue_bytes == 500
    assert r.dropped == 5 and r.next_seq == 20  # seqs are never reused
    store.commit_blocking()
    assert len(list(store.iter_raw(persist.CF, persist.MSG))) == 5


def test_session_room() -> None:
    b = Broker(None, Limits(100, max_sessions=2))
    b.open_session("a", clean=True)
    assert b.session_room("b")
    b.open_session("b", clean=True)
    assert not b.session_room("c") and b.session_room("a")


def test_codec_topic_bounds_and_cache_bytes() -> None:
    d = Decoder(max_topic_levels=2, max_topic_length=10)
    d.feed(encode(Publish("a/b/c", b"x")))
    assert d.next_packet() == Publish("a/b/c", b"x")
    d.feed(encode(Publish("a/b/c/d", b"x")))
    with pytest.raises(TopicTooLong):
        d.next_packet()
    d = Decoder(max_topic_length=65535)
    for i in range(300):
        d.feed(encode(Publish(f"{i}/" + "t" * 5000, b"x")))
        assert d.next_packet() is not None
    assert codec.topic_cache_bytes() <= 1 << 20
    assert not any(len(raw) > 256 for raw in codec._TOPIC_CACHE)


def test_mqtt31_dup_flag_on_pubrel_only_for_level_3() -> None:
    frame = bytes((0x6A, 2, 0, 1))  # PUBREL with DUP, as MQTT 3.1 clients re-send it
    d = Decoder()
    d.feed(frame)
    with pytest.raises(ProtocolError):
        d.next_packet()  # MQTT-2.2.2-2 in 3.1.1
    d = Decoder()
    d.mqtt31 = True
    sub = bytearray(encode(Subscribe(2, (("a", 1),))))
    sub[0] |= 0x08  # a re-sent 3.1 SUBSCRIBE
    d.feed(frame + bytes(sub))
    assert d.next_packet() == Pubrel(1)
    assert d.next_packet() == Subscribe(2, (("a", 1),))
