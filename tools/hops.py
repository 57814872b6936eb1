"""Hops per message on a path: trio task steps, event-loop wake-ups and syscalls.

``python tools/hops.py -s SCENARIO [-s ...] [--count N] [--strace]``

Starts ``oxiedge serve`` under a trio instrument (this file, ``serve-probe`` mode) that
counts every task step by task name and every return from the I/O wait (an epoll wake-up
of the event loop); ``SIGUSR1`` makes the server write its counters to a file.  The driver
snapshots the counters before and after each scenario of ``bench`` and divides the
difference by the messages the scenario measured, so connection set-up is included but
amortised over ``--count`` messages.  ``--strace`` also attaches ``strace -f -c`` (every
thread) for the same window: syscalls per message by name (strace slows the server; the
counts are what matters, not the times).

These are deterministic counts, unlike latencies on a shared machine: a hop saved shows
as a smaller number whatever the load.  A profiling helper only; the server never imports it.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------- the server side
def serve_probe(out: Path, argv: list[str]) -> None:
    tree = os.environ.get("HOPS_TREE")
    if tree:  # an older oxiedge (e.g. `git archive` of a base commit) for "before" counts
        sys.path.insert(0, tree)
    import trio

    steps: collections.Counter[str] = collections.Counter()
    wakeups = [0]

    class Counter(trio.abc.Instrument):
        def before_task_step(self, task: trio.lowlevel.Task) -> None:
            steps[task.name.rsplit(".", 1)[-1]] += 1

        def after_io_wait(self, timeout: float) -> None:
            wakeups[0] += 1

    def dump(_sig: int, _frame: Any) -> None:
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps({"steps": dict(steps), "wakeups": wakeups[0]}))
        tmp.replace(out)

    signal.signal(signal.SIGUSR1, dump)
    real_run = trio.run

    def run(fn: Any, *args: Any, **kw: Any) -> Any:
        kw["instruments"] = [*kw.get("instruments", ()), Counter()]
        return real_run(fn, *args, **kw)

    trio.run = run  # type: ignore[assignment]
    sys.argv = ["oxiedge", *argv]
    from oxiedge.cli import main

    main()


# ----------------------------------------------------------------- the driver
def _snapshot(pid: int, out: Path) -> dict[str, Any]:
    before = out.stat().st_mtime_ns if out.exists() else 0
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if out.exists() and out.stat().st_mtime_ns != before:
            return dict(json.loads(out.read_text()))
        time.sleep(0.01)
    raise TimeoutError("the probe did not write its counters")


_STRACE_ROW = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$", re.M)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python tools/hops.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-s", "--scenario", action="append", required=True)
    p.add_argument("--count", type=int, default=3000, help="messages per scenario")
    p.add_argument("--rate", type=float, default=1000.0)
    p.add_argument("--strace", action="store_true", help="syscalls per message as well")
    p.add_argument("--top", type=int, default=8, help="task names to list")
    p.add_argument("--tree", help="serve the oxiedge package found in this directory instead")
    a = p.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from bench import brokers
    from bench.result import Options
    from bench.run import SCENARIOS

    tmp = Path(tempfile.mkdtemp(prefix="hops-"))
    out = tmp / "counters.json"
    # start_oxiedge runs ``oxiedge_command() + ["serve", ...]``: put the probe in front.
    probe = [sys.executable, str(Path(__file__).resolve()), "serve-probe", str(out)]
    real = brokers.oxiedge_command
    brokers.oxiedge_command = lambda: probe  # type: ignore[assignment]
    try:
        st = brokers.start_oxiedge(env={"HOPS_TREE": a.tree} if a.tree else None)
    finally:
        brokers.oxiedge_command = real  # type: ignore[assignment]
    pid = st.target.pid
    assert pid is not None
    try:
        for name in a.scenario:
            fn = SCENARIOS[name][0]
            o = Options(count=a.count, latency_count=a.count, rate=a.rate, duration=60,
                        drain_count=a.count)
            tracer = None
            trace_out = tmp / f"strace-{name}.txt"
            if a.strace:
                tracer = subprocess.Popen(["strace", "-f", "-c", "-o", str(trace_out), "-p",
                                           str(pid)], stderr=subprocess.DEVNULL)
                time.sleep(1.5)  # strace attaches to every thread
            c0 = _snapshot(pid, out)
            r = fn(st.target, o)
            c1 = _snapshot(pid, out)
            if tracer is not None:
                tracer.send_signal(signal.SIGINT)
                tracer.wait(30)
            n = max(1, r.count)
            steps = collections.Counter(c1["steps"])
            steps.subtract(c0["steps"])
            total = sum(steps.values())
            print(f"{name}: {r.count} messages; per message: {total / n:.2f} task steps, "
                  f"{(c1['wakeups'] - c0['wakeups']) / n:.2f} event-loop wake-ups")
            for task, k in steps.most_common(a.top):
                if k > 0:
                    print(f"    {k / n:6.2f}  {task}")
            if tracer is not None:
                calls = {m.group(2): int(m.group(1))
                         for m in _STRACE_ROW.finditer(trace_out.read_text())
                         if m.group(2) != "total"}
                total_calls = sum(calls.values())
                print(f"  syscalls per message (strace, all threads, includes the probe's "
                      f"own snapshots): {total_calls / n:.2f}")
                for call, k in sorted(calls.items(), key=lambda kv: -kv[1])[:12]:
                    print(f"    {k / n:6.2f}  {call}")
    finally:
        st.stop()
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "serve-probe":
        serve_probe(Path(sys.argv[2]), sys.argv[3:])
    else:
        sys.exit(main())
