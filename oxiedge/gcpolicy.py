"""The cyclic garbage collector after start-up: freeze what start-up built.

Why: a full (generation 2) collection traverses every tracked object of the process. After
start-up that is ~38,000 objects (modules, classes, the AMQP spec tables, the recovered
state), and one full collection measured 16-64 ms on the 2-core development VM
(``tools/gc_probe.py``, ``kill -USR2``): a publish that arrives during it waits that long,
a latency tail far above anything else on the path. CPython starts one whenever the objects
that survived younger collections since the last full one reach a quarter of the old
generation, so a long-running broker does hit it now and then.

``gc.freeze()`` moves every object alive at that moment into the permanent generation,
which no collection looks at: later full collections only traverse what was created after
start-up (connections, sessions, queued messages). The price: a frozen object that later
becomes part of unreachable cycle is never freed; start-up objects live for the whole
process anyway, so this is bounded by what start-up built.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager

import trio


def freeze_startup_objects() -> int:
    """Collect start-up's garbage once, then freeze the survivors; returns how many."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


#: The longest one pause of automatic collection lasts (a slow reader cannot stretch it).
PAUSE_LIMIT_S = 1.0


class CollectionPause:
    """Automatic collection paused while a large answer is built and sent.

    Why: an answer of a broker with 10,000 queues (``/metrics/per-object``, ``/api/queues``)
    holds ~10,000 row dicts for a moment. Allocating them runs young collections, which
    promote the rows still held to the old generation; CPython counts every promoted object
    towards its next full collection, so a few such answers start one - a pass over every
    object created since start-up that held the loop 27-70 ms with 10,000 queues
    (``python -m bench.http_stall --in-process``). With collection paused, the rows are
    freed by their reference counts when the answer is done and never promoted: the answer
    costs no collection at all. Objects other tasks allocate meanwhile are collected as
    usual by the first young collection after the pause.

    Bounded: the pause ends when the last holder leaves or ``PAUSE_LIMIT_S`` after it began,
    whichever is first (``check``: called when a holder comes or goes, between the chunks of
    an answer, and by the HTTP listener's :func:`watch` task while a pause lasts, so a
    client that does not read, or a login waiting out the failed-login delay, cannot stretch
    it); after a cut, answers already under way go on without a pause, and the next pause
    begins once none is left. It never enables a collector that someone else disabled.
    Counted in ``oxiedge status`` -> ``http`` (``gc_pauses``, ``gc_pauses_cut``).
    """

    def __init__(self, limit_s: float = PAUSE_LIMIT_S) -> None:
        self.limit_s = limit_s
        self.holders = 0
        self.since: float | None = None  # when this object disabled the collector
        self.pauses = 0
        self.cut = 0

    def enter(self) -> None:
        self.check()
        self.holders += 1
        if self.holders == 1 and gc.isenabled():
            gc.disable()
            self.since = time.monotonic()
            self.pauses += 1

    def leave(self) -> None:
        self.holders -= 1
        if self.holders == 0:
            self._resume()
        else:
            self.check()

    def check(self) -> None:
        """End the pause if it has lasted ``limit_s`` (between the chunks of an answer)."""
        if self.since is not None and time.monotonic() - self.since > self.limit_s:
            self.cut += 1
            self._resume()

    def _resume(self) -> None:
        if self.since is not None:
            self.since = None
            gc.enable()

    @contextmanager
    def held(self) -> Iterator[None]:
        self.enter()
        try:
            yield
        finally:
            self.leave()


#: The process's one pause (the collector is per process).
ANSWERS = CollectionPause()


async def watch(pause: CollectionPause = ANSWERS) -> None:
    """End a pause that outlives its limit even while no holder comes or goes (a task of the
    HTTP listener: wakes twice per limit, a few microseconds each)."""
    while True:
        await trio.sleep(pause.limit_s / 2)
        pause.check()
