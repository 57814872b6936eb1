"""The sans-IO broker core on a real RocksDB store (no server, no sockets).

``Wire`` stands where a connection would be: it records the bytes a session writes.
"""

from __future__ import annotations

from oxiedge.mqtt import persist
from oxiedge.mqtt.broker import Broker
from oxiedge.mqtt.codec import decode_all
from oxiedge.mqtt.packets import Publish, Pubrel
from oxiedge.mqtt.session import Limits
from oxiedge.staged import COMMIT, MQTT, NOTHING, MessageProps, Origin, Staged
from oxiedge.store import Store


class Wire:
    """Captures what a session writes to its connection."""

    def __init__(self) -> None:
        self.out_bytes = 0
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data

    def packets(self) -> list[object]:
        out, self.data = decode_all(self.data), b""
        return list(out)


def msg_keys(store: Store) -> list[bytes]:
    return [k for k, _ in store.iter_raw(persist.CF, persist.MSG)]


def test_no_durable_match_means_no_store_work(store: Store) -> None:
    b = Broker(store, Limits(10))
    s, present, staged = b.open_session("live", clean=True)
    assert (present, staged) == (False, False)
    s.conn = Wire()
    b.subscribe(s, [("a/#", 1)])
    assert not store.committer.pending
    assert b.route("a/b", b"x", 1, False) is False  # clean session: memory only
    assert b.route("nobody/here", b"x", 1, False) is False
    assert not store.committer.pending


def test_durable_copy_staged_and_recovered(store: Store) -> None:
    b = Broker(store, Limits(10))
    s, _, staged = b.open_session("dur", clean=False)
    assert staged
    b.subscribe(s, [("t/+", 2)])
    assert b.route("t/1", b"one", 1, False) is True
    assert b.route("t/1", b"one", 2, False) is True  # identical payload: its own record
    assert b.route("t/2", b"zero", 0, False) is False  # QoS 0 is not queued offline
    store.commit_blocking()
    again = Broker(store, Limits(10))
    assert again.recover() == (1, 2)
    r = again.sessions["dur"]
    assert [(p.seq, p.msg.payload, p.qos, p.dup) for p in r.queue] == [
        (0, b"one", 1, True), (1, b"one", 2, True)
    ]  # fmt: skip
    assert r.subs == {"t/+": 2}
    assert r.next_seq == 2
    assert [k for k, _ in again.subscriptions.match("t/9")] == [r]


def test_ack_deletes_by_client_and_seq(store: Store) -> None:
    b = Broker(store, Limits(10))
    s, _, _ = b.open_session("acker", clean=False)
    b.subscribe(s, [("t", 1)])
    for _ in range(3):
        b.route("t", b"same", 1, False)
    wire = Wire()
    s.conn = wire
    s.pump()
    sent = wire.packets()
    assert [p.packet_id for p in sent] == [1, 2, 3]  # type: ignore[attr-defined]
    s.on_puback(2)
    store.commit_blocking()
    seqs = [int.from_bytes(k[9:], "big") for k in msg_keys(store)]
    assert seqs == [0, 2]  # the middle twin is gone, the other two stay


def test_queue_bound_drops_oldest_on_disk_too(store: Store) -> None:
    b = Broker(store, Limits(queue_limit=3))
    s, _, _ = b.open_session("small", clean=False)
    b.subscribe(s, [("q", 1)])
    for i in range(7):
        b.route("q", str(i).encode(), 1, False)
    assert [p.msg.payload for p in s.queue] == [b"4", b"5", b"6"]
    assert s.dropped == 4 and b.stats.dropped == 4
    store.commit_blocking()
    assert len(msg_keys(store)) == 3
    assert s.row()["dropped"] == 4 and s.row()["queued"] == 3


def test_recovery_removes_surplus_over_bound(store: Store) -> None:
    b = Broker(store, Limits(queue_limit=100))
    s, _, _ = b.open_session("many", clean=False)
    b.subscribe(s, [("m", 1)])
    for i in range(10):
        b.route("m", str(i).encode(), 1, False)
    store.commit_blocking()
    small = Broker(store, Limits(queue_limit=4))
    assert small.recover() == (1, 4)
    assert [p.msg.payload for p in small.sessions["many"].queue] == [b"6", b"7", b"8", b"9"]
    store.commit_blocking()
    assert len(msg_keys(store)) == 4


def test_qos2_outbound_rel_and_resend_order(store: Store) -> None:
    b = Broker(store, Limits(10))
    s, _, _ = b.open_session("q2", clean=False)
    b.subscribe(s, [("x", 2)])
    wire = Wire()
    s.conn = wire
    for i in range(3):
        b.route("x", str(i).encode(), 2, False)
    # QoS 2 deliveries are held until the round with their records has committed.
    assert wire.packets() == []
    hold = b.take_hold()
    assert hold is not None and b.take_hold() is None
    store.commit_blocking()
    hold.release()
    assert [p.packet_id for p in wire.packets()] == [1, 2, 3]  # type: ignore[attr-defined]
    s.on_pubrec(1)
    s.conn = None  # connection lost
    store.commit_blocking()
    assert [k[0:1] for k, _ in store.iter_raw(persist.CF, persist.REL)] == [b"r"]
    wire2 = Wire()
    s.conn = wire2
    s.resend()
    # MQTT-4.4.0-1: PUBREL for 1, then PUBLISH 2 and 3 with DUP, in the original order.
    got = wire2.packets()
    assert got[0] == Pubrel(1)
    assert [(p.packet_id, p.dup) for p in got[1:]] == [(2, True), (3, True)]  # type: ignore[attr-defined]
    s.on_pubcomp(1)
    store.commit_blocking()
    assert list(store.iter_raw(persist.CF, persist.REL)) == []


def test_packet_ids_wrap_and_never_collide(store: Store) -> None:
    b = Broker(None, Limits(queue_limit=70_000, max_inflight=4))
    s, _, _ = b.open_session("wrap", clean=False)
    b.subscribe(s, [("w", 1)])
    wire = Wire()
    s.conn = wire
    b.route("w", b"stuck", 1, False)  # seq 0 -> packet id 1, never acknowledged
    wire.packets()
    for _ in range(65_534):
        b.route("w", b"x", 1, False)
        for p in wire.packets():
            s.on_puback(p.packet_id)  # type: ignore[attr-defined]
    b.route("w", b"wraps", 1, False)  # seq 65535 -> packet id 1 again: must wait
    assert wire.packets() == []
    assert [p.msg.payload for p in s.queue] == [b"wraps"]
    s.on_puback(1)  # the stuck one is acknowledged: the wrapped one may go
    [p] = wire.packets()
    assert isinstance(p, Publish) and (p.packet_id, p.payload) == (1, b"wraps")


def test_retained_set_replace_clear_persisted(store: Store) -> None:
    b = Broker(store, Limits(10))
    assert b.route("r/a", b"1", 0, True) is True  # stage + kick for QoS 0
    b.route("r/a", b"2", 1, True)
    b.route("r/b", b"3", 1, True)
    b.route("r/b", b"", 1, True)
    assert b.route("r/none", b"", 1, True) is False  # clearing nothing stages nothing
    store.commit_blocking()
    again = Broker(store, Limits(10))
    again.recover()
    assert again.retained_rows() == [{"topic": "r/a", "qos": 1, "bytes": 1}]


def test_bus_sees_every_publish_and_can_require_commit(store: Store) -> None:
    b = Broker(None, Limits(10))
    seen: list[tuple[str, bytes, int, bool]] = []
    origins: list[Origin] = []

    class Destinations:  # what lies beyond MQTT, as the router sees the bus
        def fan_out(self, origin: Origin, topic: str, payload: bytes, qos: int,
                    retain: bool, props: MessageProps | None = None) -> Staged:
            seen.append((topic, payload, qos, retain))
            origins.append(origin)
            return COMMIT if topic.startswith("durable/") else NOTHING

    assert b.route("plain", b"1", 1, False) is False  # no bus: nothing
    b.bus = Destinations()
    assert b.route("plain", b"2", 1, False) is False
    assert b.route("durable/x", b"3", 0, True) is True
    assert seen == [("plain", b"2", 1, False), ("durable/x", b"3", 0, True)]
    assert origins == [MQTT, MQTT]  # a client's publish carries the MQTT origin


def test_clean_connect_discards_durable_session(store: Store) -> None:
    b = Broker(store, Limits(10))
    s, _, _ = b.open_session("c", clean=False)
    b.subscribe(s, [("z", 1)])
    b.route("z", b"q", 1, False)
    store.commit_blocking()
    _s2, present, staged = b.open_session("c", clean=True)
    assert (present, staged) == (False, True)
    store.commit_blocking()
    assert list(store.iter_raw(persist.CF)) == []
    assert list(b.subscriptions.match("z")) == []


def _delivered(w: Wire) -> list[tuple[str, bytes, int]]:
    return [(p.topic, p.payload, p.qos) for p in w.packets() if isinstance(p, Publish)]


def test_route_cache_follows_every_subscription_change() -> None:
    """The topic -> subscribers cache is dropped on subscribe, unsubscribe and session
    discard: a publish right after each change reaches exactly the new set."""
    b = Broker(None, Limits(10))
    a, _, _ = b.open_session("a", clean=True)
    c, _, _ = b.open_session("c", clean=True)
    wa, wc = Wire(), Wire()
    a.conn, c.conn = wa, wc
    b.subscribe(a, [("s/+", 0)])
    b.route("s/1", b"1", 1, False)  # cached: only a
    assert _delivered(wa) == [("s/1", b"1", 0)] and _delivered(wc) == []
    b.subscribe(c, [("s/#", 1)])
    b.subscribe(a, [("s/1", 1)])  # overlapping filter: one copy at the highest QoS
    b.route("s/1", b"2", 1, False)
    assert _delivered(wa) == [("s/1", b"2", 1)] and _delivered(wc) == [("s/1", b"2", 1)]
    b.unsubscribe(c, ["s/#"])
    b.route("s/1", b"3", 0, False)
    assert _delivered(wa) == [("s/1", b"3", 0)] and _delivered(wc) == []
    b.discard_session(a)
    b.route("s/1", b"4", 0, False)
    assert _delivered(wa) == [] and _delivered(wc) == []


def test_route_cache_is_bounded() -> None:
    from oxiedge.mqtt.broker import ROUTE_CACHE_MAX

    b = Broker(None, Limits(10))
    s, _, _ = b.open_session("x", clean=True)
    w = Wire()
    s.conn = w
    b.subscribe(s, [("n/#", 0)])
    for i in range(ROUTE_CACHE_MAX + 10):
        b.route(f"n/{i}", b"", 0, False)
    assert len(b._routes) <= ROUTE_CACHE_MAX
    assert len(_delivered(w)) == ROUTE_CACHE_MAX + 10
