"""Sans-IO drain of a deep durable AMQP backlog after a restart: µs of CPU per message.

``python tools/amqp_drain_bench.py [--count N] [--repeats R] [--tree DIR] [--profile]``

A publisher fills N persistent 100-byte messages into a durable queue (1000 per read, a
commit round each); the store is closed and opened again and the AMQP service recovers (a
restart: the queue's records are on disk only). Then a consumer with ``basic.qos(1000)``
drains it as ``bench/backlog_amqp.py``'s pika consumer does: it takes what the server wrote,
acknowledges every 100th delivery with ``multiple``, and each commit round runs when the
protocol asked for one. Timed (``time.thread_time``: this thread only, so neither the
store's sync thread nor other processes count): the whole drain, the protocol's steps and
the rounds' work on the loop thread (the read-ahead and range deletes of ``store.defer``).
Real protocol objects over a real broker on a real ``Store`` (``amqp_path_bench.py``'s
harness); ``--tree DIR`` imports oxiedge from DIR (``git archive main | tar -x -C
/tmp/before``) for a before figure in the same invocation. A profiling helper only; the
server never imports it.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

QUEUE = "drain"
PREFETCH, ACK_EVERY = 1000, 100


async def _service(path: Path) -> tuple[Any, Any]:
    from amqp_path_bench import Bench

    from oxiedge.amqp.service import AmqpService
    from oxiedge.app import App
    from oxiedge.auth import UserStore
    from oxiedge.config import Config

    app = App(config=Config(data=path, amqp_queue_limit=10_000_000),
              store=_store(path), users=UserStore.load(None, True))
    svc = AmqpService(app)
    return svc, Bench(svc)


def _store(path: Path) -> Any:
    from oxiedge.store import Store

    return Store.open(path / "db")


async def fill(path: Path, count: int) -> None:
    from amqp_path_bench import _publish

    from oxiedge.amqp import codec, spec

    m = codec.encode_method
    svc, bench = await _service(path)
    store = svc.app.store
    try:
        async with store.running():
            await svc.recover()
            pub, _ = await bench.opened()
            await bench.play(pub, m(1, spec.QueueDeclare(queue=QUEUE, durable=True)),
                             timed=False)
            for i in range(0, count, 1000):
                burst = b"".join(_publish(QUEUE, i.to_bytes(8, "big") + b"x" * 92)
                                 for i in range(i, min(count, i + 1000)))
                await bench.play(pub, burst, timed=False)
                await store.commit()
    finally:
        store.close()


async def drain(path: Path, count: int) -> tuple[float, int]:
    """Restart on ``path`` and drain: (CPU seconds, messages)."""
    from oxiedge.amqp import codec, spec

    m = codec.encode_method
    svc, bench = await _service(path)
    store = svc.app.store
    deliver = struct.pack(">HH", 60, 60)
    try:
        async with store.running():
            await svc.recover()
            gc.collect()  # (as ``oxiedge serve`` does once started: ``gcpolicy.py``)
            gc.freeze()
            con, outlet = await bench.opened()
            await bench.play(con, m(1, spec.BasicQos(0, PREFETCH, False)), timed=False)
            clock = time.thread_time
            bench.elapsed = 0.0
            out = await bench.play(con, m(1, spec.BasicConsume(queue=QUEUE, consumer_tag="c")))
            got = acked = 0
            while got < count:
                t0 = clock()
                await store.commit()  # (the round: read-ahead, range deletes)
                bench.elapsed += clock() - t0
                written = out + b"".join(outlet.written)
                outlet.written = []
                got += written.count(deliver)  # (a body of 'x' never holds these bytes)
                out = b""
                if got >= acked + ACK_EVERY or got >= count:
                    acked = got - got % ACK_EVERY if got < count else got
                    out = await bench.play(con, m(1, spec.BasicAck(acked, True)))
                elif not written:
                    raise AssertionError(f"stalled at {got} of {count}")
            t0 = clock()
            await store.commit()
            bench.elapsed += clock() - t0
            return bench.elapsed, got
    finally:
        gc.unfreeze()
        store.close()


async def _main(args: argparse.Namespace) -> list[float]:
    out = []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="amqp-drain-bench-") as tmp:
            await fill(Path(tmp), args.count)
            secs, got = await drain(Path(tmp), args.count)
            assert got == args.count, (got, args.count)
            out.append(secs / got * 1e6)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tree", help="a checkout to import oxiedge from (before/after)")
    ap.add_argument("--profile", action="store_true", help="one drain under cProfile")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.path.insert(0, args.tree or str(Path(__file__).resolve().parents[1]))
    import trio

    if args.profile:
        import cProfile
        import pstats

        async def profiled() -> None:
            with tempfile.TemporaryDirectory(prefix="amqp-drain-bench-") as tmp:
                await fill(Path(tmp), args.count)
                prof = cProfile.Profile()
                prof.enable()
                await drain(Path(tmp), args.count)
                prof.disable()
                pstats.Stats(prof).sort_stats("tottime").print_stats(35)

        trio.run(profiled)
        return
    results = trio.run(_main, args)
    import oxiedge

    print(f"oxiedge from {Path(oxiedge.__file__).parent}; {args.count} messages x "
          f"{args.repeats}: drain µs CPU/message median {statistics.median(results):.2f} "
          f"[{min(results):.2f}..{max(results):.2f}]")


if __name__ == "__main__":
    main()
