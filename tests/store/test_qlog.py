"""The store-level queue log on a real RocksDB: window, read-back, removal, recovery."""

from __future__ import annotations

from collections import deque
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from oxiedge.store import Store
from oxiedge.store.qlog import RANGE_RUN, QueueLog
from oxiedge.store.qlog_read import Reader, decode_each
from oxiedge.store.qlog_recover import META as META_RECORD

CF = "amqp"
PREFIX = b"Q" + (7).to_bytes(8, "big")
META = b"M" + (7).to_bytes(8, "big")


class Item:
    __slots__ = ("payload", "seq")

    def __init__(self, seq: int, payload: bytes) -> None:
        self.seq = seq
        self.payload = payload

    @property
    def size(self) -> int:
        return len(self.payload)


class Codec:
    """Records are ``b"v" + payload``; anything else does not decode."""

    def __init__(self) -> None:
        self.skip: bytes | None = None

    def decode(self, seq: int, value: bytes) -> Item | None:
        if value[:1] != b"v":
            raise ValueError("not a test record")
        if self.skip is not None and value[1:] == self.skip:
            return None
        return Item(seq, bytes(value[1:]))

    def raw_size(self, value: bytes) -> int:
        return max(0, len(value) - 1)

    def decode_run(self, pairs: list[tuple[bytes, bytes]], i: int, width: int,
                   out: deque[Item], room_bytes: int) -> tuple[int, int]:
        return decode_each(self.decode, pairs, i, width, out, room_bytes)


class Tally:
    def __init__(self) -> None:
        self.backlog_bytes = 0


def make(store: Store | None, window: int = 4, tally: Tally | None = None) -> QueueLog[Item]:
    return QueueLog(Codec(), store, CF, PREFIX, META, window=window, window_bytes=1 << 20,
                    tally=tally)


@pytest.fixture
def store(tmp_path: Path):  # type: ignore[no-untyped-def]
    s = Store.open(tmp_path / "db")
    yield s
    s.close()


def fill(q: QueueLog[Item], start: int, n: int, keep: bool = True) -> None:
    for seq in range(start, start + n):
        payload = str(seq).encode()
        q.append(Item(seq, payload), len(payload), b"v" + payload, keep)


def drain(q: QueueLog[Item]) -> list[int]:
    got = []
    while (item := q.peek()) is not None:
        q.pop()
        q.ack(item.seq)
        got.append(item.seq)
    return got


def test_deep_backlog_leaves_memory_once_synced_and_reads_back_in_windows(store: Store) -> None:
    q = make(store)
    fill(q, 0, 1000, keep=False)
    assert len(q.fresh) == 1000  # not synced: still in memory
    store.commit_blocking()
    fill(q, 1000, 1)
    store.commit_blocking()  # the next round lets go of what the one before synced
    assert len(q.fresh) == 1 and not q.ready and (q.disk_from, q.disk_to) == (0, 1000)
    assert (len(q), q.bytes) == (1001, sum(len(str(i)) for i in range(1001)))
    assert drain(q) == list(range(1001))
    assert q.read_back == 1001 and len(q) == 0 and q.bytes == 0  # (every one synced)


def test_a_draining_consumer_gets_the_next_window_read_ahead_in_the_round(store: Store) -> None:
    q = make(store, window=8)
    fill(q, 0, 40, keep=False)
    store.commit_blocking()
    fill(q, 40, 1)
    store.commit_blocking()  # the next round lets go of what the one before synced
    first = q.peek()
    assert first is not None and q.read_back == 8 and len(q.ready) == 8
    for _ in range(6):  # the consumer takes and acknowledges 6: the window runs low
        item = q.peek()
        assert item is not None
        q.pop()
        q.ack(item.seq)
    q.peek()
    q.pop()  # one out (a consumer is draining), one left in memory
    assert len(q.ready) == 1 and q.read_back == 8
    store.commit_blocking()  # the round reads ahead: ``peek`` will not wait for the disk
    assert len(q.ready) == 8 and q.read_back == 15
    assert drain(q) == list(range(7, 41))


def test_a_consumer_that_keeps_up_is_served_from_memory(store: Store) -> None:
    q = make(store, window=8)
    for seq in range(100):
        fill(q, seq, 1)
        assert drain(q) == [seq]
        if seq % 10 == 0:
            store.commit_blocking()
    assert q.read_back == 0 and not q.fresh


def test_acked_runs_go_as_one_range_delete_per_round_and_counters_persist(store: Store) -> None:
    q = make(store)
    fill(q, 0, 50)
    store.commit_blocking()
    assert drain(q)[:3] == [0, 1, 2]
    assert q.removals.deleted_to == 50 and q.removals.flushed_to == 0
    store.commit_blocking()
    assert q.removals.flushed_to == 50
    assert list(store.iter_raw(CF, PREFIX)) == []
    again = make(store)
    again.recover()
    assert (len(again), again.tail, again.removals.deleted_to) == (0, 50, 50)


def test_a_long_drain_leaves_one_range_delete_per_run_and_recovery_removes_a_run_left(
        store: Store) -> None:
    n = RANGE_RUN + 100
    q = make(store, window=8)
    fill(q, 0, n, keep=False)
    store.commit_blocking()
    fill(q, n, 1)
    for _ in range(10):
        item = q.peek()
        assert item is not None
        q.pop()
        q.ack(item.seq)
    store.commit_blocking()
    # Below the floor, not deleted yet: the run is short and the queue is not empty.
    assert (q.removals.deleted_to, q.removals.flushed_to) == (10, 0)
    assert next(store.iter_raw(CF, PREFIX))[0] == PREFIX + (0).to_bytes(8, "big")
    again = make(store)  # as after a SIGKILL now: the counters' floor is 10
    again.recover()
    assert (len(again), again.disk_from) == (n - 9, 10)
    store.commit_blocking()  # recovery staged the range delete of what was left below
    assert next(store.iter_raw(CF, PREFIX))[0] == PREFIX + (10).to_bytes(8, "big")
    assert drain(again)[:2] == [10, 11]
    store.commit_blocking()
    assert list(store.iter_raw(CF, PREFIX)) == []


def test_out_of_order_ack_deletes_that_record_alone(store: Store) -> None:
    q = make(store)
    fill(q, 0, 3)
    store.commit_blocking()
    for _ in range(3):
        q.peek()
        q.pop()
    q.ack(1)
    store.commit_blocking()
    assert [k[-1] for k, _ in store.iter_raw(CF, PREFIX)] == [0, 2]
    q.ack(0)
    q.ack(2)
    store.commit_blocking()
    assert list(store.iter_raw(CF, PREFIX)) == []


def test_recovery_reads_counters_not_the_backlog(store: Store) -> None:
    q = make(store)
    fill(q, 0, 300, keep=False)
    store.commit_blocking()
    for _ in range(100):
        q.drop_oldest()
    store.commit_blocking()
    again = make(store)
    again.recover()
    assert (len(again), again.tail, again.disk_from, again.disk_to) == (200, 300, 100, 300)
    assert again.bytes == sum(len(str(i)) for i in range(100, 300))
    assert not again.ready and not again.fresh and again.read_back == 0
    assert drain(again) == list(range(100, 300))


def test_recovery_without_counters_scans_once(store: Store) -> None:
    for seq in (3, 4, 9):
        store.stage_put(CF, PREFIX + seq.to_bytes(8, "big"), b"v" + bytes([65 + seq]))
    store.commit_blocking()
    q = make(store)
    q.recover()
    assert (len(q), q.bytes, q.tail) == (3, 3, 10)
    store.commit_blocking()  # the counters are written now
    assert store.get_raw(CF, META) is not None
    assert drain(q) == [3, 4, 9]


def test_undecodable_record_is_quarantined_on_read_back(store: Store) -> None:
    q = make(store)
    fill(q, 0, 10, keep=False)
    store.commit_blocking()
    store.stage_put(CF, q.key(4), b"garbage")
    store.commit_blocking()
    assert drain(q) == [0, 1, 2, 3, 5, 6, 7, 8, 9]
    assert q.quarantined == 1 and len(q) == 0
    store.commit_blocking()
    assert store.quarantine_status()["records"] == 1


def test_codec_may_skip_a_record_on_read_back(store: Store) -> None:
    q = make(store)
    fill(q, 0, 5, keep=False)
    store.commit_blocking()
    q.codec.skip = b"2"  # type: ignore[attr-defined]
    assert drain(q) == [0, 1, 3, 4]
    assert q.skipped == 1 and len(q) == 0 and q.bytes == 0


def test_memory_only_queue() -> None:
    q = make(None)
    fill(q, 0, 10, keep=False)
    assert q.drop_oldest() is not None
    assert [i.seq for i in q] == list(range(1, 10))
    assert drain(q) == list(range(1, 10))


class QueueModel(RuleBasedStateMachine):
    """The queue log against a plain deque, through commits and recoveries."""

    def __init__(self) -> None:
        super().__init__()
        import tempfile

        self.tmp = tempfile.TemporaryDirectory()
        self.store = Store.open(Path(self.tmp.name) / "db")
        self.tally = Tally()
        self.q = make(self.store, window=3, tally=self.tally)
        self.waiting: deque[tuple[int, bytes]] = deque()
        self.out: dict[int, bytes] = {}
        self.next_seq = 0

    def teardown(self) -> None:
        self.store.close()
        self.tmp.cleanup()

    @rule(payload=st.binary(max_size=6), keep=st.booleans())
    def append(self, payload: bytes, keep: bool) -> None:
        seq = self.next_seq
        self.next_seq += 1
        self.q.append(Item(seq, payload), len(payload), b"v" + payload, keep)
        self.waiting.append((seq, payload))

    @precondition(lambda self: not self.waiting)
    @rule(payload=st.binary(max_size=6))
    def append_sent(self, payload: bytes) -> None:
        seq = self.next_seq
        self.next_seq += 1
        self.q.append_sent(seq, len(payload), b"v" + payload)
        self.out[seq] = payload

    @rule()
    def pop(self) -> None:
        item = self.q.peek()
        if not self.waiting:
            assert item is None
            return
        assert item is not None and (item.seq, item.payload) == self.waiting[0]
        self.q.pop()
        seq, payload = self.waiting.popleft()
        self.out[seq] = payload

    @precondition(lambda self: bool(self.out))
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        seq = data.draw(st.sampled_from(sorted(self.out)))
        assert self.q.ack(seq)
        del self.out[seq]

    @precondition(lambda self: bool(self.out))
    @rule(data=st.data())
    def put_back(self, data: st.DataObject) -> None:
        """A requeue: popped messages go back to their places (maybe below others out)."""
        seqs = sorted(data.draw(st.sets(st.sampled_from(sorted(self.out)), min_size=1)))
        self.q.put_back([Item(seq, self.out[seq]) for seq in seqs])
        for seq in seqs:
            self.waiting.append((seq, self.out.pop(seq)))
        self.waiting = deque(sorted(self.waiting))

    @rule()
    def drop_oldest(self) -> None:
        item = self.q.drop_oldest()
        if self.waiting:
            assert item is not None and item.seq == self.waiting.popleft()[0]
        else:
            assert item is None

    @rule()
    def commit(self) -> None:
        self.store.commit_blocking()

    @rule()
    def restart(self) -> None:
        """Everything committed; what was out is delivered again, in seq order."""
        self.store.commit_blocking()
        self.tally = Tally()
        self.q = make(self.store, window=3, tally=self.tally)
        self.q.recover()
        self.waiting = deque(sorted([*self.out.items(), *self.waiting]))
        self.out = {}

    @invariant()
    def same_contents(self) -> None:
        q = self.q
        assert [(i.seq, i.payload) for i in q] == list(self.waiting)
        assert len(q) == len(self.waiting)
        assert q.count == len(self.waiting) + len(self.out)  # (a store: popped ones count)
        assert q.bytes == sum(len(p) for _, p in self.waiting) + sum(map(len, self.out.values()))
        assert self.tally.backlog_bytes == q.bytes


QueueModel.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None,
                                        suppress_health_check=[HealthCheck.too_slow])
test_queue_model = QueueModel.TestCase


def test_put_back_returns_popped_messages_to_their_places_and_keeps_the_floor(
        store: Store, tmp_path: Path) -> None:
    q = make(store, window=4)
    fill(q, 0, 6)
    taken = [q.pop() for _ in range(3)]  # 0, 1, 2 out
    q.put_back([taken[1]])  # 1 back in the window, before 3
    assert [i.seq for i in q.ready][:2] == [1, 3]
    again = q.pop()  # 1 out again: ``out`` is now 0, 2, 1
    assert again.seq == 1
    q.ack(0)
    q.ack(2)
    store.commit_blocking()  # the range delete must stop below 1, still out
    assert store.get_raw(CF, q.key(1)) is not None
    q.ack(1)
    assert drain(q) == [3, 4, 5] and len(q) == 0


def test_a_record_less_message_stays_in_the_window_or_is_refused(store: Store) -> None:
    q = make(store, window=2)
    assert q.append(Item(0, b"a"), 1, None) and q.append(Item(1, b"b"), 1, None)
    assert not q.append(Item(2, b"c"), 1, None)  # the window is full: needs a record
    assert q.append(Item(2, b"c"), 1, b"vc")
    store.commit_blocking()
    assert store.get_raw(CF, q.key(0)) is None and drain(q) == [0, 1, 2]


def test_discard_waiting_removes_the_disk_run_with_one_range_delete(store: Store) -> None:
    q = make(store, window=4)
    fill(q, 0, 100, keep=False)
    store.commit_blocking()
    fill(q, 100, 1)
    first = q.pop() if q.peek() is not None else None
    assert first is not None and q.discard_waiting() == 100
    store.commit_blocking()
    assert len(q) == 0 and store.read_range(CF, q.key(1), q.key(101), 10) == []
    q.ack(first.seq)
    fill(q, 101, 2)
    assert drain(q) == [101, 102]


def test_a_message_put_back_below_every_out_one_keeps_its_record(store: Store) -> None:
    """A requeued message older than every message still out is live: neither the floor
    in the counters nor a range delete of an in-order ack run may pass it."""
    n = RANGE_RUN + 10
    q = make(store, window=n + 1)
    fill(q, 0, n)
    store.commit_blocking()
    taken = [q.pop() for _ in range(n)]
    q.put_back([taken[0]])  # 0 requeued (a nack), 1.. still out
    for item in taken[1:]:  # the rest acknowledged in order: one long run
        q.ack(item.seq)
    store.commit_blocking()
    assert store.get_raw(CF, q.key(0)) is not None
    again = make(store)  # as after a SIGKILL now
    again.recover()
    assert len(again) == 1 and drain(again) == [0]


def test_messages_without_a_record_are_not_in_the_counters_a_restart_reads(
        store: Store) -> None:
    q = make(store, window=8)
    q.append(Item(0, b"a"), 1, b"va")
    q.append(Item(1, b"b"), 1, None)  # kept in the window only: gone after a restart
    q.append(Item(2, b"c"), 1, None)
    q.append(Item(3, b"d"), 1, b"vd")
    q.pop()
    q.pop()  # 1 out, then acknowledged: no longer bare
    q.ack(1)
    store.commit_blocking()
    again = make(store, window=8)
    again.recover()
    assert (len(again), again.bytes) == (2, 2)  # 0 (out here) and 3
    assert drain(again) == [0, 3] and len(again) == 0
    assert q.discard_waiting() == 2 and not q.bare  # 2 was bare, 3 not


def test_counters_that_were_off_come_right_once_nothing_waits(store: Store) -> None:
    for seq in (0, 3):
        store.stage_put(CF, PREFIX + seq.to_bytes(8, "big"), b"v%d" % seq)
    # As an earlier version wrote them: 3 messages counted (one kept without a record).
    store.stage_put(CF, META, META_RECORD.pack(0, 4, 3, 3))
    store.commit_blocking()
    q = make(store)
    q.recover()
    assert len(q) == 3
    assert drain(q) == [0, 3] and (len(q), q.bytes) == (0, 0)
    store.commit_blocking()
    again = make(store)
    again.recover()
    assert len(again) == 0


def test_requeued_messages_past_the_byte_window_then_a_bad_head_lose_nothing(
        store: Store) -> None:
    """Requeued messages fill the window's bytes, a message is out, a round goes: the
    record at the head of the disk run that does not decode is quarantined, not jumped
    over with the good ones after it (the mean size is 0 here: a read asks for a long
    chunk)."""
    q: QueueLog[Item] = QueueLog(Codec(), store, CF, PREFIX, META, window=8, window_bytes=100)
    big = b"x" * 60
    for seq in range(400):
        payload = big if seq < 4 else b""
        q.append(Item(seq, payload), len(payload), b"garbage" if seq == 4 else b"v" + payload,
                 False)
    store.commit_blocking()
    fill(q, 400, 1)
    store.commit_blocking()
    taken = [q.take() for _ in range(3)]  # 0, 1, 2 out; 3 in the window
    q.put_back([item for item in taken[:2] if item is not None])  # 0, 1 requeued
    assert q.ready_bytes > q.window_bytes and q.out and q.disk_from == 4
    fill(q, 401, 1)
    store.commit_blocking()
    got = drain(q)
    q.ack(2)
    assert got == [0, 1, 3, *range(5, 402)] and len(q) == 0 and q.quarantined == 1


def test_a_read_with_the_bytes_full_passes_a_bad_record_to_the_first_message(
        store: Store) -> None:
    for seq in range(10):
        store.stage_put(CF, PREFIX + seq.to_bytes(8, "big"), b"garbage" if seq == 0 else
                        b"v%d" % seq)
    store.stage_put(CF, PREFIX + (0).to_bytes(8, "big") + b"x", b"v")  # a key too long
    store.commit_blocking()
    reader = Reader(Codec(), store, CF, PREFIX)
    out: deque[Item] = deque()
    assert reader.read(0, 10, out, 8, 0, 0) == (1, 1, 2)
    assert [item.seq for item in out] == [1] and len(reader.bad) == 2


def test_a_record_less_message_out_does_not_stage_a_range_delete_each_round(
        store: Store) -> None:
    """The run below the floor waits for ``RANGE_RUN`` while the queue holds a message,
    with or without a record (messages kept in the window only count too)."""
    q = make(store, window=8)
    for seq in range(3):
        assert q.append(Item(seq, b"a"), 1, None)
        q.take()  # out: a consumer with three in flight
    q.ack(0)
    store.commit_blocking()
    assert (q.removals.deleted_to, q.removals.flushed_to) == (1, 0)


def test_the_read_ahead_keeps_to_the_byte_window(store: Store) -> None:
    """A consumer with a message out and a publisher's rounds: each round reads ahead only
    while the window has room in bytes (before, one message more each round, up to half
    the window's count of any size)."""
    q: QueueLog[Item] = QueueLog(Codec(), store, CF, PREFIX, META, window=64, window_bytes=100)
    big = b"x" * 60
    for seq in range(100):
        q.append(Item(seq, big), 60, b"v" + big, False)
    store.commit_blocking()
    assert q.take() is not None  # one out, one in the window
    for seq in range(100, 120):
        q.append(Item(seq, big), 60, b"v" + big, False)
        store.commit_blocking()
        assert q.ready_bytes <= q.window_bytes + 60
