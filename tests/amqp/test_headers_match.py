"""Headers-exchange matching (``exchanges.headers_match``) against RabbitMQ's rules:
``x-match`` ``all`` (the default) / ``any``, ``all-with-x`` / ``any-with-x``, a void
argument matching the header's mere presence, and the ``x-`` arguments left out."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oxiedge.amqp.exchanges import headers_match, headers_spec, x_match_error

HEADERS = {"format": "pdf", "type": "report", "x-tag": "a", "n": 1}


@pytest.mark.parametrize(("arguments", "expected"), [
    ({"format": "pdf", "type": "report"}, True),  # all, the default
    ({"x-match": "all", "format": "pdf", "type": "log"}, False),
    ({"x-match": "all", "format": "pdf", "missing": None}, False),
    ({"x-match": "all", "format": None}, True),  # void: present is enough
    ({"x-match": "all"}, True),  # nothing to test: all of nothing holds
    ({"x-match": "any", "format": "zip", "type": "report"}, True),
    ({"x-match": "any", "format": "zip", "type": "log"}, False),
    ({"x-match": "any"}, False),  # any of nothing
    ({"x-match": "any", "x-tag": "a"}, False),  # x- arguments are not compared ...
    ({"x-match": "any-with-x", "x-tag": "a"}, True),  # ... unless asked for
    ({"x-match": "all-with-x", "x-tag": "b", "format": "pdf"}, False),
    ({"x-match": b"any", "n": 1}, True),  # a longstr x-match
    ({"x-match": "all", "n": 2}, False),
])
def test_rabbitmq_rules(arguments: dict[str, Any], expected: bool) -> None:
    assert headers_match(arguments, HEADERS) is expected


class _Counting(dict[str, Any]):
    """A table (message headers or binding arguments) counting the lookups made in it."""

    lookups = 0

    def __contains__(self, key: object) -> bool:
        self.lookups += 1
        return super().__contains__(key)


def test_any_stops_at_the_first_hit_and_all_at_the_first_miss() -> None:
    # A binding smaller than the message is walked, its keys looked up in the headers:
    # one decided by its first key must not cost a walk of all its keys.
    big = {**HEADERS, **{f"h{i:05d}": i for i in range(10_000)}}
    few = {f"k{i:02d}": None for i in range(20)}
    for arguments, expected in [({"x-match": "any", "format": "pdf", **few}, True),
                                ({"x-match": "all", "format": "zip", **few}, False)]:
        headers = _Counting(big)
        assert headers_match(arguments, headers) is expected
        assert headers.lookups == 1
    headers = _Counting(big)  # an "any" that matches nothing does look at every key
    assert not headers_match({"x-match": "any", **few}, headers)
    assert headers.lookups == len(few)


def test_a_huge_binding_costs_a_publish_only_its_headers() -> None:
    # An "any" that matches nothing, or an "all" that holds, over a binding far bigger than
    # the message: the message's few headers are looked up in the binding, not the reverse.
    many = {f"k{i:05d}": None for i in range(10_000)}
    for arguments, expected in [({"x-match": "any", **many}, False),
                                ({"x-match": "any", **many, "type": "report"}, True)]:
        args, headers = _Counting(arguments), _Counting(HEADERS)
        assert headers_match(args, headers, headers_spec(args)) is expected
        assert headers.lookups == 0
        assert args.lookups <= len(HEADERS)
    # "all" of more arguments than the message has headers cannot hold: no lookup at all
    args, headers = _Counting({"x-match": "all", **many}), _Counting(HEADERS)
    assert not headers_match(args, headers, headers_spec(args))
    assert headers.lookups == args.lookups == 0
    # "all" over a big binding that the message does hold, walked from the smaller side
    big = {f"h{i}": i for i in range(50)}
    args = _Counting({"x-match": "all", "h3": 3, "h7": None, **{f"x-{i}": i for i in range(99)}})
    headers = _Counting(big)
    assert headers_match(args, headers, headers_spec(args))
    assert args.lookups == len(big) and headers.lookups == 0


def test_x_match_values() -> None:
    for mode in ("all", "any", "all-with-x", "any-with-x", b"any"):
        assert x_match_error({"x-match": mode}) is None
    assert x_match_error({"a": 1}) is None  # "all" by default
    why = x_match_error({"x-match": "some"})
    assert why is not None and "'some'" in why


_KEYS = st.sampled_from(["a", "b", "c", "d", "x-a", "x-b", "x-match"])
_VALUES = st.one_of(st.none(), st.integers(0, 2), st.sampled_from(["1", b"1"]))
_TABLES = st.dictionaries(_KEYS, _VALUES, max_size=7)


def _reference(arguments: dict[str, Any], headers: dict[str, Any]) -> bool:
    """RabbitMQ's rule as written down, with nothing clever in it."""
    mode = arguments.get("x-match", "all")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    with_x = mode.endswith("-with-x")
    tested = [(k, v) for k, v in arguments.items()
              if k != "x-match" and (with_x or not k.startswith("x-"))]
    held = [k in headers and (v is None or headers[k] == v) for k, v in tested]
    return all(held) if mode in ("all", "all-with-x") else any(held)


@given(_TABLES, _TABLES, st.sampled_from(["all", "any", "all-with-x", "any-with-x", None]))
def test_either_walk_gives_rabbitmqs_answer(arguments: dict[str, Any],
                                            headers: dict[str, Any], mode: str | None) -> None:
    if mode is not None:
        arguments = {**arguments, "x-match": mode}
    else:
        arguments.pop("x-match", None)
    assert headers_match(arguments, headers, headers_spec(arguments)) is _reference(
        arguments, headers)
