"""The uplink outbox on a real RocksDB: staging, taking, confirming, holding aside, bounds,
restart, and a data dir written before the outbox was a queue log."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiedge.store import Store
from oxiedge.uplink.held import PARKED, RETURNED, SENDING, WAITING, Held
from oxiedge.uplink.outbox import (
    CF,
    Outbox,
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


def everything(box: Outbox) -> list[int]:
    """Take every durable message (they are in flight afterwards)."""
    return [m.seq for m in box.take(10_000, box.next_seq)]


def test_only_durable_records_are_taken(store: Store) -> None:
    box = Outbox(store, "up1")
    seqs = [box.stage(f"t/{i}", str(i).encode(), keep=i % 2 == 0) for i in range(5)]
    assert seqs == [1, 2, 3, 4, 5]
    assert box.take(10, before=1) == []  # the caller's durable seq: nothing below it
    store.commit_blocking()
    got = box.take(2, box.next_seq)
    assert [(m.seq, m.topic, m.payload) for m in got] == [(1, "t/0", b"0"), (2, "t/1", b"1")]
    assert [m.seq for m in box.take(10, before=4)] == [3]
    assert everything(box) == [4, 5]
    assert box.messages == 5 and box.bytes == sum(
        len(encode_record(f"t/{i}", str(i).encode(), 0)) for i in range(5))


def test_confirm_removes_exactly_that_message_and_survives_reopen(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "db")
    box = Outbox(store, "up1")
    for i in range(10):
        box.stage("t", bytes([i]))
    store.commit_blocking()
    assert everything(box) == list(range(1, 11))
    assert box.remove(3) and box.remove(1)
    assert not box.remove(3)  # a duplicate confirm changes nothing
    store.commit_blocking()
    assert box.messages == 8
    store.close()
    store = Store.open(tmp_path / "db")
    again = Outbox(store, "up1")
    assert again.messages == 8
    assert [m.payload for m in again.take(100, again.next_seq)] == [
        bytes([i]) for i in (1, 3, 4, 5, 6, 7, 8, 9)]
    assert again.stage("t", b"new") > 10  # seqs are never reused
    store.close()


def test_a_dead_connection_gives_its_messages_back_in_order(store: Store) -> None:
    box = Outbox(store, "up1")
    for i in range(6):
        box.stage("t", bytes([i]))
    store.commit_blocking()
    first = box.take(4, box.next_seq)
    assert box.remove(2)
    box.release([m for m in first if m.seq != 2])
    assert everything(box) == [1, 3, 4, 5, 6] and box.messages == 5


def test_seqs_are_not_reused_after_the_outbox_emptied(tmp_path: Path) -> None:
    """The upstream message id DEVICE/UPLINK/SEQ must stay unique across restarts."""
    store = Store.open(tmp_path / "db")
    box = Outbox(store, "up1")
    for _ in range(3):
        box.stage("t", b"x")
    store.commit_blocking()
    for seq in everything(box):
        box.remove(seq)
    store.commit_blocking()
    store.close()
    store = Store.open(tmp_path / "db")
    again = Outbox(store, "up1")
    assert again.messages == 0 and again.next_seq > 3
    first = again.stage("t", b"y")
    store.commit_blocking()
    assert everything(again) == [first]
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
    assert everything(box) == [3, 4]
    assert box.drop_oldest() is None  # what is in flight waits for its confirm
    assert stored_outbox_names(store) == {"a", "b"}
    box.clear()
    store.commit_blocking()
    assert box.take(10, box.next_seq) == [] and box.messages == 0
    assert Outbox(store, "a").messages == 0 and Outbox(store, "a").next_seq == 5
    assert Outbox(store, "b").messages == 4  # another uplink's outbox is untouched
    assert stored_outbox_names(store) == {"b"}


def test_names_that_prefix_each_other_do_not_mix(store: Store) -> None:
    a, ab = Outbox(store, "a"), Outbox(store, "a.b")
    a.stage("x", b"1")
    ab.stage("y", b"2")
    store.commit_blocking()
    assert [m.topic for m in Outbox(store, "a").take(10, 10)] == ["x"]
    assert [m.topic for m in Outbox(store, "a.b").take(10, 10)] == ["y"]


def test_oldest_age(store: Store) -> None:
    box = Outbox(store, "a")
    assert box.oldest_age() == 0.0
    box.stage("t", b"x")
    store.commit_blocking()
    assert 0.0 <= box.oldest_age() < 5.0


def test_returned_and_parked_records_wait_aside_and_are_counted(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "db")
    box = Outbox(store, "up1")
    for i in range(6):
        box.stage("a.b" if i == 2 else "t", bytes([i]))
    store.commit_blocking()
    assert box.take(3, box.next_seq)[-1].seq == 3  # 1, 2, 3 in flight
    assert box.hold(2, RETURNED) and box.hold(3, RETURNED)
    assert not box.hold(5, PARKED)  # not in flight: the link parks what it takes
    assert [m.seq for m in box.take(2, box.next_seq)] == [4, 5]
    assert box.hold(5, PARKED)
    assert (box.returned, box.parked, box.messages) == (2, 1, 6)
    assert everything(box) == [6]  # the normal pass does not meet them again
    assert box.hold(3, RETURNED) and box.returned == 2  # idempotent
    store.commit_blocking()
    # A retry round takes the returned ones in order (in flight again).
    assert [m.seq for m in box.take_held(RETURNED, 0, 1)] == [2]
    assert [m.seq for m in box.take_held(RETURNED, 3, 10)] == [3]
    assert box.returned == 0 and box.take_held(RETURNED, 0, 10) == []
    assert box.held.state(2) == SENDING and box.topic_of(3) == "a.b"
    # Removing a held record (a drop, a confirm) keeps the counts right.
    assert box.remove(5) and box.parked == 0 and box.messages == 5
    assert not box.hold(5, PARKED)  # gone: nothing to hold
    # A re-check parks what is not sendable and frees the rest, chunk by chunk.
    assert box.hold(2, RETURNED) and box.hold(3, RETURNED)
    store.commit_blocking()
    nxt, parked, freed = box.recheck(lambda topic: "." not in topic, 0, 1)
    assert nxt == 3 and box.returned == 1  # seq 2 was re-checked: to be sent again
    while nxt is not None:
        nxt, p, f = box.recheck(lambda topic: "." not in topic, nxt, 1)
        parked, freed = parked + p, freed + f
    assert (parked, freed, box.parked, box.held.waiting) == (1, 0, 1, 1)
    box.release(box.take_held(WAITING, 0, 10))
    store.commit_blocking()
    store.close()
    # A restart finds the held records: sent once more, or parked if they cannot be.
    store = Store.open(tmp_path / "db")
    again = Outbox(store, "up1", sendable=lambda topic: "." not in topic)
    assert (again.messages, again.parked, again.held.waiting) == (5, 1, 1)
    assert everything(again) == [1, 4, 6]  # in flight before: the log has them again
    assert [m.seq for m in again.take_held(WAITING, 0, 10)] == [2]
    nxt, p, f = again.recheck(lambda topic: True, 0, 100)
    assert (nxt, p, f, again.parked, again.held.waiting) == (None, 0, 1, 0, 1)
    again.clear()
    assert (again.messages, again.returned, again.parked) == (0, 0, 0)
    store.commit_blocking()
    assert list(again.records()) == []
    store.close()


def test_a_record_that_does_not_decode_is_quarantined_and_the_rest_flows(
        store: Store) -> None:
    box = Outbox(store, "up1")
    for i in range(3):
        box.stage("t", bytes([i]))
    store.commit_blocking()
    store.stage_put(CF, box.log.key(2), b"\x00\x01")  # shorter than a header
    store.commit_blocking()
    again = Outbox(store, "up1")
    assert [m.payload for m in again.take(10, again.next_seq)] == [b"\x00", b"\x02"]
    assert again.log.quarantined == 1


def _old_layout(store: Store, name: str, records: list[tuple[int, bytes]], mark: int) -> None:
    """What the outbox wrote before it was a queue log: ``o`` records, an ``n`` seq mark."""
    for seq, value in records:
        store.stage_put(CF, b"o" + name.encode() + b"\x00" + struct.pack(">Q", seq), value)
    store.stage_put(CF, b"n" + name.encode(), struct.pack(">Q", mark))
    store.commit_blocking()


def test_an_outbox_of_the_old_layout_is_sent_in_order_and_keeps_its_seqs(
        tmp_path: Path) -> None:
    store = Store.open(tmp_path / "db")
    old = [(seq, encode_record(f"t/{seq}", b"p%d" % seq, 1000 + seq)) for seq in (7, 8, 10)]
    _old_layout(store, "up1", old, 1031)
    box = Outbox(store, "up1")
    assert (box.messages, box.bytes, box.next_seq) == (3, sum(len(v) for _, v in old), 1031)
    assert box.stage("t/new", b"n") == 1031
    store.commit_blocking()
    got = box.take(10, box.next_seq)
    assert [(m.seq, m.topic, m.enqueued_ms) for m in got[:3]] == [
        (7, "t/7", 1007), (8, "t/8", 1008), (10, "t/10", 1010)]
    assert box.remove(7)
    box.release(got[1:])
    store.commit_blocking()
    store.close()
    store = Store.open(tmp_path / "db")
    again = Outbox(store, "up1")  # the counters record now; the old mark is removed
    store.commit_blocking()
    assert store.get_raw(CF, b"nup1") is None and store.get_raw(CF, b"cup1") is not None
    assert (again.messages, again.next_seq) == (3, 1032)
    assert everything(again) == [8, 10, 1031]
    store.close()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "remove", "state"]), st.integers(0, 3000)),
                max_size=120))
def test_held_index_matches_a_dict_model(tmp_path_factory: pytest.TempPathFactory,
                                         ops: list[tuple[str, int]]) -> None:
    store = Store.open(tmp_path_factory.mktemp("held") / "db")
    try:
        held = Held(store, CF, b"hx\x00")
        model: dict[int, tuple[int, int]] = {}
        for op, n in ops:
            if op == "add":  # runs long enough for a compaction, some out of order
                for k in range(1 + n % 700):
                    seq = n * 3 + k if n % 5 else n // 2 + k
                    if seq not in model:
                        held.put(seq, b"v" * (n % 9), n % 4)
                        model[seq] = (n % 9, n % 4)
            elif model:
                victim = sorted(model)[n % len(model)]
                if op == "remove":
                    for seq in sorted(model)[:1 + n % 900]:  # mostly from the front
                        assert held.remove(seq)
                        del model[seq]
                    assert not held.remove(victim) or victim in model
                    model.pop(victim, None)
                else:
                    assert held.set_state(victim, n % 4)
                    model[victim] = (model[victim][0], n % 4)
            assert held.count == len(model)
            assert held.bytes == sum(size for size, _ in model.values())
            assert held.oldest() == (min(model) if model else None)
        for state in range(4):
            assert list(held.seqs(state)) == sorted(s for s, (_, x) in model.items()
                                                    if x == state)
            assert held.states[state] == sum(1 for _, x in model.values() if x == state)
    finally:
        store.close()
