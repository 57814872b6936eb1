"""--amqp-max-arguments-bytes in-process on a real store: every argument table the broker
keeps (headers bindings, queue and exchange arguments) is charged when it is kept and
refunded on every path by which it goes (unbind, queue delete, exchange delete, the
auto-delete cascade), so the gauge returns to what it was."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oxiedge.amqp import fields
from oxiedge.amqp.broker import Broker
from oxiedge.amqp.errors import AmqpError
from oxiedge.amqp.exchanges import Binding, args_key
from oxiedge.amqp.queues import Queue
from oxiedge.amqp.tablecost import binding_cost, str_cost, table_cost
from oxiedge.store import Store


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    s = Store.open(tmp_path / "db")
    yield Broker(s)
    s.close()


def _used(b: Broker) -> int:
    return b.topology.exchanges_shared.argument_bytes


def _queue(b: Broker, name: str, arguments: dict[str, Any] | None = None) -> Queue:
    return b.declare_queue(name, passive=False, durable=False, exclusive=False,
                           auto_delete=False, arguments=arguments or {}, owner=None)[0]


def _headers(b: Broker, name: str, *, auto_delete: bool = False) -> None:
    b.topology.declare_exchange(name, "headers", passive=False, durable=False,
                                auto_delete=auto_delete, internal=False, arguments={})


def _table(n: int, tag: str = "") -> dict[str, Any]:
    return {"x-match": "any", **{f"{tag}k{i:04d}": None for i in range(n)}}


def test_cost_follows_the_objects_not_the_wire() -> None:
    assert table_cost({}) == 0 and binding_cost({}, b"") == 0
    # Two tables of nearly the same encoded size, very different in memory: the cost
    # tells them apart (measured: ~2x and ~14x their encoded size).
    one_string = {"a": "x" * 56_000}
    many_keys = _table(8000)
    assert abs(len(fields.encode_table(one_string)) - len(fields.encode_table(many_keys))) \
        < 1000
    assert table_cost(many_keys) > 5 * table_cost(one_string)
    assert str_cost("ab") < str_cost("ä") + 4
    # A deep table is walked without recursion.
    deep: dict[str, Any] = {}
    for _ in range(5000):
        deep = {"d": deep}
    assert table_cost(deep) > 5000 * 64


def test_bind_charges_unbind_refunds(broker: Broker) -> None:
    _headers(broker, "h")
    q = _queue(broker, "q")
    base = _used(broker)
    assert base == 0  # the built-in exchanges keep no arguments
    table = _table(100)
    broker.topology.bind(q, "h", "", table)
    cost = binding_cost(table, args_key(table))
    assert _used(broker) == cost
    broker.topology.bind(q, "h", "", dict(table))  # identical: nothing new kept
    assert _used(broker) == cost
    broker.topology.unbind(q, "h", "", table)
    assert _used(broker) == 0


def test_over_the_budget_a_new_table_is_406_an_existing_one_and_plain_bindings_fine(
        broker: Broker) -> None:
    _headers(broker, "h")
    q = _queue(broker, "q")
    first = _table(100)
    broker.topology.max_arguments_bytes = binding_cost(first, args_key(first)) + 100
    broker.topology.bind(q, "h", "", first)
    with pytest.raises(AmqpError) as info:
        broker.topology.bind(q, "h", "", _table(100, "other"))
    assert info.value.code == 406
    assert (info.value.class_id, info.value.method_id) == (50, 20)
    assert f"arguments limit of {broker.topology.max_arguments_bytes} bytes" in info.value.text
    assert broker.counters["arguments_limit_refused"] == 1
    broker.topology.bind(q, "h", "", dict(first))  # re-binding the one that is there
    broker.topology.bind(q, "amq.direct", "key", {})  # no table: nothing to charge
    with pytest.raises(AmqpError):
        _queue(broker, "dl", {"x-dead-letter-exchange": "x" * 200})
    with pytest.raises(AmqpError):
        broker.topology.declare_exchange("alt", "fanout", passive=False, durable=False,
                                         auto_delete=False, internal=False,
                                         arguments={"alternate-exchange": "y" * 200})
    assert broker.counters["arguments_limit_refused"] == 3
    assert "dl" not in broker.queues and "alt" not in broker.exchanges
    _queue(broker, "plain")  # a queue without arguments is still fine


def test_queue_and_exchange_arguments_are_charged_and_refunded(broker: Broker) -> None:
    q = _queue(broker, "dl", {"x-dead-letter-exchange": "x" * 1000, "x-max-length": 5})
    assert _used(broker) == table_cost(q.arguments) > 1000
    broker.topology.declare_exchange("alt", "fanout", passive=False, durable=False,
                                     auto_delete=False, internal=False,
                                     arguments={"alternate-exchange": "y" * 500})
    assert _used(broker) > table_cost(q.arguments) + 500
    broker.topology.delete_exchange("alt", if_unused=False)
    assert _used(broker) == table_cost(q.arguments)
    broker.delete_queue(q)
    assert _used(broker) == 0


def test_every_way_a_binding_goes_refunds_it(broker: Broker) -> None:
    _headers(broker, "h")
    few, many = _queue(broker, "few"), _queue(broker, "many")
    for i in range(3):
        broker.topology.bind(few, "h", "", _table(10, f"f{i}"))
    for i in range(100):  # most of the exchange's bindings: Exchange._remove_most
        broker.topology.bind(many, "h", "", _table(10, f"m{i}"))
    assert _used(broker) == sum(b.cost for b in broker.exchanges["h"].bindings.values())
    broker.delete_queue(few)  # key by key
    broker.delete_queue(many)  # the rebuild
    assert _used(broker) == 0
    # An exchange deleted with its bindings, and an auto-delete exchange whose last
    # binding goes with its queue.
    q = _queue(broker, "q")
    _headers(broker, "h2")
    _headers(broker, "auto", auto_delete=True)
    broker.topology.bind(q, "h2", "", _table(20))
    broker.topology.bind(q, "auto", "", _table(20))
    broker.topology.delete_exchange("h2", if_unused=False)
    assert _used(broker) == broker.exchanges["auto"].bindings[
        next(iter(broker.exchanges["auto"].bindings))].cost
    broker.delete_queue(q)
    assert "auto" not in broker.exchanges and _used(broker) == 0


def test_a_recovered_binding_carries_its_own_cost(broker: Broker) -> None:
    """Recovery adds bindings through Exchange.add without a check: each keeps the cost it
    was charged, so its refund matches even if the table's shape changed on disk."""
    _headers(broker, "h")
    q = _queue(broker, "q")
    b = Binding("h", q, "", {"x-match": "all", "a": "b"})
    broker.topology.max_arguments_bytes = 0
    assert broker.exchanges["h"].add(b)  # (as recovery does: never refused)
    assert _used(broker) == b.cost > 0
    broker.topology.unbind(q, "h", "", {"x-match": "all", "a": "b"})
    assert _used(broker) == 0


def test_a_binding_identity_is_a_digest_and_keeps_key_and_arguments_apart(
        broker: Broker) -> None:
    # The identity is 16 bytes whatever the table: a binding of 8000 keys no longer keeps
    # a second string as long as its repr (~100 KB) beside its arguments.
    big = _table(8000)
    assert len(args_key(big)) == 16 and args_key({}) == b""
    assert args_key(big) == args_key(dict(reversed(list(big.items()))))  # order-free
    assert args_key({"a": b"1"}) != args_key({"a": "1"}) != args_key({"a": 1})
    assert binding_cost(big, args_key(big)) < table_cost(big) + 64
    # The routing key and the arguments are separate parts of the identity: a routing key
    # that spells out the old canonical form of a table did collide with an empty key
    # bound with that table (routing_key + canonical string).
    _headers(broker, "h")
    q = _queue(broker, "q")
    table = {"x-match": "all", "a": "b"}
    spelled = repr(sorted((k, repr(v)) for k, v in table.items()))
    broker.topology.bind(q, "h", "", table)
    broker.topology.bind(q, "h", spelled, {})
    x = broker.exchanges["h"]
    assert len(x.bindings) == 2
    broker.topology.unbind(q, "h", spelled, {})
    (left,) = x.bindings.values()
    assert left.routing_key == "" and left.arguments == table
