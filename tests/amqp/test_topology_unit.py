"""The broker's topology in-process on a real store: deletes touch only what they remove,
the auto-delete cascade is a worklist, route caches share one bound, requeues in delivery
order stay cheap (audit findings of session 12; each case was a stall or a crash on a real
server)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from oxiedge.amqp.broker import Broker
from oxiedge.amqp.exchanges import Binding, Exchange, ExchangesShared
from oxiedge.amqp.queued import QueuedMessage
from oxiedge.amqp.queues import Queue
from oxiedge.store import Store


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    s = Store.open(tmp_path / "db")
    yield Broker(s)
    s.close()


def _exchange(b: Broker, name: str, kind: str = "fanout", *, durable: bool = False,
              auto_delete: bool = False) -> Exchange:
    return b.topology.declare_exchange(name, kind, passive=False, durable=durable,
                                       auto_delete=auto_delete, internal=False, arguments={})[0]


def _queue(b: Broker, name: str) -> Queue:
    return b.declare_queue(name, passive=False, durable=False, exclusive=False,
                           auto_delete=False, arguments={}, owner=None)[0]


def test_a_3000_long_auto_delete_chain_goes_in_one_delete(broker: Broker) -> None:
    """d0 <- d1 <- ... <- d2999, each auto-delete, each bound into the one before: deleting
    d0 empties d1, which goes, which empties d2, ... (this recursed into RecursionError at
    ~485 levels, left the cascade half done and dropped the client's connection)."""
    _exchange(broker, "d0")
    for i in range(1, 3000):
        _exchange(broker, f"d{i}", auto_delete=True)
        broker.topology.bind_exchange(f"d{i - 1}", f"d{i}", "", {})
    assert broker.exchanges["d0"].sources == {"d1"}
    broker.topology.delete_exchange("d0", if_unused=False)
    assert not [n for n in broker.exchanges if n.startswith("d")]


def test_deleting_a_queue_touches_only_the_exchanges_that_bind_it(broker: Broker) -> None:
    q, other = _queue(broker, "q"), _queue(broker, "other")
    for i in range(50):
        _exchange(broker, f"x{i}", "direct")
    broker.topology.bind(q, "x3", "a", {})
    broker.topology.bind(q, "x3", "b", {})
    broker.topology.bind(q, "x7", "a", {})
    broker.topology.bind(other, "x7", "a", {})
    assert q.sources == {"x3", "x7"} and other.sources == {"x7"}
    broker.topology.unbind(q, "x3", "a")
    assert q.sources == {"x3", "x7"}  # one of its two keys there is left
    broker.delete_queue(q)
    assert not broker.exchanges["x3"].bindings and broker.exchanges["x3"].route("b") == []
    assert broker.exchanges["x7"].route("a") == [other]
    broker.topology.delete_exchange("x7", if_unused=False)
    assert other.sources == set()


def test_deleting_an_exchange_unbinds_its_sources_and_their_index(broker: Broker) -> None:
    src, dst = _exchange(broker, "src", "topic"), _exchange(broker, "dst")
    broker.topology.bind_exchange("dst", "src", "a.#", {})
    broker.topology.bind_exchange("dst", "src", "b", {})
    broker.topology.unbind_exchange("dst", "src", "b")
    assert dst.sources == {"src"}  # a.# still binds it
    broker.topology.delete_exchange("dst", if_unused=False)
    assert src.route_exchanges("a.x") == [] and not src.xbindings
    _exchange(broker, "dst2")
    broker.topology.bind_exchange("dst2", "src", "a.#", {})
    broker.topology.delete_exchange("src", if_unused=False)
    assert broker.exchanges["dst2"].sources == set()


def test_route_caches_share_one_bound_in_bytes() -> None:
    caches = ExchangesShared(limit=64 * 1024)
    xs = [Exchange(f"t{i}", "topic") for i in range(30)]
    for x in xs:
        x.shared = caches
        x.add(Binding(x.name, Queue("q", 1), "never.matches", {}))
    for n in range(4095):  # distinct unroutable keys, 250 bytes each, on every exchange
        key = f"{n:04d}." + "k" * 245
        for x in xs:
            assert x.route(key) == []
    assert caches.bytes <= caches.limit and caches.cleared > 0
    assert sum(len(x._cache) for x in xs) * (250 + 128) <= caches.limit


def test_requeue_in_delivery_order_lands_each_message_in_place() -> None:
    """Rejecting 30,000 fetched messages one by one in delivery order used to re-merge
    the whole requeued head each time (quadratic: 55 s of event loop)."""
    q = Queue("q", 1)
    msgs = [QueuedMessage(seq, "", "q", b"\x00\x00", b"") for seq in range(1, 30_001)]
    for m in msgs:
        q.enqueue(m)
    taken = [q.ready.popleft() for _ in range(29_990)]  # 29,991..30,000 still ready
    for m in taken:
        q.requeue([m])
    q.requeue([])
    assert [m.seq for m in q.ready] == list(range(1, 30_001))
    assert all(m.redelivered for m in list(q.ready)[:29_990])
    mixed = [q.ready.popleft() for _ in range(40)]
    q.requeue(mixed[::2])  # a small batch lands in place among later ones
    q.requeue(mixed[1::2])
    assert [m.seq for m in list(q.ready)[:40]] == list(range(1, 41))
