"""Bytes a queue log writes per message, filled then drained, per RocksDB tuning.

``python tools/qlog_writes.py [--count N] [--payload B] [--variant NAME ...] [--range-run R]``

One ``QueueLog`` on a real ``Store`` (the ``mqtt`` family, the server's options): N records
appended in commit rounds of 500 (as 500 publishes in flight), every round synced; then
drained, 64 popped and acknowledged per round (an MQTT subscriber's in-flight window);
then the process waits for RocksDB's background flushes and compactions to settle. What the
process caused to be written (``/proc/self/io`` ``write_bytes``) is read after each phase,
per message. Each variant is a ``MemoryProfile`` (``store/rocks.py``); a fresh database per
variant. ``--range-run 1`` stages the acknowledged run's range delete every round (the
layout before ``qlog.RANGE_RUN``), for a before/after. A measuring helper only; the server
never imports it.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

from oxiedge.store import SMALL, MemoryProfile, Store, qlog
from oxiedge.store.qlog import QueueLog
from oxiedge.store.qlog_read import decode_each

VARIANTS: dict[str, MemoryProfile] = {
    "default": SMALL,
    "no-deletion-collector": dataclasses.replace(SMALL, deletion_collector=False),
    "l0-trigger-8": dataclasses.replace(SMALL, l0_trigger=8),
    "recycle-wals-4": dataclasses.replace(SMALL, recycle_wals=4),
    "memtable-16m": dataclasses.replace(SMALL, write_buffer=16 << 20),
}


class Item:
    __slots__ = ("seq", "size")

    def __init__(self, seq: int, size: int) -> None:
        self.seq = seq
        self.size = size


class Codec:
    def decode(self, seq: int, value: bytes) -> Item:
        return Item(seq, len(value))

    def raw_size(self, value: bytes) -> int:
        return len(value)

    def decode_run(self, pairs: list[tuple[bytes, bytes]], i: int, width: int,
                   out: deque[Item], room_bytes: int) -> tuple[int, int]:
        return decode_each(self.decode, pairs, i, width, out, room_bytes)


def written() -> int:
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    return 0


def run(name: str, profile: MemoryProfile, n: int, payload: int) -> str:
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        store = Store.open(Path(tmp) / "db", profile)
        value = os.urandom(payload // 2) * 2 + os.urandom(payload % 2)  # half compressible
        q: QueueLog[Item] = QueueLog(Codec(), store, "mqtt", b"m" + bytes(8), b"c" + bytes(8))
        w0 = written()
        for seq in range(n):
            q.append(Item(seq, len(value)), len(value), value, keep=False)
            if seq % 500 == 499:
                store.commit_blocking()
        store.commit_blocking()
        w1 = written()
        c1 = time.process_time()
        done = 0
        while done < n:
            for _ in range(64):
                item = q.peek()
                if item is None:
                    break
                q.pop()
                q.ack(item.seq)
                done += 1
            store.commit_blocking()
        w2 = written()
        cpu = (time.process_time() - c1) / n * 1e6
        time.sleep(5.0)  # background flushes and compactions
        w3 = written()
        store.close()
        return (f"| {name} | {n:,} x {payload} B | {(w1 - w0) / n:.0f} | {(w2 - w1) / n:.0f} | "
                f"{(w3 - w2) / n:.0f} | {(w3 - w0) / n:.0f} | {cpu:.1f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--count", type=int, default=1_000_000)
    p.add_argument("--payload", type=int, default=100)
    p.add_argument("--variant", action="append", choices=sorted(VARIANTS))
    p.add_argument("--range-run", type=int, default=qlog.RANGE_RUN)
    a = p.parse_args()
    qlog.RANGE_RUN = a.range_run
    print("| variant | N x payload | fill B/msg | drain B/msg | settle B/msg | total B/msg | "
          "drain CPU µs/msg |")
    print("|---|---|---|---|---|---|---|")
    for name in a.variant or list(VARIANTS):
        label = name if a.range_run == 1024 else f"{name}, range delete per {a.range_run}"
        print(run(label, VARIANTS[name], a.count, a.payload), flush=True)


if __name__ == "__main__":
    sys.exit(main())
