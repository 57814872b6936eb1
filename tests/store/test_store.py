from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio

from oxiedge.store import Store, StoreError, StoreLockedError


@pytest.fixture
def store(tmp_path: Path):  # type: ignore[no-untyped-def]
    s = Store.open(tmp_path / "db")
    yield s
    s.close()


async def test_insert_get_update_delete(store: Store) -> None:
    async with store.running():
        a = await store.insert("readings", {"value": 21, "room": {"name": "a"}})
        b = await store.insert("readings", {"value": 25, "_id": 999, "_version": 7})
        assert (a["_id"], a["_version"]) == (1, 1)
        assert (b["_id"], b["_version"]) == (2, 1)  # caller cannot choose _id/_version
        assert store.get("readings", 1) == a
        upd = await store.update("readings", 1, {"value": 22})
        assert upd == {"_id": 1, "value": 22, "room": {"name": "a"}, "_version": 2}
        rep = await store.update("readings", 1, {"value": 23}, replace=True)
        assert rep == {"_id": 1, "value": 23, "_version": 3}
        assert await store.delete("readings", 2) is True
        assert await store.delete("readings", 2) is False
        assert store.get("readings", 2) is None
        assert store.count("readings") == 1
        with pytest.raises(StoreError):
            await store.update("readings", 42, {"x": 1})


async def test_find_sort_limit_skip_count(store: Store) -> None:
    async with store.running():
        await store.insert_many("t", [{"v": v % 7, "n": v} for v in range(50)])
        found = store.find("t", {"v": {"$gte": 5}}, sort="-n", limit=3)
        assert [d["n"] for d in found] == [48, 47, 41]
        assert [d["n"] for d in store.find("t", {"v": 0}, skip=2, limit=2)] == [14, 21]
        assert store.count("t") == 50
        assert store.count("t", {"v": 6}) == 7
        assert await store.delete_many("t", {"v": {"$in": [0, 1]}}) == 15
        assert store.count("t") == 35
        assert store.find("nope") == []
        assert [c["name"] for c in store.list_collections()] == ["t"]


async def test_ids_are_never_reused_across_reopen(tmp_path: Path) -> None:
    s = Store.open(tmp_path / "db")
    async with s.running():
        for i in range(5):
            await s.insert("c", {"i": i})
        await s.delete("c", 5)
        await s.delete("c", 4)
    s.close()
    s = Store.open(tmp_path / "db")
    async with s.running():
        doc = await s.insert("c", {"i": "after"})
    assert doc["_id"] == 6
    assert s.count("c") == 4
    s.close()


def test_invalid_names_and_documents(store: Store) -> None:
    for bad in ["", "a b", "-x", ".x", "x" * 101, "a/b"]:
        with pytest.raises(StoreError):
            store.stage_insert(bad, {"x": 1})
    with pytest.raises(StoreError):
        store.stage_insert("ok", [1, 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        store.stage_insert("ok", {"x": {1, 2}})  # a set is not JSON
    with pytest.raises(ValueError):
        store.stage_insert("ok", {"x": 1 << 70})  # beyond 64-bit integers


def test_second_open_of_a_held_store_is_refused(store: Store) -> None:
    with pytest.raises(StoreLockedError):
        Store.open(store.path)


def test_read_only_open_sees_committed_data(tmp_path: Path) -> None:
    s = Store.open(tmp_path / "db")
    s.stage_insert("c", {"x": 1})
    s.commit_blocking()
    ro = Store.open(tmp_path / "db", read_only=True)
    assert ro.find("c") == [{"_id": 1, "x": 1, "_version": 1}]
    ro.close()
    s.close()


def test_raw_area_prefix_scan_and_ranges(store: Store) -> None:
    def key(owner: int, seq: int) -> bytes:
        return b"m" + owner.to_bytes(8, "big") + seq.to_bytes(8, "big")

    for owner in (1, 2):
        for seq in range(10):
            store.stage_put("mqtt", key(owner, seq), b"payload %d" % seq)
    store.commit_blocking()
    prefix = b"m" + (1).to_bytes(8, "big")
    assert len(list(store.iter_raw("mqtt", prefix))) == 10
    assert [k[-1] for k, _ in store.iter_raw("mqtt", prefix, start=key(1, 7))] == [7, 8, 9]
    store.stage_delete_range("mqtt", key(1, 0), key(1, 5))
    store.stage_delete_key("mqtt", key(1, 9))
    store.commit_blocking()
    assert [k[-1] for k, _ in store.iter_raw("mqtt", prefix)] == [5, 6, 7, 8]
    assert store.get_raw("mqtt", key(2, 3)) == b"payload 3"
    assert store.get_raw("amqp", key(2, 3)) is None  # families are separate
    store.compact("mqtt")


def test_views_show_virtual_documents(store: Store) -> None:
    store.register_view("_mqtt", lambda: [{"_kind": "msg", "client": "c1", "seq": 1},
                                          {"_kind": "msg", "client": "c2", "seq": 2}])
    store.stage_insert("_mqtt", {"_kind": "sub", "client": "c1", "filter": "a/#"})
    store.commit_blocking()
    assert store.count("_mqtt") == 3
    assert [d["client"] for d in store.find("_mqtt", {"_kind": "msg"})] == ["c1", "c2"]
    assert {"name": "_mqtt", "count": 3} in store.list_collections()


def test_100k_documents_scan_and_reopen(tmp_path: Path) -> None:
    """100 000 documents: written in batches, counted, range-queried and recovered."""
    s = Store.open(tmp_path / "db")
    t0 = time.perf_counter()
    for start in range(0, 100_000, 10_000):
        for i in range(start, start + 10_000):
            s.stage_insert("big", {"value": i % 1000, "i": i})
        s.commit_blocking()
    write_s = time.perf_counter() - t0
    s.close()
    t0 = time.perf_counter()
    s = Store.open(tmp_path / "db")
    reopen_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    hits = s.find("big", {"value": {"$gte": 995}})
    scan_s = time.perf_counter() - t0
    assert s.count("big") == 100_000
    assert len(hits) == 500
    assert s.find("big", sort="-i", limit=1)[0]["i"] == 99_999
    s.close()
    print(f"100k docs: write {write_s:.2f}s, reopen {reopen_s:.3f}s, scan {scan_s:.2f}s")


async def test_find_in_thread_does_not_stall_the_loop(tmp_path: Path) -> None:
    """A big scan off the loop thread leaves the event loop responsive."""
    s = Store.open(tmp_path / "db")
    for i in range(30_000):
        s.stage_insert("big", {"i": i})
    s.commit_blocking()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await trio.sleep(0.005)
            ticks += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        rows = await trio.to_thread.run_sync(lambda: s.find("big", {"i": {"$lt": 0}}))
        nursery.cancel_scope.cancel()
    assert rows == []
    assert ticks > 0
    s.close()


def test_prefix_end_with_trailing_ff() -> None:
    """Owner ids ending in 0xff (255, 511, ...) still get a correct key range."""
    from oxiedge.store.encoding import prefix_end

    prefix = b"m" + (255).to_bytes(8, "big")
    end = prefix_end(prefix)
    assert end is not None
    assert prefix + b"\xff" * 8 < end <= b"m" + (256).to_bytes(8, "big")
    assert not end.startswith(prefix)
    assert prefix_end(b"\xff\xff") is None
