from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from oxiedge.store import CommitError, Store


async def test_lone_writer_is_committed_at_once(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "db")
    async with store.running():
        for i in range(20):
            with trio.fail_after(5):
                await store.insert("c", {"i": i})
        # One writer, one round per write: nothing waits for company or for a timer.
        assert store.committer.rounds == 20
    store.close()


async def test_concurrent_writers_share_rounds(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "db")
    writers, per_writer = 64, 20
    async with store.running():

        async def writer(w: int) -> None:
            for n in range(per_writer):
                await store.insert("c", {"w": w, "n": n})

        async with trio.open_nursery() as nursery:
            for w in range(writers):
                nursery.start_soon(writer, w)
        rounds = store.committer.rounds
    total = writers * per_writer
    assert store.count("c") == total
    # Far fewer syncs than writes: every round carries many writers' documents.
    assert rounds <= total // 8, f"{rounds} rounds for {total} writes"
    ids = sorted(d["_id"] for d in store.find("c"))
    assert ids == list(range(1, total + 1))
    store.close()


async def test_staged_without_wait_is_committed_by_kick(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "db")
    async with store.running():
        store.stage_insert("c", {"qos": 0})
        store.kick()
        with trio.fail_after(5):
            while store.committer.pending or store.committer.rounds == 0:
                await trio.sleep(0.001)
    store.close()
    reopened = Store.open(tmp_path / "db")
    assert reopened.count("c") == 1
    reopened.close()


async def test_shutdown_commits_what_is_pending(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "db")
    async with store.running():
        store.stage_insert("c", {"late": True})
    store.close()
    reopened = Store.open(tmp_path / "db")
    assert reopened.find("c")[0]["late"] is True
    reopened.close()


async def test_disk_full_fails_every_waiter_and_stops_acks(
        small_tmpfs: Callable[[str], Path]) -> None:
    """A real full filesystem: the failing round's waiters all get CommitError, never an ack."""
    mnt = small_tmpfs("3m")
    store = Store.open(mnt / "db")
    acked = 0
    errors = 0
    blob = os.urandom(40_000).hex()  # incompressible

    async def writer() -> None:
        nonlocal acked, errors
        for _ in range(100):
            store.stage_insert("c", {"blob": blob})
            try:
                await store.commit()
            except CommitError:
                errors += 1
                return
            acked += 1

    with trio.fail_after(60):
        async with store.running(), trio.open_nursery() as nursery:
            for _ in range(8):
                nursery.start_soon(writer)
    assert errors == 8, "every writer must see the failure, none may hang"
    assert store.committer.failed is not None
    # Durable writing stays stopped: a later write is refused, not acknowledged.
    store.stage_insert("c", {"after": "failure"})
    with pytest.raises(CommitError):
        store.commit_blocking()
    try:
        store.close()
    except Exception:
        pass
    assert acked < 800


def test_acknowledged_writes_survive_sigkill(tmp_path: Path) -> None:
    """Writers in a subprocess print ACK after each commit; SIGKILL; every ACK is on disk."""
    db = tmp_path / "db"
    script = Path(__file__).with_name("crash_writer.py")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2]))
    proc = subprocess.Popen([sys.executable, str(script), str(db), "16"], stdout=subprocess.PIPE,
                            text=True, env=env)
    assert proc.stdout is not None
    acked: list[tuple[int, int, int]] = []
    assert proc.stdout.readline().strip() == "READY"
    for line in proc.stdout:
        parts = line.split()
        if len(parts) == 4 and parts[0] == "ACK":
            acked.append((int(parts[1]), int(parts[2]), int(parts[3])))
        if len(acked) >= 3000:
            break
    proc.send_signal(signal.SIGKILL)
    # Lines already written to the pipe are acknowledgements too.
    rest = proc.stdout.read()
    proc.wait(10)
    for line in rest.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == "ACK":
            acked.append((int(parts[1]), int(parts[2]), int(parts[3])))
    store = Store.open(db)
    on_disk = {d["_id"]: (d["writer"], d["n"]) for d in store.find("acked")}
    store.close()
    missing = [a for a in acked if on_disk.get(a[0]) != (a[1], a[2])]
    assert not missing, f"{len(missing)} acknowledged writes lost, e.g. {missing[:5]}"
    assert len(on_disk) >= len(acked)
