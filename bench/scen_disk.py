"""The disk's own sync time, measured with the syscalls of one oxiedge commit round.

``disk-sync`` writes one 100 B record with an unsynced ``Rdict.write`` and then calls
``flush_wal(True)`` (the WAL ``write`` + ``fdatasync`` of a round, see
``oxiedge/store/committer.py``), one at a time, in the bench process, in a RocksDB opened
in a temp dir on the same filesystem as the brokers' data dirs.  No broker is involved:
it is the floor under every durable acknowledgement, measured in the same interleaved
invocation as the brokers so that it sees the same disk and the same load.  It runs in
the slots of the targets with an AMQP listener (the durable-confirm peers).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

from bench.brokers import Target
from bench.result import Meter, Options, Result, Skip, latency_result


def disk_sync(t: Target, o: Options) -> Result:
    """``latency_count`` sequential write + flush_wal(True) rounds; p50/p99 of each round."""
    if t.amqp is None:
        raise Skip("measured in the slots of the AMQP targets only")
    from rocksdict import Options as RocksOptions
    from rocksdict import Rdict, WriteBatch

    tmp = tempfile.mkdtemp(prefix="bench-sync-")
    opts = RocksOptions(raw_mode=True)
    opts.create_if_missing(True)
    db = Rdict(os.path.join(tmp, "db"), opts)
    payload = os.urandom(o.payload)
    lat: list[int] = []
    meter = Meter(t.pid)  # (the broker's CPU and RSS while it idles, for the table)
    try:
        t0 = meter.start()
        deadline = t0 + o.duration
        for i in range(o.latency_count):
            batch = WriteBatch(raw_mode=True)
            batch.put(i.to_bytes(8, "big"), payload)
            a = time.perf_counter_ns()
            db.write(batch)
            db.flush_wal(True)
            lat.append(time.perf_counter_ns() - a)
            if time.perf_counter() > deadline:
                break
        t1 = meter.stop()
    finally:
        db.close()
        shutil.rmtree(tmp, ignore_errors=True)
    r = Result("disk-sync", t.name, elapsed=t1 - t0)
    return meter.fill(latency_result(r, lat))
