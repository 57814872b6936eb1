"""Headers-exchange matching (``exchanges.headers_match``) against RabbitMQ's rules:
``x-match`` ``all`` (the default) / ``any``, ``all-with-x`` / ``any-with-x``, a void
argument matching the header's mere presence, and the ``x-`` arguments left out."""

from __future__ import annotations

from typing import Any

import pytest

from oxiedge.amqp.exchanges import headers_match

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
    """Message headers that count the lookups a match makes."""

    lookups = 0

    def __contains__(self, key: object) -> bool:
        self.lookups += 1
        return super().__contains__(key)


def test_any_stops_at_the_first_hit_and_all_at_the_first_miss() -> None:
    # Each publish to a headers exchange walks every binding: a binding decided by its
    # first key must not cost a walk of all its keys.
    many = {f"k{i:05d}": None for i in range(10_000)}
    for arguments, expected in [({"x-match": "any", "format": "pdf", **many}, True),
                                ({"x-match": "all", "format": "zip", **many}, False)]:
        headers = _Counting(HEADERS)
        assert headers_match(arguments, headers) is expected
        assert headers.lookups == 1
    headers = _Counting(HEADERS)  # an "any" that matches nothing does look at every key
    assert not headers_match({"x-match": "any", **many}, headers)
    assert headers.lookups == 10_000
