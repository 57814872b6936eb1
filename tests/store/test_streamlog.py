"""The stream log on a real RocksDB: offsets, committed reads, segments, retention, recovery."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from oxiedge.store import Store
from oxiedge.store.streamlog import WINDOW, StreamLog

CF = "amqp"


def make(store: Store, segment_bytes: int = 1000, owner: int = 7) -> StreamLog:
    return StreamLog(store, CF, owner, record_prefix=b"s", segment_prefix=b"t",
                     segment_bytes=segment_bytes)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(tmp_path / "db")
    yield s
    s.close()


def fill(log: StreamLog, store: Store, n: int, at_ms: int = 1000, step_ms: int = 10) -> None:
    for i in range(n):
        log.append(b"v%04d" % (log.tail), at_ms + i * step_ms)
    store.commit_blocking()
    log.synced(store.committer.synced_generation)


def test_appends_are_seen_only_once_synced(store: Store) -> None:
    log = make(store)
    assert log.append(b"a", 1) == 0 and log.append(b"b", 2) == 1
    assert log.read(0, 10) == []  # not synced: nobody may see offset 0 yet
    store.committer.after_sync.append(log.synced)  # (the service wires Streams.synced)
    store.commit_blocking()
    assert log.committed == 2 and not log.unsynced
    assert log.read(0, 10) == [(0, 1, b"a"), (1, 2, b"b")]
    assert log.read(1, 10) == [(1, 2, b"b")] and log.read(2, 10) == []


def test_reads_behind_the_window_come_from_the_store(store: Store) -> None:
    log = make(store, segment_bytes=1 << 20)
    fill(log, store, WINDOW + 500)
    assert log.window[0][0] == 500  # the oldest records left memory
    got = log.read(3, 100)
    assert [r[0] for r in got] == list(range(3, 103))
    assert got[0][2] == b"v0003" and got[0][1] == 1000 + 3 * 10
    assert [r[0] for r in log.read(WINDOW + 490, 100)] == list(range(WINDOW + 490,
                                                                      WINDOW + 500))


def test_segments_and_retention_by_bytes(store: Store) -> None:
    log = make(store, segment_bytes=130)  # 13 bytes a record: 10 a segment
    fill(log, store, 95)
    assert len(log.segments) == 10 and log.bytes == 95 * 13
    removed = log.retain(400, None, 10_000)
    assert removed == 70 and log.first == 70 and log.tail == 95
    store.commit_blocking()
    assert log.read(0, 5)[0][0] == 70  # a read below the first starts at the first
    # the removed range is gone on disk, the rest is there
    assert store.get_raw(CF, log.key(69)) is None and store.get_raw(CF, log.key(70))


def test_retention_by_age_keeps_the_active_segment(store: Store) -> None:
    log = make(store, segment_bytes=130)
    fill(log, store, 25, at_ms=1000, step_ms=100)  # 1000 .. 3400 ms
    assert log.retain(None, 500, 10_000) == 20  # everything is old; the active one stays
    assert log.first == 20 and len(log.segments) == 1


def test_offset_at_a_time(store: Store) -> None:
    log = make(store, segment_bytes=130)
    fill(log, store, 50, at_ms=1000, step_ms=10)  # offset i at 1000 + 10 i
    assert log.offset_at(0) == 0
    assert log.offset_at(1000 + 10 * 17) == 17
    assert log.offset_at(1000 + 10 * 17 - 5) == 17
    assert log.offset_at(99_999) == 50


def test_recovery_reads_segment_records_only(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "db")
    log = make(store, segment_bytes=130)
    fill(log, store, 37)
    log.retain(200, None, 10_000)
    store.commit_blocking()
    first, tail, size = log.first, log.tail, log.bytes
    store.close()
    reopened = Store.open(tmp_path / "db")
    try:
        again = make(reopened, segment_bytes=130)
        again.recover()
        assert (again.first, again.tail, again.bytes) == (first, tail, size)
        assert again.committed == tail
        assert [r[0] for r in again.read(0, 100)] == list(range(first, tail))
        assert again.append(b"next", 9) == tail
    finally:
        reopened.close()


def test_drop_removes_everything_of_one_stream_only(store: Store, tmp_path: Path) -> None:
    a, b = make(store, owner=1), make(store, owner=2)
    fill(a, store, 5)
    fill(b, store, 5)
    a.drop()
    store.commit_blocking()
    fresh_a, fresh_b = make(store, owner=1), make(store, owner=2)
    fresh_a.recover()
    fresh_b.recover()
    assert (fresh_a.tail, len(fresh_a)) == (0, 0)
    assert (fresh_b.tail, len(fresh_b)) == (5, 5)


def test_a_read_from_the_store_is_bounded_in_bytes(store: Store) -> None:
    log = make(store, segment_bytes=1 << 30)
    for _ in range(WINDOW + 200):
        log.append(b"x" * 10_000, 1)  # 10 kB records: the window holds the newest 100
    store.commit_blocking()
    log.synced(store.committer.synced_generation)
    assert len(log.read(0, 1000, 100_000)) == 9  # ~100 kB: mean record 10,008 bytes
    assert len(log.read(0, 1000, 1)) == 1  # never less than one
