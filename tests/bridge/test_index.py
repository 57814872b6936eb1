"""Secondary indexes on a real RocksDB: encoding order, maintenance, and reads avoided."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oxiedge.ingest.indexes import resume_builds
from oxiedge.store import Store
from oxiedge.store.index import (
    create_index,
    create_index_blocking,
    drop_index,
    encode_value,
    plan_ranges,
)

numbers = st.one_of(st.integers(-(2**53), 2**53),
                    st.floats(allow_nan=False, allow_infinity=True))


@given(numbers, numbers)
def test_number_encoding_preserves_order(a: float, b: float) -> None:
    ea, eb = encode_value(a), encode_value(b)
    assert ea is not None and eb is not None
    if a < b:
        assert ea < eb
    elif a == b:
        assert ea == eb
    else:
        assert ea > eb


@given(st.text(), st.text())
def test_string_encoding_preserves_order(a: str, b: str) -> None:
    ea, eb = encode_value(a), encode_value(b)
    assert ea is not None and eb is not None
    assert (a < b) == (ea < eb) and (a == b) == (ea == eb)


def test_kinds_never_share_a_range() -> None:
    assert plan_ranges({"$gt": 3, "$lt": "z"}) == []
    assert plan_ranges({"$gte": 1, "$lt": 1}) != []  # inclusive superset, re-checked later
    assert plan_ranges(None) is None  # null also matches a missing field: scan
    assert plan_ranges({"$ne": 3}) is None
    assert plan_ranges([1, 2]) is None
    assert plan_ranges({"$in": [1, "a"]}) is not None


def _same(store: Store, coll: str, spec: dict, **kw) -> list[dict]:  # type: ignore[type-arg]
    """find() through the index, checked against a plain scan of the same data."""
    with_index = store.find(coll, spec, **kw)
    active = store.indexes.active
    store.indexes.active = False  # the scan path
    try:
        scanned = store.find(coll, spec, **kw)
    finally:
        store.indexes.active = active
    assert with_index == scanned
    return with_index


async def test_index_answers_like_a_scan_and_follows_writes(store: Store) -> None:
    rng = random.Random(7)
    values: list[object] = [rng.randint(0, 50) for _ in range(300)]
    values += [rng.random() * 50, "high", "low", True, None, [3, 40, "x"], {"a": 1}, -0.0]
    async with store.running():
        await store.insert_many("r", [{"value": v, "n": i} for i, v in enumerate(values)])
        await store.insert("r", {"n": "no value"})
        row = await create_index(store, "r", "value")
        assert row["state"] == "ready" and row["created"] is True
        queries = [
            {"value": {"$gte": 25}}, {"value": {"$gt": 10, "$lte": 12}}, {"value": 7},
            {"value": {"$eq": "high"}}, {"value": {"$in": [1, 2, "low", 40]}},
            {"value": {"$lt": "k"}}, {"value": 0}, {"value": True}, {"value": None},
            {"value": {"$gte": 25}, "n": {"$lt": 100}}, {"value": {"$gt": 3, "$lt": "z"}},
        ]
        for q in queries:
            _same(store, "r", q)
        _same(store, "r", {"value": {"$gte": 25}}, sort="-n", limit=5)
        before = len(_same(store, "r", {"value": {"$gte": 45}}))
        # maintenance: update into and out of the range, delete, delete_many
        first = store.find("r", {"value": {"$lt": 45, "$gte": 0}}, limit=1)[0]
        await store.update("r", first["_id"], {"value": 49})
        hit = next(d for d in store.find("r", {"value": {"$gte": 45}}) if d["_id"] != first["_id"])
        await store.update("r", hit["_id"], {"value": "moved"})
        assert len(_same(store, "r", {"value": {"$gte": 45}})) == before
        await store.delete("r", first["_id"])
        assert len(_same(store, "r", {"value": {"$gte": 45}})) == before - 1
        assert await store.delete_many("r", {"value": {"$lt": 10}}) > 0
        assert _same(store, "r", {"value": {"$lt": 10}}) == []
        assert store.count("r", {"value": {"$gte": 45}}) == before - 1
        assert _same(store, "r", {"value": "moved"})[0]["_id"] == hit["_id"]
        # dropping the index goes back to scanning, same answers
        assert (await drop_index(store, "r", "value"))["removed"]
        assert store.indexes.candidate_ids("r", {"value": 7}) is None
        assert list(store.iter_raw("idx")) == []


def test_bad_index_requests(store: Store) -> None:
    for coll, field in [("c", "_id"), ("c", ""), ("c", "a..b"), ("c", "$where"), ("bad name", "v")]:
        with pytest.raises(ValueError):
            create_index_blocking(store, coll, field)
    assert store.indexes.rows() == []


async def test_index_survives_reopen_and_offline_build(tmp_path: Path) -> None:
    s = Store.open(tmp_path / "db")
    for i in range(50):
        s.stage_insert("c", {"v": i})
    s.commit_blocking()
    assert create_index_blocking(s, "c", "v")["state"] == "ready"
    s.close()
    s = Store.open(tmp_path / "db")
    try:
        assert s.indexes.rows() == [{"collection": "c", "field": "v", "state": "ready", "id": 1}]
        s.docs_read = 0
        assert [d["v"] for d in s.find("c", {"v": {"$gte": 47}})] == [47, 48, 49]
        assert s.docs_read == 3
    finally:
        s.close()


def _fill(store: Store, n: int, chunk: int = 50_000) -> None:
    rng = random.Random(1)
    for start in range(0, n, chunk):
        for i in range(start, min(n, start + chunk)):
            store.stage_insert("sensor_readings", {"value": rng.uniform(0, 30), "i": i})
        store.commit_blocking()


def _range_query_reads_only_matches(tmp_path: Path, n: int) -> None:
    store = Store.open(tmp_path / "db")
    try:
        _fill(store, n)
        create_index_blocking(store, "sensor_readings", "value")
        store.docs_read = 0
        spec = {"value": {"$gte": 29.99}}
        found = store.find("sensor_readings", spec, sort="-value", limit=10)
        matching = store.count("sensor_readings", spec)
        # Every read document was a match (twice: find + count); nothing else was decoded.
        assert 0 < matching < n // 1000
        assert store.docs_read == 2 * matching
        assert len(found) == min(10, matching)
        assert all(d["value"] >= 29.99 for d in found)
    finally:
        store.close()


def test_range_query_over_200k_documents_reads_only_matches(tmp_path: Path) -> None:
    _range_query_reads_only_matches(tmp_path, 200_000)


@pytest.mark.slow
def test_range_query_over_a_million_documents_reads_only_matches(tmp_path: Path) -> None:
    _range_query_reads_only_matches(tmp_path, 1_000_000)


async def test_an_interrupted_build_serves_no_query_until_resumed(tmp_path: Path) -> None:
    s = Store.open(tmp_path / "db")
    for i in range(5000):
        s.stage_insert("c", {"v": i})
    s.commit_blocking()
    idef, _created = s.indexes.stage_define("c", "v")
    assert s.indexes.build_chunk(idef, 0, limit=1000) is not None  # then the power cut
    s.commit_blocking()
    s.close()
    s = Store.open(tmp_path / "db")
    try:
        assert s.indexes.rows()[0]["state"] == "building"
        assert s.indexes.candidate_ids("c", {"v": 4999}) is None  # half-built: not used
        assert [d["v"] for d in s.find("c", {"v": 4999})] == [4999]
        async with s.running():
            await resume_builds(s, logging.getLogger("test"))
        assert s.indexes.rows()[0]["state"] == "ready"
        assert s.indexes.candidate_ids("c", {"v": {"$gte": 4998}}) == [4999, 5000]
    finally:
        s.close()
