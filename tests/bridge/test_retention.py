"""Retention on a real RocksDB: oldest first, bounded batches, no rescans, index entries too."""

from __future__ import annotations

import time

import pytest

from oxiedge.ingest.retention import BATCH, Policy, Retention, parse_duration, validate_policy
from oxiedge.store import Store
from oxiedge.store.index import create_index


def test_durations_and_policies() -> None:
    assert parse_duration("30d") == 30 * 86400 and parse_duration("90m") == 5400
    assert parse_duration("2w") == 14 * 86400 and parse_duration("45") == 45
    for bad in ("", "0s", "-1d", "1y", "soon", "1.5h"):
        with pytest.raises(ValueError):
            parse_duration(bad)
    assert validate_policy(1_000_000, "30d") == Policy(1_000_000, 30 * 86400)
    with pytest.raises(ValueError, match="max-docs"):
        validate_policy(0, None)
    assert Policy(10, None).merge(Policy(5, 60)) == Policy(5, 60)
    assert not Policy()


async def test_max_docs_deletes_oldest_in_batches_without_rescanning(store: Store) -> None:
    now = int(time.time() * 1000)
    async with store.running():
        await store.insert_many("r", [{"n": i, "_received_at": now} for i in range(3 * BATCH)])
        await create_index(store, "r", "n")
        retention = Retention(store)
        retention.set_policies({"r": Policy(max_docs=500)})
        rounds = store.committer.rounds
        store.docs_read = 0
        # The publish-path check is a count comparison, never a read.
        retention.after_insert("r")
        assert store.docs_read == 0
        assert await retention.enforce() == 3 * BATCH - 500
        assert store.committer.rounds - rounds >= (3 * BATCH - 500) // BATCH  # bounded batches
        assert [d["n"] for d in store.find("r", sort="_id")] == list(range(3 * BATCH - 500,
                                                                         3 * BATCH))
        # The index lost the deleted documents' entries in the same batches.
        assert store.find("r", {"n": {"$lt": 100}}) == []
        assert sum(1 for _ in store.iter_raw("idx")) == 500
        # The next round starts at the floor: it reads only what it deletes.
        await store.insert_many("r", [{"n": -1, "_received_at": now} for _ in range(10)])
        store.docs_read = 0
        assert await retention.enforce() == 10
        assert store.docs_read <= 2 * 10  # the scan (its documents give the index entries)
        assert retention.deleted == {"r": 3 * BATCH - 500 + 10}


async def test_max_age_deletes_expired_oldest_first(store: Store) -> None:
    now = int(time.time() * 1000)
    old, young = now - 3_600_000, now
    async with store.running():
        await store.insert_many("a", [{"k": "old", "_received_at": old} for _ in range(1500)]
                                + [{"k": "manual"}]  # not from ingest: left to max_docs
                                + [{"k": "new", "_received_at": young} for _ in range(5)])
        retention = Retention(store)
        retention.set_policies({"a": Policy(max_age=60)})
        assert await retention.enforce() == 1500
        assert [d["k"] for d in store.find("a")] == ["manual"] + ["new"] * 5
        store.docs_read = 0
        assert await retention.enforce() == 0
        assert store.docs_read == 1  # stopped at the first young document
        assert retention.status() == {"a": {"max_age": "1m", "deleted": 1500}}
