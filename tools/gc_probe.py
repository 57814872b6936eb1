"""Run ``oxiedge serve`` with a GC pause recorder.

``python tools/gc_probe.py [--types] [--after=S] serve ARGS``

On SIGTERM/SIGINT (the server shuts down cleanly) it writes to stderr, per generation, how
many collections ran, their total and longest pause, and how many paused longer than
0.2 ms (``--types``: also what the young generation held at the last 30 gen-0
collections, by type; ``--after=S``: only collections later than S seconds after launch,
i.e. not the start-up's): enough to tell whether the cyclic GC is the source of a latency
tail. ``kill -USR2 PID`` times one full collection in the serving process. A profiling
helper only; not used by the server.
"""

from __future__ import annotations

import atexit
import collections
import gc
import signal
import sys
import time

_flags = {a for a in sys.argv[1:] if a == "--types"}
#: collections starting before this many seconds after launch are not counted (start-up)
_AFTER = float(next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--after=")),
                    "0"))
_flags |= {a for a in sys.argv[1:] if a.startswith("--after=")}
_launched = time.perf_counter()
_started: list[float] = [0.0]
_stats: dict[int, list[float]] = {0: [], 1: [], 2: []}


_young: collections.deque[collections.Counter[str]] = collections.deque(maxlen=30)


def _callback(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _started[0] = time.perf_counter()
        if _started[0] - _launched < _AFTER:
            return
        if "--types" in _flags and info["generation"] == 0:
            # What the young generation holds: the objects that did not die by refcount.
            _young.append(collections.Counter(type(o).__qualname__
                                              for o in gc.get_objects(generation=0)))
            _started[0] = time.perf_counter()
    elif _started[0] - _launched >= _AFTER:
        _stats[info["generation"]].append(time.perf_counter() - _started[0])


def _report() -> None:
    if _young:
        total: collections.Counter[str] = sum(_young, collections.Counter())
        print(f"gc gen0 contents over the last {len(_young)} collections:", file=sys.stderr)
        for name, n in total.most_common(25):
            print(f"  {n:8d} {name}", file=sys.stderr)
    for gen, pauses in _stats.items():
        if not pauses:
            print(f"gc gen{gen}: 0 collections", file=sys.stderr)
            continue
        ms = sorted(p * 1e3 for p in pauses)
        long = sum(1 for p in ms if p > 0.2)
        print(f"gc gen{gen}: {len(ms)} collections, total {sum(ms):.1f} ms, median "
              f"{ms[len(ms) // 2]:.3f} ms, max {ms[-1]:.3f} ms, {long} over 0.2 ms",
              file=sys.stderr)


def _full_collection(_sig: int, _frame: object) -> None:
    """SIGUSR2: time one full collection now (what a generation-2 pause costs)."""
    tracked = len(gc.get_objects())
    a = time.perf_counter()
    gc.collect()
    print(f"gc full collection on SIGUSR2: {(time.perf_counter() - a) * 1e3:.2f} ms, "
          f"{tracked} tracked objects, {len(gc.get_objects())} after, frozen "
          f"{gc.get_freeze_count()}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    signal.signal(signal.SIGUSR2, _full_collection)
    gc.callbacks.append(_callback)
    atexit.register(_report)
    sys.argv = ["oxiedge", *(a for a in sys.argv[1:] if a not in _flags)]
    from oxiedge.cli import main

    main()
