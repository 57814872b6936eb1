"""Where a lone writer's commit round spends its time, phase by phase.

``python tools/commit_phases.py [--rounds 3000] [--dir DIR]``

One task stages one 100 B record and awaits ``store.commit()``, ``--rounds`` times, on a
real Store (RocksDB in ``--dir``, default a temp dir on /tmp).  The sync thread's function
is wrapped to timestamp the start and end of ``flush_wal(True)`` in the thread, so each
round splits into: *db.write* (the unsynced write of the batch, in the loop thread),
*hand-off in* (the rest of commit() called → flush_wal starts in the thread: the queue
put, the thread's wake-up and its wait for the GIL), *sync* (flush_wal itself:
the disk) and *hand-off out* (flush_wal returned → commit() returns: the eventfd write, the
loop's epoll wake-up, the waiter's step).  Prints p50/p90/p99 of each, in µs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python tools/commit_phases.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3000)
    p.add_argument("--dir", type=Path, default=None)
    a = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import trio

    from oxiedge.store import Store

    base = a.dir or Path(tempfile.mkdtemp(prefix="commit-phases-"))
    store = Store.open(base / "db")
    marks: list[tuple[int, int]] = []
    sync_thread = store.committer._sync_thread  # (a profiling helper reaches inside)
    real = sync_thread._fn

    def timed() -> object:
        s = time.perf_counter_ns()
        try:
            return real()
        finally:
            marks.append((s, time.perf_counter_ns()))

    sync_thread._fn = timed
    writes: list[int] = []

    class TimedWrite:
        """The committer's db with its unsynced ``write`` timed (the rest passes through)."""

        def __init__(self, db: object) -> None:
            self._db = db

        def write(self, batch: object) -> None:
            s = time.perf_counter_ns()
            self._db.write(batch)  # type: ignore[attr-defined]
            writes.append(time.perf_counter_ns() - s)

        def __getattr__(self, name: str) -> object:
            return getattr(self._db, name)

    store.committer._db = TimedWrite(store.committer._db)  # type: ignore[assignment]
    phases: dict[str, list[float]] = {"db.write": [], "hand-off in": [], "sync": [],
                                       "hand-off out": [], "commit() total": []}

    async def run() -> None:
        async with store.running():
            for i in range(a.rounds):
                store.stage_put("amqp", i.to_bytes(8, "big"), b"x" * 100)
                t0 = time.perf_counter_ns()
                await store.commit()
                t1 = time.perf_counter_ns()
                s, e = marks[-1]
                phases["db.write"].append(writes[-1] / 1e3)
                phases["hand-off in"].append((s - t0 - writes[-1]) / 1e3)
                phases["sync"].append((e - s) / 1e3)
                phases["hand-off out"].append((t1 - e) / 1e3)
                phases["commit() total"].append((t1 - t0) / 1e3)
                await trio.sleep(0.0005)

    trio.run(run)
    store.close()
    for name, xs in phases.items():
        xs.sort()
        q = statistics.quantiles(xs, n=100)
        print(f"{name:15s} p50 {q[49]:8.1f} µs  p90 {q[89]:8.1f} µs  p99 {q[98]:8.1f} µs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
