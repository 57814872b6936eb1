"""Topic matching and exchange routing without a server."""

from __future__ import annotations

import pytest

from oxiedge.amqp.exchanges import Binding, Exchange, topic_matches
from oxiedge.amqp.queues import Queue


@pytest.mark.parametrize("pattern,key,expected", [
    ("a.b.c", "a.b.c", True),
    ("a.*.c", "a.b.c", True),
    ("a.*.c", "a.c", False),
    ("a.*", "a.b.c", False),
    ("a.#", "a", True),
    ("a.#", "a.b.c", True),
    ("#", "anything.at.all", True),
    ("#.c", "c", True),
    ("a.#.c", "a.c", True),
    ("a.#.c", "a.x.y.c", True),
    ("a.#.c", "a.x.y.d", False),
    ("#.b.#", "a.b.c", True),
    ("*.*", "a", False),
    ("*", "a", True),
    ("#.#.#", "a.b", True),
])
def test_topic_matches(pattern: str, key: str, expected: bool) -> None:
    assert topic_matches(pattern, key) is expected


def test_many_hashes_do_not_backtrack() -> None:
    pattern = ".".join(["#", "x"] * 20)
    key = ".".join(["y"] * 120)
    assert topic_matches(pattern, key) is False


def test_one_copy_per_queue_and_cache_invalidation() -> None:
    x = Exchange("t", "topic")
    q = Queue("q", 1)
    x.add(Binding("t", q, "a.*", {}))
    x.add(Binding("t", q, "#", {}))
    assert x.route("a.b") == [q]
    x.remove("q", "a.*")
    x.remove("q", "#")
    assert x.route("a.b") == []


def test_queue_limit_drops_oldest_and_counts() -> None:
    from oxiedge.amqp.queues import QueuedMessage

    dropped = []
    q = Queue("q", 1, limit=3, on_drop=lambda _q, m: dropped.append(m.seq))
    for seq in range(1, 6):
        q.enqueue(QueuedMessage(seq, "", "q", b"\x00\x00", b""))
    assert [m.seq for m in q.ready] == [3, 4, 5] and q.dropped == 2 and dropped == [1, 2]


def test_requeue_restores_publish_order() -> None:
    from oxiedge.amqp.queues import QueuedMessage

    q = Queue("q", 1)
    msgs = [QueuedMessage(seq, "", "q", b"\x00\x00", b"") for seq in range(1, 8)]
    for m in msgs:
        q.enqueue(m)
    taken = [q.ready.popleft() for _ in range(5)]  # 1..5 delivered, 6, 7 still ready
    for m in reversed(taken[1:]):  # nacked one by one, newest first: 5, 4, 3, 2
        q.requeue([m])
    q.requeue([taken[0]])
    assert [m.seq for m in q.ready] == [1, 2, 3, 4, 5, 6, 7]
    assert all(m.redelivered for m in list(q.ready)[:5])
    assert not any(m.redelivered for m in list(q.ready)[5:])
