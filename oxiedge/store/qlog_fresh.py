"""A queue log's fresh messages (``qlog.py``): appended beyond the window, not synced yet.

Theory of operation
-------------------
A message appended beyond the window stays in memory (``fresh``, in seq order) until the
round whose batch holds its record is synced; then it costs nothing in memory but the
counters and joins the disk part. An append does no bookkeeping for that: ``mark``, called
once per round by the log's ``_flush`` just before the round's batch is written, notes the
newest fresh seq with that batch's generation (every fresh record up to it is in that batch
or an older one), and ``settle`` lets go of the fresh messages the marks of synced
generations cover. Marks are by seq, so a fresh message that left meanwhile (served from
memory by a consumer that caught up, removed by TTL) changes nothing.
"""

from __future__ import annotations

from collections import deque

from .qlog_api import E

#: (generation, seq): every fresh message up to seq is in that generation's batch or older.
Marks = deque[tuple[int, int]]


def mark(fresh: deque[E], marks: Marks, generation: int) -> None:
    """Note that what is fresh now is in batch ``generation`` or an older one."""
    if fresh and (not marks or marks[-1][1] < fresh[-1].seq):
        marks.append((generation, fresh[-1].seq))


def settle(fresh: deque[E], marks: Marks, synced: int) -> tuple[int, int] | None:
    """Let go of the fresh messages whose batch is synced (generation ``synced`` or older):
    ``(first seq, last seq)`` of those, now on disk only; None if there is none."""
    last = -1
    while marks and marks[0][0] <= synced:
        last = marks.popleft()[1]
    if not fresh or fresh[0].seq > last:
        return None
    first = top = fresh[0].seq
    if fresh[-1].seq <= last:
        top = fresh[-1].seq
        fresh.clear()
    else:
        while fresh[0].seq <= last:
            top = fresh.popleft().seq
    return first, top
