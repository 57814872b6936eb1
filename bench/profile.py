"""Where oxiedge spends CPU per message: py-spy samples the broker during one scenario.

``python -m bench.profile -s mqtt-durable-offline [--count 200000] [--py-spy PATH]``

Starts ``oxiedge serve``, attaches ``py-spy record --format raw`` (collapsed stacks) to
its pid, runs the scenario, and prints the functions with the most samples, by own time
(the frame on top of the stack) and by total time (anywhere on the stack).  py-spy is not
a project dependency: ``pip install py-spy`` (any venv) and pass ``--py-spy``.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench import brokers
from bench.result import Options
from bench.run import SCENARIOS


def read_stacks(raw: Path) -> Iterator[tuple[list[str], int]]:
    """py-spy ``--format raw`` (collapsed stacks): (frames, outermost first; samples)."""
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if stack and n.isdigit():
            yield stack.split(";"), int(n)


def summarize(raw: Path, top: int) -> str:
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = 0
    for stack, count in read_stacks(raw):
        samples += count
        frames = [f.split(" (")[0] + " (" + f.split(" (")[-1] if " (" in f else f
                  for f in stack]
        own[frames[-1]] += count
        for f in set(frames):
            total[f] += count
    lines = [f"{samples} samples", "", "own time (top of stack):"]
    lines += [f"  {100 * c / samples:5.1f}%  {f}" for f, c in own.most_common(top)]
    lines += ["", "total time (on the stack):"]
    lines += [f"  {100 * c / samples:5.1f}%  {f}" for f, c in total.most_common(top)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-s", "--scenario", required=True, choices=list(SCENARIOS))
    p.add_argument("--count", type=int, default=200_000)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--latency-count", type=int, default=0,
                   help="messages of a latency scenario (default: the bench's own)")
    p.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--py-spy", default=shutil.which("py-spy") or "py-spy")
    p.add_argument("--out", type=Path, help="keep the collapsed stacks here")
    a = p.parse_args(argv)
    st = brokers.start_oxiedge()
    raw = a.out or Path(tempfile.mkdtemp(prefix="bench-prof-")) / "stacks.txt"
    spy = subprocess.Popen([a.py_spy, "record", "--pid", str(st.target.pid), "--format", "raw",
                            "--rate", str(a.rate), "--output", str(raw), "--nonblocking"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        time.sleep(1.0)  # py-spy attaches
        fn = SCENARIOS[a.scenario][0]
        r = fn(st.target, Options(count=a.count, duration=a.duration,
                                       latency_count=a.latency_count or Options.latency_count))
        print(f"{a.scenario}: {r.value:,.0f} {r.unit}, {r.count} msgs, "
              f"broker {r.cpu_us_per_msg or 0:.1f} µs CPU/msg (slowed by sampling)")
    finally:
        brokers.terminate(spy, signal.SIGINT, 30)
        st.stop()
    if not raw.exists():
        err = spy.stderr.read().decode() if spy.stderr else ""
        print("py-spy wrote nothing:", err, file=sys.stderr)
        return 1
    print(summarize(raw, a.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
