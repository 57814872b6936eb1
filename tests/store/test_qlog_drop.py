"""``QueueLog.drop_disk_head``: a run at the head of the disk part leaves the queue without
being read back (an AMQP queue's TTL expiry without a dead-letter exchange), on a real
RocksDB, across a restart."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from oxiedge.store import Store
from oxiedge.store.qlog import RANGE_RUN

from .test_qlog import CF, drain, fill, make


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(tmp_path / "db")
    yield s
    s.close()


def size(seqs: range) -> int:
    return sum(len(str(i)) for i in seqs)


def test_a_run_dropped_below_the_floor_goes_with_the_run_and_a_restart_agrees(store: Store
                                                                               ) -> None:
    q = make(store, window=4)
    fill(q, 0, 50, keep=False)
    store.commit_blocking()
    fill(q, 50, 1)
    store.commit_blocking()  # (the next round lets go of the synced ones: disk part [0, 50))
    assert not q.ready and (q.disk_from, q.disk_to) == (0, 50)
    q.drop_disk_head(30, 30, size(range(30)))
    assert (len(q), q.bytes, q.read_back) == (21, size(range(30, 51)), 0)
    store.commit_blocking()
    again = make(store)  # as after a SIGKILL now: the floor is past the run
    again.recover()
    assert len(again) == 21 and drain(again) == list(range(30, 51))


def test_a_run_dropped_behind_an_unacknowledged_message_is_range_deleted_at_once(
        store: Store) -> None:
    q = make(store, window=4)
    fill(q, 0, 40, keep=False)
    store.commit_blocking()
    fill(q, 40, 1)
    held = q.pop() if q.peek() is not None else None  # 0 out: the floor stays at 0
    assert held is not None and held.seq == 0
    for _ in range(3):
        item = q.pop()
        q.ack(item.seq)
    assert not q.ready and q.disk_from == 4
    q.drop_disk_head(20, 16, size(range(4, 20)))
    store.commit_blocking()
    assert store.read_range(CF, q.key(1), q.key(20), 10) == []
    again = make(store)  # a restart: 0 (unacknowledged) comes again, then 20..40
    again.recover()
    assert drain(again) == [0, *range(20, 41)]
    q.ack(0)
    assert drain(q) == list(range(20, 41)) and len(q) == 0


def test_dropping_the_whole_disk_part_leaves_the_fresh_messages(store: Store) -> None:
    q = make(store, window=4)
    fill(q, 0, RANGE_RUN + 5, keep=False)
    store.commit_blocking()
    fill(q, RANGE_RUN + 5, 2)
    store.commit_blocking()  # (the next round lets go of the synced ones)
    q.drop_disk_head(q.disk_to, RANGE_RUN + 5, size(range(RANGE_RUN + 5)))
    assert drain(q) == [RANGE_RUN + 5, RANGE_RUN + 6]
    store.commit_blocking()
    assert store.read_range(CF, q.key(0), q.key(RANGE_RUN + 7), 10) == []
