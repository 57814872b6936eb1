"""Instructions and allocations per message on a path, counted by callgrind.

``python tools/instr.py -s SCENARIO [-s ...] [--count N] [--tree DIR] [--top N]``

Starts ``oxiedge serve`` under ``valgrind --tool=callgrind --instr-atstart=no`` (nothing is
counted while it starts), runs each scenario of ``bench`` once for a few messages (the
connection set-up and every first-use path), then switches counting on
(``callgrind_control -i on``) for one run of ``--count`` messages and off again, and dumps.
Prints, per message: instructions executed by the server (every thread), allocations
(calls of ``PyObject_Malloc``/``Calloc``, ``PyMem_Malloc``/``Calloc``/``RawMalloc``: the
objects and buffers a message costs; reallocs and libc's ``malloc`` are listed apart),
and the functions with the most instructions.

Unlike a latency or a CPU time on a shared VM these counts repeat to 2-3 % (callgrind
counts, it does not time; what varies is how the client's packets batch): use them to
A/B a change on the hot path (``--tree`` serves a ``git archive`` of another commit).
They are instructions, not time: a cache miss, a wake-up or a syscall's kernel side is
not in them (``tools/hops.py`` counts those). The server runs ~50x slower under valgrind,
so keep ``--count`` in the thousands. A profiling helper only; the server never imports it.
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: the allocator entry points a Python object or buffer goes through (an allocation is
#: counted once: ``PyMem_RawMalloc`` calls libc's ``malloc``, which is listed apart)
ALLOCATORS = ("PyObject_Malloc", "PyObject_Calloc", "PyMem_Malloc", "PyMem_Calloc",
              "PyMem_RawMalloc", "PyMem_RawCalloc")
OTHERS = ("PyObject_Realloc", "PyMem_Realloc", "PyMem_RawRealloc", "malloc", "calloc",
          "realloc")

_FN = re.compile(r"^(c?fn)=\((\d+)\)(?: (.*))?$")
_CALLS = re.compile(r"^calls=(\d+)")


def parse(path: Path) -> tuple[int, collections.Counter[str], collections.Counter[str]]:
    """A callgrind dump: (total instructions, exclusive instructions per function, calls
    per called function). Handles the name compression of the format (``fn=(N) name`` once,
    then ``fn=(N)``)."""
    names: dict[str, str] = {}
    own: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    total = 0
    fn = cfn = ""
    after_calls = False
    for line in path.read_text(errors="replace").splitlines():
        m = _FN.match(line)
        if m:
            kind, num, name = m.groups()
            if name:
                names[num] = name
            if kind == "fn":
                fn = names.get(num, num)
            else:
                cfn = names.get(num, num)
            continue
        m = _CALLS.match(line)
        if m:
            calls[cfn] += int(m.group(1))
            after_calls = True
            continue
        if line[:1].isdigit() or line[:1] in "+-*":
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                if after_calls:  # the line after calls= is the call's inclusive cost
                    after_calls = False
                else:
                    own[fn] += int(parts[1])
                    total += int(parts[1])
            continue
        if line.startswith("summary:") or line.startswith("totals:"):
            total = max(total, int(line.split()[1]))
    return total, own, calls


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python tools/instr.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-s", "--scenario", action="append", required=True)
    p.add_argument("--count", type=int, default=2000, help="messages counted per scenario")
    p.add_argument("--warm", type=int, default=200, help="messages of the uncounted warm-up")
    p.add_argument("--tree", help="serve the oxiedge package found in this directory instead")
    p.add_argument("--top", type=int, default=15, help="functions to list")
    a = p.parse_args(argv)
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        print("needs valgrind (apt-get install valgrind)", file=sys.stderr)
        return 2
    sys.path.insert(0, str(REPO))
    from bench import brokers
    from bench.result import Options
    from bench.run import SCENARIOS

    tmp = Path(tempfile.mkdtemp(prefix="instr-"))
    prefix = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--trace-children=no",
              f"--callgrind-out-file={tmp}/cg.out.%p"]
    real = brokers.oxiedge_command
    if a.tree:
        boot = ("import sys; sys.path.insert(0, sys.argv.pop(1)); sys.argv[0] = 'oxiedge'; "
                "from oxiedge.cli import main; main()")
        brokers.oxiedge_command = lambda: [sys.executable, "-c", boot, a.tree]
    else:
        brokers.oxiedge_command = lambda: [sys.executable, "-m", "oxiedge"]
    try:
        st = brokers.start_oxiedge(cpu_prefix=prefix, timeout=300)
    finally:
        brokers.oxiedge_command = real
    pid = st.target.pid
    assert pid is not None

    def control(*args: str) -> None:
        subprocess.run(["callgrind_control", *args, str(pid)], check=True,
                       capture_output=True, timeout=120)

    try:
        for name in a.scenario:
            fn = SCENARIOS[name][0]

            def opts(n: int) -> Options:
                return Options(count=n, latency_count=n, drain_count=n, duration=600,
                               idle_timeout=60)

            fn(st.target, opts(a.warm))
            control("-z")  # (zero whatever ran in between)
            control("-i", "on")
            r = fn(st.target, opts(a.count))
            control("-i", "off")
            for old in tmp.glob("cg.out.*"):
                old.unlink()
            control("-d")
            dumps = sorted(tmp.glob("cg.out.*"), key=lambda f: f.stat().st_mtime)
            if not dumps:
                print(f"{name}: callgrind wrote no dump", file=sys.stderr)
                return 1
            total, own, calls = 0, collections.Counter[str](), collections.Counter[str]()
            for d in dumps:  # one per thread with --separate-threads; else one
                t, o, c = parse(d)
                total += t
                own.update(o)
                calls.update(c)
            n = r.count or a.count
            allocs = sum(v for k, v in calls.items() if k in ALLOCATORS)
            print(f"{name}: {n} messages; per message: {total / n:,.0f} instructions, "
                  f"{allocs / n:.1f} allocations")
            for k in ALLOCATORS + OTHERS:
                if calls.get(k):
                    print(f"      {calls[k] / n:6.1f}  {k}")
            print("  instructions per message by function (own):")
            for k, v in own.most_common(a.top):
                print(f"  {v / n:9,.0f}  {k}")
    finally:
        st.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
