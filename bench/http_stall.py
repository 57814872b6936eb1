"""How long an HTTP answer holds oxiedge's event loop (docs/http.md, "Large brokers").

``python -m bench.http_stall --queues 10000 --scrapes 5``: starts ``oxiedge serve`` with
the HTTP listener, declares N transient AMQP queues, then for each path scrapes it
``--scrapes`` times while an MQTT client sends PINGREQ every millisecond and times each
PINGRESP; the longest round trip during a path's scrapes is (within a ping's interval) the
longest the loop was held. Prints one line per path and the idle baseline. On a loaded
machine the round trips mostly measure the scheduler; ``--in-process`` measures the
server's own code instead: an ``AmqpService`` with N queues and the HTTP routes in this
process, each answer produced and its chunks drained with a checkpoint between them (as
``http/connection.py`` sends them), and a trio instrument reporting the longest task step
in CPU time (``time.thread_time``: what the loop was held, whatever else the machine runs).
Full GC passes (which any allocation may trigger) are reported apart. Each answer runs under
``gcpolicy.ANSWERS`` as the connection runs it (automatic collection paused while it is built
and sent); ``--no-gc-pause`` measures without it (as before the pause).
"""

from __future__ import annotations

import argparse
import gc
import http.client
import socket
import tempfile
import threading
import time
from pathlib import Path

import pika
import trio

from bench.brokers import free_port, start_oxiedge

PATHS = ("/metrics", "/metrics/per-object", "/api/queues", "/api/queues?sort=name")
CONNECT = bytes([0x10, 16, 0, 4]) + b"MQTT" + bytes([4, 2, 0, 60, 0, 4]) + b"ping"


class Pinger(threading.Thread):
    """PINGREQ every ``interval`` s; ``worst`` is the longest round trip since ``reset``."""

    def __init__(self, port: int, interval: float = 0.001) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.sendall(CONNECT)
        assert self.sock.recv(4)[:1] == b"\x20"
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.interval = interval
        self.worst = 0.0
        self.stop = threading.Event()

    def reset(self) -> float:
        worst, self.worst = self.worst, 0.0
        return worst

    def run(self) -> None:
        while not self.stop.is_set():
            t0 = time.perf_counter()
            self.sock.sendall(b"\xc0\x00")
            got = b""
            while len(got) < 2:
                got += self.sock.recv(2 - len(got))
            self.worst = max(self.worst, time.perf_counter() - t0)
            time.sleep(self.interval)


class LongestStep(trio.abc.Instrument):
    """The longest task step (thread CPU time) since ``reset``, apart from the steps in
    which a full garbage collection ran (``gc_worst``)."""

    def __init__(self) -> None:
        self.worst = self.gc_worst = 0.0
        self._t0 = 0.0
        self.full_gc = False  # set by the gc callback during a step

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._t0 = time.thread_time()
        self.full_gc = False

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        took = time.thread_time() - self._t0
        if self.full_gc:
            self.gc_worst = max(self.gc_worst, took)
        else:
            self.worst = max(self.worst, took)

    def reset(self) -> tuple[float, float]:
        out = (self.worst, self.gc_worst)
        self.worst = self.gc_worst = 0.0
        return out


async def _in_process(queues: int, scrapes: int, tmp: Path, pause: bool = True) -> None:
    from oxiedge.amqp.service import AmqpService
    from oxiedge.app import App
    from oxiedge.auth import UserStore
    from oxiedge.config import Config
    from oxiedge.gcpolicy import ANSWERS
    from oxiedge.http.access import ANONYMOUS
    from oxiedge.http.messages import Request, Response
    from oxiedge.http.wiring import build
    from oxiedge.store import Store

    store = Store.open(tmp / "db")
    try:
        async with store.running():
            app = App(config=Config(data=tmp), store=store, users=UserStore.load(None, True))
            svc = AmqpService(app)
            await svc.recover()
            for i in range(queues):
                svc.broker.new_queue(f"q{i:05d}", 1000 + i)
            server, _view = build(app, svc.admin_handlers(), {}, None, svc)
            step = LongestStep()
            gc_pauses: list[float] = []
            gc_t0 = [0.0]

            def gc_watch(phase: str, info: dict[str, int]) -> None:
                if phase == "start":
                    gc_t0[0] = time.thread_time()
                elif info.get("generation") == 2:
                    gc_pauses.append(time.thread_time() - gc_t0[0])
                    step.full_gc = True

            gc.callbacks.append(gc_watch)
            trio.lowlevel.add_instrument(step)
            for path in PATHS:
                await trio.lowlevel.checkpoint()
                step.reset()
                size = 0
                for _ in range(scrapes):
                    await trio.lowlevel.checkpoint()
                    req = Request.parse("GET", path, {})
                    found = server.router.route(req)
                    assert not isinstance(found, Response)
                    route, args = found
                    if pause:
                        ANSWERS.enter()
                    try:
                        answer = await server.router.call(route, req, ANONYMOUS, args)
                        size = len(answer.body)
                        for chunk in answer.chunks or ():
                            size += len(chunk)
                            await trio.lowlevel.checkpoint()
                            ANSWERS.check()
                    finally:
                        if pause:
                            ANSWERS.leave()
                full = max(gc_pauses, default=0.0)
                worst, with_gc = step.reset()
                print(f"{path}: longest task step {worst * 1e3:.2f} ms CPU ({scrapes} "
                      f"answers, {size} bytes, in process); {len(gc_pauses)} full GC (longest "
                      f"{full * 1e3:.2f} ms, its step {with_gc * 1e3:.2f} ms)")
                gc_pauses.clear()
            trio.lowlevel.remove_instrument(step)
    finally:
        store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queues", type=int, default=10_000)
    ap.add_argument("--scrapes", type=int, default=5)
    ap.add_argument("--in-process", action="store_true")
    ap.add_argument("--no-gc-pause", action="store_true",
                    help="(--in-process) answer without gcpolicy.ANSWERS' pause")
    a = ap.parse_args()
    if a.in_process:
        with tempfile.TemporaryDirectory() as tmp:
            trio.run(_in_process, a.queues, a.scrapes, Path(tmp), not a.no_gc_pause)
        return
    http_port = free_port()
    srv = start_oxiedge(["--http-port", str(http_port)])
    try:
        assert srv.target.amqp and srv.target.mqtt
        t0 = time.monotonic()
        for first in range(0, a.queues, 1000):  # (--amqp-max-queues-per-connection)
            conn = pika.BlockingConnection(pika.ConnectionParameters(*srv.target.amqp))
            ch = conn.channel()
            for i in range(first, min(a.queues, first + 1000)):
                ch.queue_declare(f"q{i:05d}")
            conn.close()
        print(f"declared {a.queues} queues in {time.monotonic() - t0:.1f} s")
        pinger = Pinger(srv.target.mqtt[1])
        pinger.start()
        time.sleep(2)
        print(f"idle: longest ping round trip {pinger.reset() * 1e3:.2f} ms")
        for path in PATHS:
            sizes = []
            for _ in range(a.scrapes):
                c = http.client.HTTPConnection("127.0.0.1", http_port, timeout=60)
                c.request("GET", path)
                sizes.append(len(c.getresponse().read()))
                c.close()
            print(f"{path}: longest ping round trip {pinger.reset() * 1e3:.2f} ms "
                  f"({a.scrapes} scrapes, {sizes[-1]} bytes)")
        pinger.stop.set()
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
