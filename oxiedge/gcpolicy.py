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


def freeze_startup_objects() -> int:
    """Collect start-up's garbage once, then freeze the survivors; returns how many."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
