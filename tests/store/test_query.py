from __future__ import annotations

import pytest

from oxiedge.store.query import QueryError, compile_filter, get_path, parse_sort, sort_docs

DOCS = [
    {"_id": 1, "value": 21.5, "room": {"name": "cold", "floor": 1}, "tags": ["a", "b"]},
    {"_id": 2, "value": 25, "room": {"name": "warm", "floor": 2}, "tags": ["b"]},
    {"_id": 3, "value": "high", "room": {"name": "cold", "floor": 2}},
    {"_id": 4, "value": 30, "flag": None},
    {"_id": 5, "value": True},
]


def ids(spec: dict) -> list[int]:
    pred = compile_filter(spec)
    return [d["_id"] for d in DOCS if pred(d)]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, [1, 2, 3, 4, 5]),
        ({"value": 25}, [2]),
        ({"value": {"$eq": 25}}, [2]),
        ({"value": {"$ne": 25}}, [1, 3, 4, 5]),
        ({"value": {"$gt": 21.5}}, [2, 4]),
        ({"value": {"$gte": 21.5}}, [1, 2, 4]),
        ({"value": {"$lt": 25}}, [1]),
        ({"value": {"$lte": 25}}, [1, 2]),
        ({"value": {"$gte": 21, "$lt": 30}}, [1, 2]),
        ({"value": {"$gt": "a"}}, [3]),
        ({"value": {"$in": [25, 30, "high"]}}, [2, 3, 4]),
        ({"value": {"$nin": [25, 30]}}, [1, 3, 5]),
        ({"room.name": "cold"}, [1, 3]),
        ({"room.floor": {"$gte": 2}}, [2, 3]),
        ({"room": {"$exists": False}}, [4, 5]),
        ({"flag": {"$exists": True}}, [4]),
        ({"flag": None}, [1, 2, 3, 4, 5]),
        ({"tags": "b"}, [1, 2]),
        ({"tags.0": "a"}, [1]),
        ({"value": 1}, []),  # True is not the number 1
        ({"$or": [{"value": 25}, {"room.name": "cold"}]}, [1, 2, 3]),
        ({"$and": [{"room.name": "cold"}, {"room.floor": 2}]}, [3]),
    ],
)
def test_filters(spec: dict, expected: list[int]) -> None:
    assert ids(spec) == expected


@pytest.mark.parametrize(
    "spec",
    [
        {"value": {"$regex": "x"}},
        {"value": {"$gt": [1]}},
        {"value": {"$in": 3}},
        {"value": {"$exists": "yes"}},
        {"$where": "1"},
        {"$or": []},
        [1, 2],
    ],
)
def test_bad_filters_raise_query_error(spec: object) -> None:
    with pytest.raises(QueryError):
        compile_filter(spec)  # type: ignore[arg-type]


def test_get_path() -> None:
    doc = {"a": {"b": [10, {"c": 3}]}}
    assert get_path(doc, "a.b.1.c") == 3
    assert get_path(doc, "a.b.0") == 10
    assert get_path(doc, "a.x") is not None  # MISSING sentinel, not None
    assert get_path(doc, "a.b.5") is get_path(doc, "nope")


def test_sort_multi_key_and_missing_first() -> None:
    docs = [{"_id": i, **d} for i, d in enumerate(
        [{"a": 2, "b": 1}, {"a": 1, "b": 5}, {"b": 9}, {"a": 2, "b": 3}])]
    assert [d["_id"] for d in sort_docs(list(docs), parse_sort("a,-b"))] == [2, 1, 3, 0]
    assert [d["_id"] for d in sort_docs(list(docs), parse_sort("-a"))] == [0, 3, 1, 2]
    assert parse_sort([("x", -1)]) == [("x", -1)]
