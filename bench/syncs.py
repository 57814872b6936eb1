"""How many WAL syncs oxiedge makes for a scenario's messages (``strace -c``).

``python -m bench.syncs -s mqtt-durable-offline [--count 50000]``

Starts ``oxiedge serve``, attaches ``strace -f -c`` (all threads) counting fdatasync/fsync
and socket writes, runs the scenario, and prints messages per sync.  A durable scenario
with no sync at all, or far more messages per sync than messages in flight, would mean
acknowledgements that do not wait for a sync.  strace slows the broker: the rate printed
here is not a benchmark figure.  Needs ``strace`` (Debian package) and ptrace rights.
"""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import brokers
from bench.result import Options
from bench.run import SCENARIOS

TRACED = "trace=fdatasync,fsync,sendto,sendmsg,write,writev"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.syncs", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-s", "--scenario", required=True, choices=list(SCENARIOS))
    p.add_argument("--count", type=int, default=50_000)
    a = p.parse_args(argv)
    st = brokers.start_oxiedge()
    out = Path(tempfile.mkdtemp(prefix="bench-strace-")) / "strace.txt"
    try:
        tr = subprocess.Popen(["strace", "-f", "-c", "-e", TRACED, "-o", str(out), "-p",
                               str(st.target.pid)], stderr=subprocess.DEVNULL)
        time.sleep(1.5)  # strace attaches to every thread
        r = SCENARIOS[a.scenario][0](st.target, Options(count=a.count, duration=30))
        tr.send_signal(signal.SIGINT)
        tr.wait(30)
    finally:
        st.stop()
    text = out.read_text()
    calls = {m.group(2): int(m.group(1))
             for m in re.finditer(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$",
                                  text, re.M)}
    syncs = calls.get("fdatasync", 0) + calls.get("fsync", 0)
    print(f"{a.scenario}: {r.count} messages acknowledged (lost {r.lost}) under strace")
    print(text)
    if syncs:
        print(f"{syncs} syncs: {r.count / syncs:.1f} messages per sync")
    else:
        print("no sync at all during the scenario")
    return 0


if __name__ == "__main__":
    sys.exit(main())
