"""The bounded copy of a start-ok table a connection keeps (sans-IO)."""

from __future__ import annotations

from oxiedge.amqp.client_properties import (
    MAX_CAPABILITIES,
    MAX_STRING,
    MAX_TOTAL,
    bounded_client_properties,
)


def test_keeps_only_known_string_keys() -> None:
    props = {"product": "p", "version": b"1.0", "platform": 3, "client_id": "c",
             "other": "o", "capabilities": {"a": True, "b": 1, "c": {"d": True}}}
    assert bounded_client_properties(props) == {
        "product": "p", "version": "1.0", "capabilities": {"a": True}}


def test_bounds() -> None:
    props = {k: "€" * 1000 for k in ("connection_name", "product", "version", "platform",
                                     "information", "copyright")}
    props["capabilities"] = {f"c{i}": bool(i % 2) for i in range(100)}
    kept = bounded_client_properties(props)
    for key, value in kept.items():
        if key != "capabilities":
            assert len(value.encode()) <= MAX_STRING and set(value) == {"€"}
    assert len(kept["capabilities"]) <= MAX_CAPABILITIES
    size = sum(len(k) + len(v.encode()) for k, v in kept.items() if k != "capabilities")
    size += sum(len(k) + 5 for k in kept["capabilities"])
    assert size <= MAX_TOTAL


def test_not_a_table() -> None:
    assert bounded_client_properties(None) == {}
    assert bounded_client_properties({"capabilities": "x"}) == {}
