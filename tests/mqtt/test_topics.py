"""Topic validation, the subscription trie and the retained-topic trie."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiedge.mqtt.topics import (
    RetainedTrie,
    TopicTrie,
    topic_matches,
    valid_topic_filter,
    valid_topic_name,
)


@pytest.mark.parametrize(
    ("name", "ok"),
    [("a", True), ("a/b", True), ("/", True), ("$SYS/x", True), ("", False), ("a/+", False),
     ("#", False), ("a\x00b", False), ("a b/ü", True)],
)  # fmt: skip
def test_valid_topic_name(name: str, ok: bool) -> None:
    assert valid_topic_name(name) is ok


@pytest.mark.parametrize(
    ("flt", "ok"),
    [("a", True), ("#", True), ("+", True), ("a/#", True), ("+/+/#", True), ("/+", True),
     ("", False), ("a#", False), ("a/#/b", False), ("a+/b", False), ("a/b+", False),
     ("#/", False), ("sport/tennis#", False)],
)  # fmt: skip
def test_valid_topic_filter(flt: str, ok: bool) -> None:
    assert valid_topic_filter(flt) is ok


# Cases from the spec's non-normative examples in 4.7.1 / 4.7.2.
MATCH_CASES = [
    ("sport/tennis/player1/#", "sport/tennis/player1", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/ranking", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", True),
    ("sport/#", "sport", True),
    ("#", "a/b/c", True),
    ("#", "/", True),
    ("sport/tennis/+", "sport/tennis/player1", True),
    ("sport/tennis/+", "sport/tennis/player1/ranking", False),
    ("sport/+", "sport", False),
    ("sport/+", "sport/", True),
    ("+/+", "/finance", True),
    ("/+", "/finance", True),
    ("+", "/finance", False),
    ("+/#", "a", True),
    ("a/b", "a/b", True),
    ("a/b", "a/c", False),
    ("#", "$SYS/x", False),
    ("+/monitor/Clients", "$SYS/monitor/Clients", False),
    ("$SYS/#", "$SYS/monitor/Clients", True),
    ("$SYS/monitor/+", "$SYS/monitor/Clients", True),
    ("a/+/#", "a/$x/y", True),
]


@pytest.mark.parametrize(("flt", "topic", "expected"), MATCH_CASES)
def test_match_cases(flt: str, topic: str, expected: bool) -> None:
    assert topic_matches(flt, topic) is expected
    trie: TopicTrie[str, int] = TopicTrie()
    trie.add(flt, "c", 1)
    assert (list(trie.match(topic)) == [("c", 1)]) is expected
    retained: RetainedTrie[int] = RetainedTrie()
    retained.set(topic, 7)
    assert (list(retained.match(flt)) == [(topic, 7)]) is expected


def test_overlapping_subscriptions_yield_each_match() -> None:
    trie: TopicTrie[str, int] = TopicTrie()
    trie.add("a/#", "c1", 0)
    trie.add("a/+", "c1", 2)
    trie.add("a/b", "c2", 1)
    assert sorted(trie.match("a/b")) == [("c1", 0), ("c1", 2), ("c2", 1)]
    assert len(trie) == 3


def test_add_replaces_and_remove_prunes() -> None:
    trie: TopicTrie[str, int] = TopicTrie()
    assert trie.add("a/b/c", "x", 0)
    assert not trie.add("a/b/c", "x", 2)  # MQTT-3.8.4-3: replaces
    assert list(trie.match("a/b/c")) == [("x", 2)]
    assert not trie.remove("a/b", "x")
    assert not trie.remove("a/b/c", "y")
    assert trie.remove("a/b/c", "x")
    assert len(trie) == 0
    assert trie._root.children == {}
    assert list(trie.filters()) == []


def test_filters_lists_everything() -> None:
    trie: TopicTrie[str, int] = TopicTrie()
    subs = {("a/#", "c1", 0), ("+/b", "c2", 1), ("#", "c3", 2), ("a", "c1", 1)}
    for f, k, v in subs:
        trie.add(f, k, v)
    assert set(trie.filters()) == subs


def test_retained_set_replace_delete() -> None:
    r: RetainedTrie[bytes] = RetainedTrie()
    r.set("a/b", b"1")
    r.set("a/b", b"2")
    r.set("a", b"0")
    assert len(r) == 2
    assert r.get("a/b") == b"2"
    assert r.get("a/c") is None
    assert sorted(r.match("a/#")) == [("a", b"0"), ("a/b", b"2")]
    assert r.delete("a/b")
    assert not r.delete("a/b")
    assert sorted(r.items()) == [("a", b"0")]
    assert r.delete("a")
    assert r._root.children == {}


_level = st.sampled_from(["a", "b", "", "$x", "c"])
topics = st.lists(_level, min_size=1, max_size=4).map("/".join)
filters = st.builds(
    lambda lv, h: "/".join(lv + (["#"] if h else [])),
    st.lists(st.one_of(_level, st.just("+")), max_size=4),
    st.booleans(),
).filter(bool)


@settings(max_examples=300, deadline=None)
@given(st.lists(filters, min_size=1, max_size=12), st.lists(topics, min_size=1, max_size=8))
def test_tries_agree_with_reference(flts: list[str], tops: list[str]) -> None:
    trie: TopicTrie[int, str] = TopicTrie()
    for i, f in enumerate(flts):
        trie.add(f, i, f)
    retained: RetainedTrie[int] = RetainedTrie()
    for i, t in enumerate(tops):
        retained.set(t, i)
    for t in tops:
        want = sorted(i for i, f in enumerate(flts) if topic_matches(f, t))
        assert sorted(k for k, _ in trie.match(t)) == want
    for f in flts:
        want_topics = sorted({t for t in tops if topic_matches(f, t)})
        assert sorted(t for t, _ in retained.match(f)) == want_topics


def test_match_cost_independent_of_subscription_count() -> None:
    """100k subscriptions on unrelated topics must not slow matching down (trie, not scan)."""
    small: TopicTrie[int, int] = TopicTrie()
    big: TopicTrie[int, int] = TopicTrie()
    for t in (small, big):
        t.add("site/+/temp", -1, 0)
        t.add("site/#", -2, 0)
    for i in range(100_000):
        big.add(f"other/{i}/temp", i, 0)

    def timed(trie: TopicTrie[int, int]) -> float:
        start = time.perf_counter()
        for _ in range(5_000):
            assert len(list(trie.match("site/dev1/temp"))) == 2
        return time.perf_counter() - start

    t_small = min(timed(small) for _ in range(3))
    t_big = min(timed(big) for _ in range(3))
    assert t_big < t_small * 3 + 0.01, (t_small, t_big)
