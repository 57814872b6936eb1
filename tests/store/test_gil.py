"""The committer's design rests on ``Rdict.flush_wal(True)`` releasing the GIL (committer.py).

If a rocksdict upgrade made ``flush_wal`` hold the GIL through its fsync, the sync thread would
freeze the event loop for every commit round (milliseconds on an SD card), silently.
"""

from __future__ import annotations

import operator
import sys
import threading
from collections import deque
from functools import partial
from pathlib import Path

from rocksdict import WriteBatch

from oxiedge.store import Store


def test_flush_wal_releases_the_gil_so_the_loop_thread_runs_during_it(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "db")
    db = store.db
    # Megabytes of unsynced WAL make the first syncs long (a slow card's fsync).
    for i in range(200):
        store.stage_put("amqp", i.to_bytes(16, "big"), bytes(40_000))
        db.write(store.committer.batch)
        store.committer.batch = WriteBatch(raw_mode=True)
    state = {"inside": False, "stop": False, "syncs": 0}

    # One C-level pass sets "inside", syncs, clears "inside": no bytecode runs in between, so
    # no forced GIL switch can happen there; another thread sees "inside" only if flush_wal
    # itself released the GIL.
    one_sync = [partial(state.__setitem__, "inside", True), partial(db.flush_wal, True),
                partial(state.__setitem__, "inside", False)]

    def syncer() -> None:
        # With a long switch interval, nothing else in this loop gives the GIL up either.
        while not state["stop"]:
            deque(map(operator.call, one_sync), maxlen=0)
            state["syncs"] += 1

    seen: list[bool] = []
    old = sys.getswitchinterval()
    sys.setswitchinterval(2.0)  # (if flush_wal held the GIL, each look would take 2 s)
    try:
        worker = threading.Thread(target=syncer, daemon=True)
        worker.start()
        for _ in range(3):
            # Sleeping releases the GIL; getting it back needs the worker to release it.
            threading.Event().wait(0.002)
            seen.append(bool(state["inside"]))
        state["stop"] = True
        worker.join()
    finally:
        sys.setswitchinterval(old)
        store.close()
    # This thread got the GIL back each time while the worker was inside flush_wal.
    assert seen == [True, True, True]
