"""One stream queue of N messages: RSS, fill and read rates, ready time after SIGKILL.

    python -m bench.stream_memory [N]        (default 500,000 messages of 100 B)

Fills a stream with confirmed persistent publishes (``--amqp-window`` in flight), reads it
all once from ``x-stream-offset: first`` (prefetch 1000, every delivery acked), SIGKILLs the
broker, starts it again on the same data directory and reads the first 50,000 again. The
RSS figures show what a stream's length costs in memory (nothing per message is held);
the ready time shows that recovery does not read the log.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time

import pika

from bench import brokers
from bench.amqpwire import RawAmqp
from bench.result import Options
from bench.scen_amqp import confirm_publish
from bench.scen_stream import STREAM_ARGS, _read, offset_table


def rss_mib(pid: int | None) -> float:
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return 0.0


def read_from_first(t: brokers.Target, n: int) -> tuple[int, float]:
    assert t.amqp is not None
    c = RawAmqp(*t.amqp, user=t.user, password=t.password)
    c.qos(1000)
    start = time.perf_counter()
    c.consume("big", "m", arguments=offset_table("first"))
    got, last = _read(c, n, start + 600, 5.0)
    c.close()
    return got, (last or start) - start


def main(n: int) -> None:
    st = brokers.start_oxiedge([])
    print(f"empty data dir: ready in {st.ready_s:.2f} s")
    t = st.target
    assert t.amqp is not None
    try:
        c = pika.BlockingConnection(pika.ConnectionParameters(*t.amqp))
        c.channel().queue_declare("big", durable=True, arguments=STREAM_ARGS)
        c.close()
        empty = rss_mib(t.pid)
        acked, _lost, a, b = confirm_publish(t, "big", n, Options(payload=100))
        full = rss_mib(t.pid)
        got, secs = read_from_first(t, acked)
        print(f"filled {acked:,} x 100 B confirmed in {b - a:.1f} s ({acked / (b - a):,.0f}/s); "
              f"read all from first in {secs:.1f} s ({got / secs:,.0f}/s)")
        print(f"RSS MiB: empty stream {empty:.1f}, full {full:.1f}, after reading all "
              f"{rss_mib(t.pid):.1f}")
        os.kill(st.proc.pid, signal.SIGKILL)
        st.proc.wait(10)
        again = brokers.start_oxiedge([], data=st.tmp / "data")
        try:
            t2 = again.target
            assert t2.amqp is not None
            c = pika.BlockingConnection(pika.ConnectionParameters(*t2.amqp))
            m = c.channel().queue_declare("big", durable=True, arguments=STREAM_ARGS).method
            c.close()
            print(f"after SIGKILL: ready in {again.ready_s:.2f} s, {m.message_count:,} messages, "
                  f"RSS {rss_mib(t2.pid):.1f} MiB")
            got, secs = read_from_first(t2, 50_000)
            print(f"read {got:,} from first after the restart: RSS {rss_mib(t2.pid):.1f} MiB")
        finally:
            again.stop()
    finally:
        st.stop(remove=False)
        shutil.rmtree(st.tmp, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 500_000)
