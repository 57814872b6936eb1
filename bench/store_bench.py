"""Durable write rates of the store's group committer against one sync per document.

``python -m bench.store_bench [--seconds 3] [--repeats 3] [--dir DIR]``

Measured in one process, interleaved (every repeat runs every variant once), medians:

* ``raw append+fdatasync``: ``os.write`` of 100 bytes + ``os.fdatasync`` on a file in the
  same directory (the disk's own synced-append rate, one stream).
* ``Rdict.put sync=True``: one synced RocksDB put per document (``WriteOptions.sync``),
  the naive durable store.
* ``store, 1 writer``: ``await store.insert`` from a single trio task, i.e. one commit
  round per document through the group committer.
* ``store, N writers``: N trio tasks each looping ``await store.insert(coll, doc)``;
  the committer shares one synced round among all writers waiting at that moment.
* ``store raw, 64 writers``: ``stage_put`` of a 100-byte record in the ``mqtt`` column
  family + ``await store.commit()``, the brokers' hot path.

Documents are ~100 bytes of JSON.  The issue's acceptance figure is
``64-writer docs/s / Rdict.put sync docs/s`` (at least 20x).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio
from rocksdict import WriteOptions

from bench.machine import describe, one_line
from bench.result import percentile
from oxiedge.store import Store
from oxiedge.store.rocks import open_db

DOC = {"sensor": "greenhouse-7", "value": 21.5, "unit": "C", "ok": True, "pad": "x" * 40}


def _figures(lat: list[float], docs: int, commits: int, elapsed: float,
             cpu0: float) -> dict[str, float]:
    """Rates over ``elapsed`` s, latency percentiles (ms) and CPU per document since ``cpu0``."""
    return {"docs_s": docs / elapsed, "commits_s": commits / elapsed,
            "p50_ms": percentile(lat, 50) * 1e3, "p99_ms": percentile(lat, 99) * 1e3,
            "cpu_us": (time.process_time() - cpu0) * 1e6 / docs}


def raw_fsync(d: Path, seconds: float) -> dict[str, float]:
    """Appends of 100 bytes, each followed by fdatasync."""
    path = d / "append.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    rec = os.urandom(100)
    lat: list[float] = []
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    end = t0 + seconds
    try:
        while True:
            a = time.perf_counter()
            os.write(fd, rec)
            os.fdatasync(fd)
            b = time.perf_counter()
            lat.append(b - a)
            if b > end:
                break
    finally:
        os.close(fd)
        path.unlink()
    return _figures(lat, len(lat), len(lat), time.perf_counter() - t0, cpu0)


def put_sync(d: Path, seconds: float) -> dict[str, float]:
    """One ``Rdict.put`` with ``WriteOptions.sync = True`` per document (same DB options)."""
    db = open_db(d / "putsync")
    cf = db.get_column_family("docs")
    wo = WriteOptions()
    wo.sync = True  # a property; set_sync() does not exist (docs/storage.md)
    body = json.dumps(DOC).encode()
    lat: list[float] = []
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    end = t0 + seconds
    i = 0
    try:
        while True:
            a = time.perf_counter()
            cf.put(struct.pack(">IQ", 1, i), body, wo)
            b = time.perf_counter()
            lat.append(b - a)
            i += 1
            if b > end:
                break
    finally:
        del cf
        db.close()
    return _figures(lat, i, i, time.perf_counter() - t0, cpu0)


def store_writers(d: Path, seconds: float, writers: int, raw: bool = False) -> dict[str, float]:
    """``writers`` trio tasks committing one document (or raw record) per await."""
    store = Store.open(d / f"store-{writers}-{'raw' if raw else 'doc'}")
    lat: list[float] = []
    value = os.urandom(100)

    async def writer(k: int, end: float) -> None:
        seq = 0
        owner = struct.pack(">Q", k)
        while True:
            a = time.perf_counter()
            if raw:
                store.stage_put("mqtt", b"m" + owner + struct.pack(">Q", seq), value)
                await store.commit()
            else:
                await store.insert("bench", DOC)
            b = time.perf_counter()
            lat.append(b - a)
            seq += 1
            if b > end:
                return

    async def main() -> tuple[float, int]:
        async with store.running():
            rounds0 = store.committer.rounds
            t0 = time.perf_counter()
            async with trio.open_nursery() as n:
                for k in range(writers):
                    n.start_soon(writer, k, t0 + seconds)
            return time.perf_counter() - t0, store.committer.rounds - rounds0

    cpu0 = time.process_time()
    try:
        el, rounds = trio.run(main)
    finally:
        store.close()
    docs = len(lat)
    return {**_figures(lat, docs, rounds, el, cpu0), "docs_per_commit": docs / max(1, rounds)}


VARIANTS: list[tuple[str, Callable[[Path, float], dict[str, float]]]] = [
    ("raw append+fdatasync (1 stream)", raw_fsync),
    ("Rdict.put sync=True (1 doc/sync)", put_sync),
    ("store.insert, 1 writer", lambda d, s: store_writers(d, s, 1)),
    ("store.insert, 8 writers", lambda d, s: store_writers(d, s, 8)),
    ("store.insert, 64 writers", lambda d, s: store_writers(d, s, 64)),
    ("store.insert, 256 writers", lambda d, s: store_writers(d, s, 256)),
    ("stage_put+commit raw, 64 writers", lambda d, s: store_writers(d, s, 64, raw=True)),
]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.store_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=3.0, help="per variant and repeat")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--dir", type=Path, default=None,
                   help="directory on the disk to measure (default: a temp dir)")
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="bench-store-", dir=a.dir))
    info = describe(base)
    print("machine:", one_line(info), flush=True)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _ in VARIANTS}
    try:
        for rep in range(a.repeats):
            for name, fn in VARIANTS:
                d = base / f"r{rep}"
                d.mkdir(exist_ok=True)
                r = fn(d, a.seconds)
                runs[name].append(r)
                print(f"[{rep + 1}/{a.repeats}] {name:34s} {r['docs_s']:9.0f} docs/s "
                      f"{r['commits_s']:9.0f} commits/s  p50 {r['p50_ms']:.2f} ms  "
                      f"p99 {r['p99_ms']:.2f} ms  {r['cpu_us']:.1f} µs CPU/doc", flush=True)
            shutil.rmtree(base / f"r{rep}", ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    med: dict[str, dict[str, Any]] = {}
    for name, rs in runs.items():
        med[name] = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        med[name]["range"] = (min(r["docs_s"] for r in rs), max(r["docs_s"] for r in rs))
    print(f"\nMedians of {a.repeats} interleaved repeats x {a.seconds:.0f}s (100-byte records"
          " / ~100-byte JSON documents):")
    print("| variant | docs/s (min-max) | synced commits/s | docs/commit | p50 ms | p99 ms |"
          " CPU µs/doc |")
    print("|---|---|---|---|---|---|---|")
    for name, m in med.items():
        print(f"| {name} | {m['docs_s']:,.0f} ({m['range'][0]:,.0f}-{m['range'][1]:,.0f}) | "
              f"{m['commits_s']:,.0f} | {m.get('docs_per_commit', 1.0):.1f} | "
              f"{m['p50_ms']:.2f} | {m['p99_ms']:.2f} | {m['cpu_us']:.1f} |")
    w64 = med["store.insert, 64 writers"]["docs_s"]
    put = med["Rdict.put sync=True (1 doc/sync)"]["docs_s"]
    one = med["store.insert, 1 writer"]["docs_s"]
    ratio = w64 / put
    verdict = "PASS" if ratio >= 20 else "FAIL"
    print(f"\n64-writer docs/s / Rdict.put(sync=True) docs/s = {ratio:.1f}x "
          f"(issue requires >= 20x): {verdict}")
    print(f"64-writer docs/s / 1-writer store.insert docs/s = {w64 / one:.1f}x")
    if a.json:
        a.json.write_text(json.dumps({"machine": info, "seconds": a.seconds,
                                      "repeats": a.repeats, "runs": runs, "medians": med,
                                      "ratio_64_vs_put_sync": ratio}, indent=1))
    return 0 if ratio >= 20 else 1


if __name__ == "__main__":
    sys.exit(main())
