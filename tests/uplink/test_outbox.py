"""The uplink outbox on a real RocksDB: staging, reading back, confirming, bounds, restart."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiedge.store import Store
from oxiedge.uplink.outbox import (
    PARKED,
    RETURNED,
    Outbox,
    _Sizes,
    decode_record,
    encode_record,
    stored_outbox_names,
)


@pytest.fixture
def store(tmp_path: Path):  # type: ignore[no-untyped-def]
    s = Store.open(tmp_path / "db")
    yield s
    s.close()


def test_record_round_trip() -> None:
    value = encode_record("sensors/é/1", b"\x00\xffpayload", 1234)
    assert decode_record(value) == (1234, False, "sensors/é/1", b"\x00\xffpayload")
    assert decode_record(encode_record("t", b"", 5, retain=True)) == (5, True, "t", b"")


def test_staged_records_are_read_back_only_once_committed(store: Store) -> None:
    box = Outbox(store, "up1")
    seqs = [box.stage(f"t/{i}", str(i).encode()) for i in range(5)]
    assert seqs == [1, 2, 3, 4, 5]
    assert list(box.read(1, 10)) == []  # not on disk yet: nothing goes upstream
    store.commit_blocking()
    got = list(box.read(1, 10))
    assert [(m.seq, m.topic, m.payload) for m in got] == [
        (i + 1, f"t/{i}", str(i).encode()) for i in range(5)]
    assert [m.seq for m in box.read(3, 2)] == [3, 4]
    assert [m.seq for m in box.read(1, 10, before=3)] == [1, 2]
    assert box.messages == 5 and box.bytes == sum(
        len(encode_record(f"t/{i}", str(i).encode(), 0)) for i in range(5))


def test_confirm_deletes_exactly_that_message_and_survives_reopen(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "db")
    box = Outbox(store, "up1")
    for i in range(10):
        box.stage("t", bytes([i]))
    store.commit_blocking()
    assert box.remove(3) and box.remove(1)
    assert not box.remove(3)  # a duplicate confirm changes nothing
    assert [m.seq for m in box.read(1, 100)] == [2, 4, 5, 6, 7, 8, 9, 10]  # before commit too
    store.commit_blocking()
    assert box.oldest() == 2 and box.messages == 8
    store.close()
    store = Store.open(tmp_path / "db")
    again = Outbox(store, "up1")
    assert again.messages == 8 and again.oldest() == 2
    assert [m.payload for m in again.read(1, 100)] == [bytes([i]) for i in (1, 3, 4, 5, 6, 7, 8, 9)]
    assert again.stage("t", b"new") > 10  # seqs are never reused
    store.close()


def test_seqs_are_not_reused_after_the_outbox_emptied(tmp_path: Path) -> None:
    """The upstream message id DEVICE/UPLINK/SEQ must stay unique across restarts."""
    store = Store.open(tmp_path / "db")
    box = Outbox(store, "up1")
    for _ in range(3):
        box.stage("t", b"x")
    store.commit_blocking()
    for seq in (1, 2, 3):
        box.remove(seq)
    store.commit_blocking()
    store.close()
    store = Store.open(tmp_path / "db")
    again = Outbox(store, "up1")
    assert again.messages == 0 and again.next_seq > 3
    first = again.stage("t", b"y")
    store.commit_blocking()
    assert [m.seq for m in again.read(1, 10)] == [first]
    store.close()


def test_drop_oldest_and_clear(store: Store) -> None:
    box = Outbox(store, "a")
    other = Outbox(store, "b")
    for i in range(4):
        box.stage("t", bytes([i]))
        other.stage("t", bytes([i]))
    store.commit_blocking()
    assert box.drop_oldest() == 1 and box.drop_oldest() == 2
    store.commit_blocking()
    assert [m.seq for m in box.read(1, 10)] == [3, 4]
    assert stored_outbox_names(store) == {"a", "b"}
    box.clear()
    store.commit_blocking()
    assert list(box.read(1, 10)) == [] and box.messages == 0
    assert Outbox(store, "a").messages == 0
    assert Outbox(store, "b").messages == 4  # another uplink's outbox is untouched
    assert stored_outbox_names(store) == {"b"}


def test_names_that_prefix_each_other_do_not_mix(store: Store) -> None:
    a, ab = Outbox(store, "a"), Outbox(store, "a.b")
    a.stage("x", b"1")
    ab.stage("y", b"2")
    store.commit_blocking()
    assert [m.topic for m in Outbox(store, "a").read(1, 10)] == ["x"]
    assert [m.topic for m in Outbox(store, "a.b").read(1, 10)] == ["y"]


def test_oldest_age(store: Store) -> None:
    box = Outbox(store, "a")
    assert box.oldest_age() == 0.0
    box.stage("t", b"x")
    store.commit_blocking()
    assert 0.0 <= box.oldest_age() < 5.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "release"]), st.integers(0, 9000)),
                max_size=200))
def test_sizes_match_a_dict_model(ops: list[tuple[str, int]]) -> None:
    sizes = _Sizes(1)
    model: dict[int, int] = {}
    seq = 1
    for op, n in ops:
        if op == "add":
            for _ in range(1 + n % 50):  # runs long enough to cross chunk boundaries
                sizes.append(seq, n)
                model[seq] = n
                seq += 1
        elif model:
            victim = sorted(model)[n % len(model)]
            sizes.release(victim)
            del model[victim]
        assert sizes.oldest() == (min(model) if model else None)
    for s in range(1, seq):
        assert sizes.get(s) == model.get(s)


def test_sizes_free_whole_chunks() -> None:
    sizes = _Sizes(1)
    for seq in range(1, 10_001):
        sizes.append(seq, 7)
    for seq in range(1, 9_000):
        sizes.release(seq)
    assert len(sizes._chunks) <= 2 and sizes.oldest() == 9_000
    assert sizes.get(9_000) == 7 and sizes.get(100) is None


def test_returned_and_parked_records_wait_unsent_and_are_counted(store: Store) -> None:
    box = Outbox(store, "up1")
    for i in range(6):
        box.stage("a.b" if i == 3 else "t", bytes([i]))
    store.commit_blocking()
    assert box.set_flag(2, RETURNED) and box.set_flag(3, RETURNED) and box.set_flag(5, PARKED)
    assert (box.returned, box.parked, box.messages) == (2, 1, 6)
    assert [m.seq for m in box.read(1, 100)] == [1, 4, 6]  # the normal pass skips them
    assert box.set_flag(3, RETURNED) and box.returned == 2  # idempotent
    # A retry round takes the returned ones in order, unflagged (they go in flight).
    assert [m.seq for m in box.take_returned(0, 1)] == [2]
    assert [m.seq for m in box.take_returned(3, 10)] == [3]
    assert box.returned == 0 and box.take_returned(0, 10) == []
    # Removing a flagged record (a drop, a confirm) keeps the counts right.
    assert box.remove(5) and box.parked == 0
    assert not box.set_flag(5, PARKED)  # gone: nothing to flag
    # A re-check parks what is not sendable and frees the rest, chunk by chunk.
    box.set_flag(1, RETURNED)
    nxt, parked, freed = box.recheck(lambda topic: "." not in topic, 1, 2)
    assert nxt is not None and box.returned == 0  # seq 1 was re-checked: unflagged
    while nxt is not None:
        nxt, p, f = box.recheck(lambda topic: "." not in topic, nxt, 2)
        parked, freed = parked + p, freed + f
    assert (parked, freed, box.parked) == (1, 0, 1)
    assert [m.seq for m in box.read(1, 100)] == [1, 2, 3, 6]
    _n, p, f = box.recheck(lambda topic: True, 1, 100)
    assert (p, f, box.parked) == (0, 1, 0)
    box.clear()
    assert (box.messages, box.returned, box.parked) == (0, 0, 0)


def test_recovery_parks_what_the_definition_cannot_send(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "db")
    box = Outbox(store, "up1")
    for topic in ("t/1", "v1.2/x", "t/2", "v1.2/x"):
        box.stage(topic, b"p")
    store.commit_blocking()
    store.close()
    store = Store.open(tmp_path / "db")
    again = Outbox(store, "up1", sendable=lambda topic: "." not in topic)
    assert (again.messages, again.parked, again.returned) == (4, 2, 0)
    assert [m.topic for m in again.read(1, 10)] == ["t/1", "t/2"]
    store.close()


def test_sizes_keep_flags_apart_from_sizes() -> None:
    sizes = _Sizes(1)
    sizes.append(1, 10)
    sizes.append(2, (1 << 31))  # absurdly big: capped, never spilling into the flags
    sizes.set_flags(1, RETURNED | PARKED)
    assert sizes.get(1) == 10 and sizes.flags(1) == RETURNED | PARKED
    assert sizes.flags(2) == 0 and sizes.get(2) == (1 << 30) - 2
    assert list(sizes.flagged(0, RETURNED)) == [1]
    assert sizes.release(1) == RETURNED | PARKED and sizes.get(1) is None
