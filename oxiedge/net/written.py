"""Connections written to during the running reader's burst (``net.loop``, ``net.hot``,
``net.output``).

What a burst writes to *other* connections (deliveries) is only listed while the burst's
synchronous part runs; the reader (or the hot loop) sends every listed buffer before it
awaits anything (``flush_written``): one direct write per connection touched.
"""

from __future__ import annotations

from typing import Protocol

import trio


class Flushable(Protocol):
    """A connection's output as the list sees it (``net.output.Output``)."""

    listed: bool

    def flush(self) -> None: ...


class Written:
    """Connections written to during the running reader's burst, per event loop.

    ``in_burst`` is true only while a reader runs the synchronous part of a burst (it is
    cleared before every await of the reader): a ``write`` made then only lists its
    connection, and the reader sends every listed buffer before it awaits anything
    (``flush_written``). Any other ``write`` wakes the connection's writer at once.
    """

    __slots__ = ("in_burst", "items")

    def __init__(self) -> None:
        self.in_burst = False
        self.items: list[Flushable] = []


# A RunVar: nothing is left over from another ``trio.run`` (as in tests).
_WRITTEN: trio.lowlevel.RunVar[Written] = trio.lowlevel.RunVar("oxiedge_written")


def current_written() -> Written:
    try:
        return _WRITTEN.get()
    except LookupError:
        written = Written()
        _WRITTEN.set(written)
        return written


def flush_written(written: Written) -> None:
    """End of the synchronous part of a burst: send what it wrote to connections."""
    items = written.items
    while items:  # (a refill by ``on_sent`` lists its connection again)
        pending = items[:]
        items.clear()
        for output in pending:
            output.listed = False
            output.flush()
    written.in_burst = False
