"""Sans-IO micro-benchmark of the AMQP per-message path: CPU µs per message in the protocol
objects, no sockets, no event-loop hops.

``python tools/amqp_path_bench.py [--count N] [--repeats R] [--prefetch 1,10,100]
[--only confirm|consume] [--profile confirm|consume] [--tree DIR]``

Real :class:`~oxiedge.amqp.protocol.AmqpProtocol` objects over a real broker and a real
store on a temporary directory, driven as ``tests/amqp/test_protocol.py`` drives them
(``receive_data`` / ``next_action`` / ``data_to_send``, a memory outlet for what goes
straight to the transport):

* ``confirm``: a publisher in confirm mode sends ONE persistent ``basic.publish`` (method,
  header and a 100-byte body frame) to a durable queue, the protocol asks for ``COMMIT``,
  the commit is performed (``await store.commit()``, NOT timed: only the protocol's own
  CPU is), then its ``basic.ack`` comes out.  As ``amqp-confirm-seq`` does, one at a time.
  The queue is purged now and then, untimed.  ``confirm (warm)``: the same with the
  ``COMMIT`` answered at once (the store commits every 1000 messages, untimed), so the CPU
  caches stay warm and the figure is steadier (the protocol's work alone).
* ``consume P``: a publisher without confirms sends P persistent publishes in one read
  (P = the consumer's prefetch), a consumer with manual ack and ``basic.qos(P)`` receives
  the P deliveries (bytes checked), then sends P ``basic.ack`` in one read.  Timed: the
  publish burst (routing, enqueue, staging, delivery encoding) and the ack burst; the
  store's commit between rounds is not.

Each figure is the median over ``--repeats`` runs of ``--count`` messages: µs/message of
``time.thread_time`` (this thread's CPU, so neither the store's sync thread nor other
processes on a shared machine count) over the timed parts.  ``--tree``
puts another checkout first on ``sys.path`` (e.g. ``git archive main | tar -x -C
/tmp/before``) for a before/after comparison in the same invocation.  ``--profile`` runs
one path under cProfile and prints the top functions.  A profiling helper only; the
server never imports it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _setup_path(tree: str | None) -> None:
    if tree:
        sys.path.insert(0, tree)
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class MemoryOutlet:
    """What the transport would write outside the protocol's steps (deliveries).

    The same fake as ``tests/amqp/test_protocol.py``'s, on purpose: ``--tree`` runs this
    tool against an older checkout, so it may import nothing that a tree lacks (nor a
    test module, which such a tree's tests may not have)."""

    def __init__(self) -> None:
        self.out_bytes = 0
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def deliver_now(self) -> None:
        pass


class Bench:
    """One in-process service and the helpers that drive protocol objects."""

    def __init__(self, svc: Any) -> None:
        self.svc = svc
        self.elapsed = 0.0  # seconds of timed protocol work

    def protocol(self) -> tuple[Any, MemoryOutlet]:
        import trio

        from oxiedge.amqp.protocol import AmqpProtocol

        svc = self.svc
        app = svc.app
        outlet = MemoryOutlet()
        # (a tree from before the explicit limits passes the whole config)
        limits = getattr(svc, "limits", app.config)
        proto = AmqpProtocol(svc.broker, outlet, limits, svc.counters, app.permissions,
                             svc.server_properties(), clock=trio.current_time,
                             alarms=app.alarms, peer="bench")
        return proto, outlet

    async def play(self, proto: Any, data: bytes, timed: bool = True) -> bytes:
        """Feed ``data`` and perform the actions until NEED_DATA; the protocol's work is
        timed when ``timed``, the commits and logins never."""
        from oxiedge.amqp.protocol import CHECKPOINT, COMMIT, NEED_DATA, SEND, Authenticate, Close

        svc = self.svc
        clock = time.thread_time
        out: list[bytes] = []
        t0 = clock()
        proto.receive_data(data)
        while True:
            action = proto.next_action()
            sent = proto.data_to_send()
            if sent:
                out.append(sent)
            if action is NEED_DATA or isinstance(action, Close):
                break
            if action is SEND or action is CHECKPOINT:  # (a slow step: others' turn)
                continue
            if timed:
                self.elapsed += clock() - t0
            if action is COMMIT:
                await svc.app.store.commit()
                proto.commit_done(None)
            else:
                assert isinstance(action, Authenticate), action
                proto.authenticated(await svc.app.logins.check(action.username,
                                                               action.password))
            t0 = clock()
        if timed:
            self.elapsed += clock() - t0
        return b"".join(out)

    async def opened(self) -> tuple[Any, MemoryOutlet]:
        """A protocol object past the handshake with channel 1 open."""
        from oxiedge.amqp import codec, spec

        m = codec.encode_method
        proto, outlet = self.protocol()
        await self.play(proto, codec.PROTOCOL_HEADER, timed=False)
        await self.play(proto, m(0, spec.ConnectionStartOk({}, "PLAIN", b"\x00guest\x00guest")),
                        timed=False)
        await self.play(proto, m(0, spec.ConnectionTuneOk(2047, 131072, 0))
                        + m(0, spec.ConnectionOpen("/")) + m(1, spec.ChannelOpen()),
                        timed=False)
        assert proto.opened
        return proto, outlet


def _publish(key: str, body: bytes) -> bytes:
    from oxiedge.amqp import codec, spec

    props = spec.BasicProperties(delivery_mode=2).encode()
    return codec.encode_content(1, spec.BasicPublish(routing_key=key), props, body, 131072)


async def run_confirm(bench: Bench, count: int, queue: str) -> float:
    """µs per message of persistent publish → confirm (commit not timed)."""
    from oxiedge.amqp import codec, spec

    m = codec.encode_method
    proto, _outlet = await bench.opened()
    await bench.play(proto, m(1, spec.ConfirmSelect()) + m(1, spec.QueueDeclare(
        queue=queue, durable=True)), timed=False)
    frame = _publish(queue, b"x" * 100)
    drain = m(1, spec.QueuePurge(queue=queue))
    bench.elapsed = 0.0
    for i in range(1, count + 1):
        out = await bench.play(proto, frame)
        assert out == m(1, spec.BasicAck(i, False)), out
        if i % 1000 == 0:
            await bench.play(proto, drain, timed=False)
    await bench.play(proto, drain, timed=False)
    return bench.elapsed / count * 1e6


async def run_confirm_warm(bench: Bench, count: int, queue: str) -> float:
    """``run_confirm`` with the CPU caches warm: the ``COMMIT`` is answered at once (the
    store commits every 1000 messages, untimed), so nothing else runs between messages."""
    from oxiedge.amqp import codec, spec
    from oxiedge.amqp.protocol import CHECKPOINT, COMMIT, NEED_DATA

    m = codec.encode_method
    proto, _outlet = await bench.opened()
    await bench.play(proto, m(1, spec.ConfirmSelect()) + m(1, spec.QueueDeclare(
        queue=queue, durable=True)), timed=False)
    frame = _publish(queue, b"x" * 100)
    drain = m(1, spec.QueuePurge(queue=queue))
    store = bench.svc.app.store
    clock = time.thread_time
    elapsed = 0.0
    done = 0
    while done < count:
        n = min(1000, count - done)
        t0 = clock()
        for _ in range(n):
            proto.receive_data(frame)
            action = proto.next_action()
            while action is CHECKPOINT:  # (a step preempted past the burst slice)
                action = proto.next_action()
            assert action is COMMIT, action
            proto.commit_done(None)
            action = proto.next_action()
            while action is CHECKPOINT:
                action = proto.next_action()
            assert action is NEED_DATA, action
            proto.data_to_send()
        elapsed += clock() - t0
        done += n
        await bench.play(proto, drain, timed=False)
        await store.commit()
    return elapsed / count * 1e6


async def run_consume(bench: Bench, count: int, queue: str, prefetch: int) -> float:
    """µs per message of publish (no confirms) → basic.deliver bytes → basic.ack."""
    from oxiedge.amqp import codec, spec

    m = codec.encode_method
    pub, _ = await bench.opened()
    con, outlet = await bench.opened()
    await bench.play(pub, m(1, spec.QueueDeclare(queue=queue, durable=True)), timed=False)
    await bench.play(con, m(1, spec.BasicQos(0, prefetch, False))
                     + m(1, spec.BasicConsume(queue=queue, consumer_tag="c")), timed=False)
    store = bench.svc.app.store
    burst = _publish(queue, b"x" * 100) * prefetch
    rounds = max(1, count // prefetch)
    tag = 0
    bench.elapsed = 0.0
    for _ in range(rounds):
        await bench.play(pub, burst)
        t0 = time.thread_time()
        got = outlet.written
        outlet.written = []
        assert len(got) == prefetch, len(got)
        acks = b"".join(m(1, spec.BasicAck(tag + i + 1, False)) for i in range(prefetch))
        bench.elapsed -= time.thread_time() - t0  # (building the acks is not the server's)
        tag += prefetch
        await bench.play(con, acks)
        await store.commit()  # the round the kicks asked for (untimed)
    ch = con.channels[1]
    assert not getattr(ch, "settlement", ch).unacked  # (older trees: on the channel)
    return bench.elapsed / (rounds * prefetch) * 1e6


async def _main(args: argparse.Namespace) -> dict[str, list[float]]:
    from oxiedge.amqp.service import AmqpService
    from oxiedge.app import App
    from oxiedge.auth import UserStore
    from oxiedge.config import Config
    from oxiedge.store import Store

    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="amqp-path-bench-") as tmp:
        path = Path(tmp)
        store = Store.open(path / "db")
        try:
            async with store.running():
                app = App(config=Config(data=path), store=store,
                          users=UserStore.load(None, True))
                svc = AmqpService(app)
                await svc.recover()
                bench = Bench(svc)
                for r in range(args.repeats):
                    if args.only in (None, "confirm"):
                        results.setdefault("confirm", []).append(
                            await run_confirm(bench, args.count, f"c{r}"))
                        results.setdefault("confirm (warm)", []).append(
                            await run_confirm_warm(bench, args.count, f"w{r}"))
                    if args.only in (None, "consume"):
                        for p in args.prefetch:
                            results.setdefault(f"consume prefetch {p}", []).append(
                                await run_consume(bench, args.count, f"q{r}-{p}", p))
        finally:
            store.close()
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=5000, help="messages per repeat")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--prefetch", default="1,10,100",
                    type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--only", choices=("confirm", "consume"))
    ap.add_argument("--profile", choices=("confirm", "consume"),
                    help="run that path once under cProfile (prefetch: the first given)")
    ap.add_argument("--tree", help="a checkout to import oxiedge from (before/after)")
    args = ap.parse_args()
    _setup_path(args.tree)
    import trio

    if args.profile:
        import cProfile
        import pstats

        args.only, args.repeats, args.prefetch = args.profile, 1, args.prefetch[:1]
        prof = cProfile.Profile()
        prof.enable()
        trio.run(_main, args)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
        return
    results = trio.run(_main, args)
    import oxiedge

    print(f"oxiedge from {Path(oxiedge.__file__).parent}; {args.count} messages x "
          f"{args.repeats} repeats, µs/message (median [min..max])")
    for name, values in results.items():
        print(f"  {name:24s} {statistics.median(values):7.2f}  "
              f"[{min(values):.2f}..{max(values):.2f}]")


if __name__ == "__main__":
    main()
