"""The queue log's record decoder (``amqp/queuelog.Codec``) in-process: its caches."""

from __future__ import annotations

import gc
import tracemalloc
from collections import deque

from oxiedge.amqp import persist
from oxiedge.amqp.properties import rewrite
from oxiedge.amqp.queuelog import Codec
from oxiedge.amqp.queues import Queue, QueuedMessage


def test_a_cache_hit_decodes_each_record_as_its_own() -> None:
    codec = Codec(Queue("q", 1, durable=True))
    small = [rewrite(b"\x00\x00", {"n": str(i)}) for i in range(3)]
    records = [persist.encode_record("x", f"k{i % 2}", small[i % 3], b"body%d" % i)
               for i in range(12)]
    for seq, record in enumerate(records * 2):  # the second pass is served by the caches
        msg = codec.decode(seq, record)
        i = seq % 12
        assert msg is not None
        assert (msg.exchange, msg.routing_key, msg.properties, msg.body) == (
            "x", f"k{i % 2}", small[i % 3], b"body%d" % i)


def test_large_property_blocks_do_not_stay_in_the_decode_cache() -> None:
    codec = Codec(Queue("q", 1, durable=True))
    big = 60_000
    blocks = [rewrite(b"\x00\x00", {"h": f"{i:06d}" + "x" * big}) for i in range(40)]
    records = [persist.encode_record("", "q", block, b"") for block in blocks]
    del blocks
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for seq, record in enumerate(records):
            assert codec.decode(seq, record) is not None
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 10 * big, kept  # (each block kept: 40 of them)


def _pairs(records: list[bytes], first: int = 0) -> list[tuple[bytes, bytes]]:
    return [(persist.msg_key(1, first + i), r) for i, r in enumerate(records)]


def test_a_run_of_records_decodes_as_one_at_a_time_and_stops_where_decode_would_not() -> None:
    """``decode_run`` gives what ``decode`` gives record by record, and stops before a
    record that does not decode, one it skips (an earlier run's transient message) and
    a key of the wrong length: the reader passes those to ``decode`` (quarantine)."""
    props = [b"\x00\x00", rewrite(b"\x00\x00", {"n": "1"})]
    good = [persist.encode_record("x" if i % 5 else "", f"k{i // 3}", props[i // 4 % 2],
                                  b"body%d" % i) for i in range(20)]
    bad = good[3][:-len(b"body3") - 3]  # cut inside its property block
    transient = persist.VOLATILE + good[4]
    records = [*good[:6], bad, *good[6:12], transient, *good[12:]]
    pairs = _pairs(records, 100)
    pairs.insert(16, (persist.msg_key(1, 115) + b"!", good[0]))
    one_by_one = Codec(Queue("q", 1, durable=True))
    one_by_one.recovered_tail = 120
    codec = Codec(Queue("q", 1, durable=True))
    codec.recovered_tail = 120
    out: deque[QueuedMessage] = deque()
    stops, i, width = [], 0, len(pairs[0][0])
    while i < len(pairs):
        i, _size = codec.decode_run(pairs, i, width, out, 1 << 20)
        stops.append(i)
        i += 1
    assert stops == [6, 13, 16, len(pairs)]
    expected = []
    for j, (key, value) in enumerate(pairs):
        if j not in (6, 13, 16):
            msg = one_by_one.decode(int.from_bytes(key[-8:], "big"), value)
            assert msg is not None
            expected.append(msg)
    assert [(m.seq, m.exchange, m.routing_key, m.properties, m.body, m.stored, m.redelivered)
            for m in out] == [
        (m.seq, m.exchange, m.routing_key, m.properties, m.body, m.stored, m.redelivered)
        for m in expected]


def test_a_run_stops_once_its_bodies_fill_the_room() -> None:
    codec = Codec(Queue("q", 1, durable=True))
    pairs = _pairs([persist.encode_record("", "q", b"\x00\x00", b"x" * 10)] * 10)
    out: deque[QueuedMessage] = deque()
    assert codec.decode_run(pairs, 2, len(pairs[0][0]), out, 25) == (5, 30)
    assert [m.seq for m in out] == [2, 3, 4]


def test_a_record_of_no_known_version_does_not_decode_before_any_other_was_decoded() -> None:
    """A fresh codec has no record before to compare with: a damaged record (here its
    version byte) must not pass as one (it is quarantined on read-back)."""
    good = persist.encode_record("", "", b"\x00\x00", b"body")
    for damaged in (b"\xff" + good[1:], b"\xff\x00\x00\x00\x00body", b"\xff"):
        codec = Codec(Queue("q", 1, durable=True))
        try:
            msg = codec.decode(1, damaged)
        except ValueError:
            msg = None
        else:
            raise AssertionError(f"decoded {damaged!r}: {msg and msg.body!r}")
        out: deque[QueuedMessage] = deque()
        codec = Codec(Queue("q", 1, durable=True))
        assert codec.decode_run(_pairs([damaged, good]), 0, 17, out, 1 << 20) == (0, 0)
    codec = Codec(Queue("q", 1, durable=True))
    msg = codec.decode(2, good)  # (the record the empty cache stands for decodes alike)
    assert msg is not None and (msg.exchange, msg.routing_key, msg.properties, msg.body) == (
        "", "", b"\x00\x00", b"body")
