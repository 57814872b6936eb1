"""The queue log's record decoder (``amqp/queuelog.Codec``) in-process: its caches."""

from __future__ import annotations

import gc
import tracemalloc

from oxiedge.amqp import persist
from oxiedge.amqp.properties import rewrite
from oxiedge.amqp.queuelog import Codec
from oxiedge.amqp.queues import Queue


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
