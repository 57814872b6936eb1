"""Dead-letter headers and queue timers in-process (no server)."""

from __future__ import annotations

import time
from typing import Any

import trio
import trio.testing

from oxiedge.amqp import spec
from oxiedge.amqp.deadletter import delivery_count_of, is_cycle, mark_dead, with_delivery_count
from oxiedge.amqp.queued import QueuedMessage
from oxiedge.amqp.queues import Queue
from oxiedge.amqp.timers import QueueTimers
from tests.amqp.typed_headers import TYPED, typed_properties


def headers(raw: bytes) -> dict[str, Any]:
    props, _ = spec.BasicProperties.decode(raw)
    return props.headers or {}


def test_mark_dead_prepends_merges_and_keeps_first_death() -> None:
    raw = spec.BasicProperties(headers={"app": 1}, expiration="100").encode()
    raw, _ = mark_dead(raw, "a", "expired", "in", ["k"], 1000.0)
    raw, _ = mark_dead(raw, "b", "rejected", "dlx", ["k"], 1001.0)
    raw, deaths = mark_dead(raw, "a", "expired", "dlx", ["k2"], 1002.0)
    h = headers(raw)
    assert [(d["queue"], d["reason"], d["count"]) for d in h["x-death"]] == [
        ("a", "expired", 2), ("b", "rejected", 1)]
    first = h["x-death"][0]
    assert first["exchange"] == "in" and first["routing-keys"] == ["k"] and first["time"] == 1000
    assert first["original-expiration"] == "100"
    assert (h["x-first-death-queue"], h["x-first-death-exchange"]) == ("a", "in")
    assert (h["x-last-death-queue"], h["x-last-death-exchange"]) == ("a", "dlx")
    assert h["app"] == 1
    assert spec.BasicProperties.decode(raw)[0].expiration is None
    assert deaths == [("a", "expired"), ("b", "rejected")]


def test_cycle_rule_needs_a_rejection() -> None:
    assert is_cycle("a", [("a", "expired")])
    assert is_cycle("a", [("b", "maxlen"), ("a", "expired")])
    assert not is_cycle("a", [("b", "rejected"), ("a", "expired")])
    assert not is_cycle("c", [("a", "expired")])


def test_rewritten_headers_keep_every_other_header_and_property_byte_exact() -> None:
    raw = typed_properties()
    assert spec.BasicProperties.decode(raw)[1] == len(raw)  # the vector is well formed
    once, _ = mark_dead(raw, "a", "expired", "x", ["k"], 1000.0)
    counted = with_delivery_count(once, 2)
    twice, _ = mark_dead(counted, "b", "rejected", "y", ["k"], 1001.0)
    for out in (once, counted, twice):
        for entry in TYPED:
            assert entry in out, entry
        p = spec.BasicProperties.decode(out)[0]
        assert (p.content_type, p.delivery_mode, p.correlation_id, p.timestamp, p.app_id) == (
            "text", 2, "cid", 42, "app")
        assert p.expiration is None  # dead-lettering drops it (and keeps it in x-death)
    # The untouched older x-death entry (queue a) keeps its bytes, its count a Long.
    entry_a = headers(once)["x-death"][0]
    assert entry_a["queue"] == "a" and entry_a["original-expiration"] == "100"
    first_a = once[once.index(b"\x05count"):once.index(b"\x05count") + 15]
    assert first_a == b"\x05countl" + bytes(7) + b"\x01"
    assert twice.count(first_a) == 2  # entry a unchanged, entry b new, both count 1 as 'l'
    assert headers(twice)["x-death"][0]["queue"] == "b"


def test_with_delivery_count_replaces_in_place_and_reads_back() -> None:
    raw = typed_properties()
    out = with_delivery_count(with_delivery_count(raw, 1), 5)
    assert out.count(b"x-delivery-count") == 1
    assert out[: len(raw) - 20].startswith(raw[:6])  # flags and content-type unchanged
    assert delivery_count_of(out) == 5 and delivery_count_of(raw) == 0


def test_unreadable_stored_headers_are_dropped_not_the_message() -> None:
    # A record stored before the headers were checked at arrival: an unknown type 'Z'.
    bad = b"\x20\x00" + b"\x00\x00\x00\x04\x01kZ\x00"
    raw, deaths = mark_dead(bad, "q", "rejected", "", ["q"], 1.0)
    assert deaths == [("q", "rejected")] and headers(raw)["x-death"][0]["queue"] == "q"
    assert with_delivery_count(bad, 2) == bad and delivery_count_of(bad) == 0


def test_delivery_count_header_replaces_and_dead_lettering_removes_it() -> None:
    raw = with_delivery_count(spec.BasicProperties().encode(), 1)
    raw = with_delivery_count(raw, 2)
    assert headers(raw)["x-delivery-count"] == 2
    raw, _ = mark_dead(raw, "q", "delivery_limit", "", ["q"], time.time())
    assert "x-delivery-count" not in headers(raw)


async def test_one_timer_per_queue_expires_the_head_without_polling(
        autojump_clock: trio.testing.MockClock) -> None:
    # The injected clock is trio's (virtual) one: the 50 ms TTL passes without sleeping.
    timers = QueueTimers(clock=trio.current_time)
    expired: list[int] = []
    all_expired = trio.Event()

    def on_expire(_q: Queue, m: QueuedMessage) -> None:
        expired.append(m.seq)
        if len(expired) == 1000:
            all_expired.set()

    q = Queue("q", 1, timers=timers, on_expire=on_expire)
    plain = Queue("p", 2, timers=timers)
    deadline = timers.clock() + 0.05  # one burst, one deadline
    for i in range(1, 1001):
        plain.enqueue(QueuedMessage(i, "", "p", b"\x00\x00", b"x"))
        q.enqueue(QueuedMessage(i, "", "q", b"\x00\x00", b"x", expires=deadline))
        q.saw_deadline()
    assert len(timers) == 1  # one heap entry for 1000 messages with deadlines, none for p
    async with trio.open_nursery() as nursery:
        await nursery.start(timers.run)
        with trio.fail_after(5):
            await all_expired.wait()
        assert trio.current_time() >= deadline  # fired at the deadline, not before
        nursery.cancel_scope.cancel()
    assert expired == list(range(1, 1001)) and not q.ready and len(plain.ready) == 1000
    assert timers.fired == 1  # one wake-up expired the whole run at the head


def test_counts_are_encoded_as_long_like_rabbitmq() -> None:
    """Typed clients (Java's x-death reading) expect ``count`` and ``x-delivery-count``
    as a 64-bit long ('l'), as RabbitMQ writes them."""
    raw, _ = mark_dead(spec.BasicProperties().encode(), "q", "rejected", "", ["q"], 1.0)
    assert b"\x05countl\x00\x00\x00\x00\x00\x00\x00\x01" in raw
    raw = with_delivery_count(spec.BasicProperties().encode(), 3)
    assert b"\x10x-delivery-countl\x00\x00\x00\x00\x00\x00\x00\x03" in raw
