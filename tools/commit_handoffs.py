"""Where the committer's two thread hand-offs go, and A/B of ways to shorten them.

``python tools/commit_handoffs.py [--rounds 1000] [--repeats 5] [--variant NAME ...]``

A lone writer stages one 100 B record and awaits ``store.commit()`` on a real Store (RocksDB
in a temp dir on the VM's disk), ``--rounds`` times per run.  Each *variant* changes one thing
in how the committer hands a round to its sync thread (or the interpreter's switch interval);
the variants run interleaved, ``--repeats`` times each, in this one process, so load changes
hit them all alike.  Timestamps (``perf_counter_ns``, one clock for all threads):

* t0 ``commit()`` called; tq the request handed to the thread;
* tb the loop's last ``before_io_wait`` before the sync started (it releases the GIL in
  ``epoll_wait`` right after), ts ``flush_wal`` starts in the thread, te it returned;
* tw the thread's wake-up write returned, ta the loop's first ``after_io_wait`` after te
  (``epoll_wait`` returned *and* the loop thread holds the GIL again); t1 ``commit()`` returns.

Printed per variant (median over runs of each run's p50, µs): in = t0→ts split into
t0→tq, tq→tb (the loop's Python until it blocks) and tb→ts (thread wake + GIL hand-over);
sync = ts→te; out = te→t1 split into te→ta (eventfd write, the loop's wake, its GIL) and
ta→t1 (trio's scheduling and the waiter's step); total = t0→t1.

Variants: ``base`` (main's committer); ``efd`` (the thread blocks in ``os.read`` of an
eventfd instead of ``SimpleQueue.get``); ``late`` (the request is handed over in the loop's
``before_io_wait`` instead of in ``commit()``); ``si1ms``/``si100us``/``si20us`` (base with
``sys.setswitchinterval``); ``pin`` (the loop thread and the sync thread pinned to one
CPU); ``pinsync`` (only the sync thread pinned).
The variants take turns round by round in one ``trio.run`` (one committer, one sync thread
per variant), so they share every load change.  Also printed: te-tw (flush_wal returned → the
thread's eventfd write returned), tq-tr (request → the waiter calls ``wait_readable``) and
tr-tb (``wait_readable`` → the loop is about to block: trio's own path).
Not imported by the server.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ns = time.perf_counter_ns
PIN_CPU = 0  # variant "pin": the loop thread and its sync thread share this CPU


class Marks:
    """Timestamps of one run (lists appended from both threads; appends are atomic)."""

    def __init__(self) -> None:
        self.req: list[int] = []
        self.start: list[int] = []
        self.end: list[int] = []
        self.woke: list[int] = []
        self.waits: list[int] = []
        self.before_io: list[int] = []
        self.after_io: list[int] = []


def make_sync_thread(variant: str, fn: Callable[[], object], marks: Marks) -> Any:
    from oxiedge.store import committer as cm

    base = cm._SyncThread

    def timed() -> object:
        marks.start.append(ns())
        try:
            return fn()
        finally:
            marks.end.append(ns())

    class Base(base):  # type: ignore[misc, valid-type]
        deferred = False

        def request(self) -> None:
            marks.req.append(ns())
            super().request()

        async def wait_done(self) -> BaseException | None:
            marks.waits.append(ns())
            return await super().wait_done()

        def _loop(self) -> None:
            while self._requests.get():
                try:
                    self._fn()
                except BaseException as exc:
                    self._error = exc
                os.write(self._wfd, (1).to_bytes(8, sys.byteorder))
                marks.woke.append(ns())

    class Efd(Base):
        def start(self) -> None:
            self._qfd = os.eventfd(0, os.EFD_CLOEXEC)  # blocking
            self._stop = False
            super().start()

        def request(self) -> None:
            marks.req.append(ns())
            os.write(self._qfd, b"\1\0\0\0\0\0\0\0")

        def stop(self) -> None:
            self._stop = True
            os.write(self._qfd, b"\1\0\0\0\0\0\0\0")
            self._requests.put(False)
            super().stop()
            os.close(self._qfd)

        def _loop(self) -> None:
            while True:
                os.read(self._qfd, 8)
                if self._stop:
                    return
                try:
                    self._fn()
                except BaseException as exc:
                    self._error = exc
                os.write(self._wfd, (1).to_bytes(8, sys.byteorder))
                marks.woke.append(ns())

    class Late(Base):
        deferred = True
        wanted = False

        def request(self) -> None:
            marks.req.append(ns())
            self.wanted = True

        def flush(self) -> None:
            if self.wanted:
                self.wanted = False
                self._requests.put(True)

    class Pin(Base):
        def _loop(self) -> None:
            os.sched_setaffinity(0, {PIN_CPU})
            super()._loop()

    cls = {"efd": Efd, "late": Late, "pin": Pin, "pinsync": Pin}.get(variant, Base)
    return cls(timed)


def interleaved_run(store: Any, variants: list[str], rounds: int) -> dict[str, list[list[float]]]:
    """``rounds`` rounds per variant, the variants taking turns round by round."""
    import bisect

    import trio

    from oxiedge.store.committer import _SyncThread

    c = store.committer
    real_fn = c._sync_thread._fn
    marks = {v: Marks() for v in variants}
    threads = {v: make_sync_thread(v, real_fn, marks[v]) for v in variants}
    before_io: list[int] = []
    after_io: list[int] = []
    t0s: dict[str, list[int]] = {v: [] for v in variants}
    t1s: dict[str, list[int]] = {v: [] for v in variants}
    default_si = sys.getswitchinterval()
    all_cpus = os.sched_getaffinity(0)
    si = {"si1ms": 1e-3, "si100us": 1e-4, "si20us": 2e-5}

    class Inst(trio.abc.Instrument):
        def before_io_wait(self, timeout: float) -> None:
            before_io.append(ns())
            st = c._sync_thread
            if st.deferred:
                st.flush()

        def after_io_wait(self, timeout: float) -> None:
            after_io.append(ns())

    async def run() -> None:
        trio.lowlevel.add_instrument(Inst())
        c._sync_thread = threads[variants[0]]  # started and stopped by the committer
        for v in variants[1:]:
            threads[v].start()
        try:
            async with store.running():
                for i in range(rounds * len(variants)):
                    v = variants[i % len(variants)]
                    c._sync_thread = threads[v]
                    sys.setswitchinterval(si.get(v, default_si))
                    os.sched_setaffinity(0, {PIN_CPU} if v == "pin" else all_cpus)
                    store.stage_put("amqp", i.to_bytes(8, "big"), b"x" * 100)
                    t0s[v].append(ns())
                    await store.commit()
                    t1s[v].append(ns())
                    await trio.sleep(0.0005)
                c._sync_thread = threads[variants[0]]
        finally:
            sys.setswitchinterval(default_si)
            os.sched_setaffinity(0, all_cpus)
            for v in variants[1:]:
                threads[v].stop()

    try:
        trio.run(run)
    finally:
        c._sync_thread = _SyncThread(real_fn)
    out: dict[str, list[list[float]]] = {}
    for v in variants:
        m = marks[v]
        cols: list[list[float]] = [[] for _ in range(len(NAMES))]
        for k in range(rounds):
            t0, t1 = t0s[v][k], t1s[v][k]
            tq, ts, te, tw = m.req[k], m.start[k], m.end[k], m.woke[k]
            j = bisect.bisect_left(before_io, ts) - 1
            tb = before_io[j] if j >= 0 and before_io[j] >= tq else tq
            j = bisect.bisect_left(after_io, te)
            ta = after_io[j] if j < len(after_io) and after_io[j] <= t1 else t1
            j = bisect.bisect_left(m.waits, tq)
            tr = m.waits[j] if j < len(m.waits) else tq
            vals = [ts - t0, tq - t0, tb - tq, ts - tb, te - ts, t1 - te, ta - te, t1 - ta,
                    t1 - t0, tw - te, tr - tq, tb - tr]
            for col, x in zip(cols, vals, strict=True):
                col.append(x / 1e3)
        out[v] = cols
    return out


NAMES = ["in", " t0-tq", " tq-tb", " tb-ts", "sync", "out", " te-ta", " ta-t1", "total",
         " te-tw", " tq-tr", " tr-tb"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python tools/commit_handoffs.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--variant", action="append", default=None)
    p.add_argument("--dir", type=Path, default=None)
    p.add_argument("--pin-cpu", type=int, default=0, help="the CPU of the pin variants")
    a = p.parse_args(argv)
    global PIN_CPU
    PIN_CPU = a.pin_cpu
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from oxiedge.store import Store

    variants = a.variant or ["base", "efd", "late"]
    base = a.dir or Path(tempfile.mkdtemp(prefix="commit-handoffs-", dir="/var/tmp"))
    store = Store.open(base / "db")
    p50s: dict[str, list[list[float]]] = {v: [] for v in variants}
    try:
        for _ in range(a.repeats):
            for v, cols in interleaved_run(store, variants, a.rounds).items():
                p50s[v].append([statistics.median(c) for c in cols])
    finally:
        store.close()
        if a.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    print(f"load average {os.getloadavg()}; rounds {a.rounds} x repeats {a.repeats}; "
          f"µs, median over runs of per-run p50")
    print(f"{'phase':8s}" + "".join(f"{v:>10s}" for v in variants))
    for i, name in enumerate(NAMES):
        row = [statistics.median(r[i] for r in p50s[v]) for v in variants]
        print(f"{name:8s}" + "".join(f"{x:10.1f}" for x in row))
    print("total per run: " + "; ".join(
        f"{v} " + " ".join(f"{r[8]:.0f}" for r in p50s[v]) for v in variants))
    return 0


if __name__ == "__main__":
    sys.exit(main())
