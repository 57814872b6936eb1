"""``StreamSync``: tells stream queues when their appended records are synced.

A stream's consumers see a record only once the commit round holding it is durable
(``stream.py``), but the records of a publisher that does not ask for confirms are synced
by whichever round comes next, and nothing tells the stream. This task does: a stream that
appended is noted (``note``, synchronous, from the publish path), and the task awaits
``store.commit()`` for everything staged so far (which also makes sure such a round runs
soon), then tells each noted stream how far it is synced, which delivers to its consumers.
One task for every stream of the broker; a round with stream appends costs one wake-up.
"""

from __future__ import annotations

from typing import Any

import trio

from oxiedge.amqp.stream import StreamQueue


class StreamSync:
    """The task that moves streams' committed offsets (see the module docstring)."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self._noted: set[StreamQueue] = set()
        self._wake = trio.Event()

    def note(self, q: StreamQueue) -> None:
        """``q`` appended records that are not known synced yet."""
        self._noted.add(q)
        self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            noted, self._noted = self._noted, set()
            # Everything appended up to here is staged: the commit below covers it.
            tails = [(q, q.log.tail) for q in noted if not q.deleted]
            await self._store.commit()  # (a CommitError ends the server anyway)
            for q, tail in tails:
                if not q.deleted:
                    q.synced(tail)
