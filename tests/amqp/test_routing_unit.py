"""Topic matching and exchange routing without a server."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiedge.amqp.exchanges import Binding, Exchange, ExchangeBinding
from oxiedge.amqp.queues import Queue
from oxiedge.amqp.routeindex import RouteIndex


def topic_matches(pattern: str, routing_key: str) -> bool:
    """The spec's rule for one pattern, written the plain way (the oracle the routing trie
    is checked against): a set of reachable word positions advanced pattern word by
    pattern word, so several ``#`` cost O(pattern x words), never backtracking."""
    words = routing_key.split(".")
    n = len(words)
    states = {0}
    for p in pattern.split("."):
        if p == "#":
            states = set(range(min(states), n + 1))
        elif p == "*":
            states = {j + 1 for j in states if j < n}
        else:
            states = {j + 1 for j in states if j < n and words[j] == p}
        if not states:
            return False
    return n in states


def trie_matches(pattern: str, routing_key: str) -> bool:
    index: RouteIndex[str] = RouteIndex("topic")
    index.add(pattern, "q")
    return index.match(routing_key) == ["q"]


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
    assert trie_matches(pattern, key) is expected


def test_many_hashes_do_not_backtrack() -> None:
    pattern = ".".join(["#", "x"] * 20)
    key = ".".join(["y"] * 120)
    assert topic_matches(pattern, key) is False
    assert trie_matches(pattern, key) is False


def test_one_copy_per_queue_and_cache_invalidation() -> None:
    x = Exchange("t", "topic")
    q = Queue("q", 1)
    x.add(Binding("t", q, "a.*", {}))
    x.add(Binding("t", q, "#", {}))
    assert x.route("a.b") == [q]
    x.remove("q", "a.*")
    x.remove("q", "#")
    assert x.route("a.b") == []


_words = st.sampled_from(["a", "b", "c", "", "*", "#"])
_patterns = st.lists(_words, min_size=1, max_size=5).map(".".join)
_keys = st.lists(st.sampled_from(["a", "b", "c", "", "*", "#"]), min_size=1,
                 max_size=6).map(".".join)


@settings(max_examples=300, derandomize=True)
@given(st.lists(_patterns, max_size=12), st.lists(_keys, min_size=1, max_size=8))
def test_topic_trie_matches_exactly_what_the_pattern_matcher_does(
        patterns: list[str], keys: list[str]) -> None:
    """The trie (routing) and the one-pattern matcher (the spec's rules) agree on every
    key; removing the bindings one by one leaves an empty trie."""
    index: RouteIndex[str] = RouteIndex("topic")
    for i, p in enumerate(patterns):
        index.add(p, f"q{i % 4}")  # several patterns lead to the same target
    for key in keys:
        want = {f"q{i % 4}" for i, p in enumerate(patterns) if topic_matches(p, key)}
        got = index.match(key)
        assert len(got) == len(set(got)) and set(got) == want, (patterns, key)
    for i, p in enumerate(patterns):
        index.remove(p, f"q{i % 4}")
    assert index.match("#") == [] and not index._root.children


def test_a_target_stays_while_one_of_its_keys_does() -> None:
    for kind in ("direct", "fanout", "topic"):
        index: RouteIndex[str] = RouteIndex(kind)
        index.add("k", "q")
        index.add("k", "q")  # a headers-style second binding under the same key
        index.add("k.x" if kind == "topic" else "k", "r")
        index.remove("k", "q")
        assert set(index.match("k")) >= {"q"}, kind
        index.remove("k", "q")
        assert "q" not in index.match("k"), kind
        index.remove("k", "nobody")  # unknown: ignored


def test_many_bindings_route_through_the_index() -> None:
    """20,000 direct keys and 20,000 topic patterns: a new routing key finds its match
    through the index (before, every cache miss compared the key with every binding: with
    200,000 topic patterns a publish took ~0.2 s of the event loop)."""
    direct, topic = Exchange("d", "direct"), Exchange("t", "topic")
    q, other = Queue("q", 1), Queue("o", 2)
    for i in range(20_000):
        direct.add(Binding("d", other, f"key{i}", {}))
        topic.add(Binding("t", other, f"a.{i}.*.#", {}))
    direct.add(Binding("d", q, "mine", {}))
    topic.add(Binding("t", q, "mine.#", {}))
    assert direct.route("mine") == [q] and direct.route("key7") == [other]
    assert topic.route("mine.x.y") == [q] and topic.route("a.7.x") == [other]
    assert topic.route("b.7.x") == []
    # The trie walk touches only the nodes on the key's path: here the root's "a" child
    # has 20,000 children, but a key reaches one of them by one dict lookup.
    assert len(topic._index._root.children["a"].children) == 20_000
    assert len(direct.remove_queue("o")) == 20_000 and direct.route("key7") == []
    assert direct.route("mine") == [q]
    assert len(topic.remove_queue("o")) == 20_000  # most of them: the index is rebuilt
    assert topic.route("mine.x") == [q] and topic.route("a.7.x") == []
    assert topic.remove_queue("q")[0].routing_key == "mine.#" and topic.route("mine") == []


def test_exchange_bindings_route_once_per_destination() -> None:
    x = Exchange("src", "topic")
    x.add_exchange_binding(ExchangeBinding("src", "dst", "a.*"))
    x.add_exchange_binding(ExchangeBinding("src", "dst", "#"))
    x.add_exchange_binding(ExchangeBinding("src", "other", "b"))
    assert x.route_exchanges("a.b") == ["dst"]
    assert sorted(x.route_exchanges("b")) == ["dst", "other"]
    x.remove_exchange_binding("dst", "#")
    assert x.route_exchanges("b") == ["other"] and x.route_exchanges("a.z") == ["dst"]
    assert [b.routing_key for b in x.remove_destination("dst")] == ["a.*"]
    assert x.route_exchanges("a.z") == []
    h = Exchange("h", "headers")  # e2e bindings of a headers exchange match everything
    h.add_exchange_binding(ExchangeBinding("h", "dst", "whatever"))
    assert h.route_exchanges("any") == ["dst"]


def test_queue_limit_drops_oldest_and_counts() -> None:
    from oxiedge.amqp.queued import QueuedMessage

    dropped = []
    q = Queue("q", 1, limit=3, on_drop=lambda _q, m: dropped.append(m.seq))
    for seq in range(1, 6):
        q.enqueue(QueuedMessage(seq, "", "q", b"\x00\x00", b""))
    assert [m.seq for m in q.ready] == [3, 4, 5] and q.dropped == 2 and dropped == [1, 2]


def test_requeue_restores_publish_order() -> None:
    from oxiedge.amqp.queued import QueuedMessage

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
