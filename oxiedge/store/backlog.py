"""One budget for every byte queued on disk: ``--max-backlog-bytes``.

MQTT persistent sessions and AMQP queues paged to disk each add up the bytes they hold in a
tally (``qlog_api.Tally``: one integer, kept by their queue logs). :class:`Backlog` holds
the budget and the tallies that joined it; a protocol about to queue asks
:meth:`Backlog.left_for` how much of the budget is left to its own tally once every other
one is counted, and applies its overflow behaviour past it (docs/limits.md).
"""

from __future__ import annotations

from .qlog_api import Tally


class Backlog:
    """The budget (None: no bound), where it comes from, and the tallies counted in it."""

    __slots__ = ("budget", "source", "tallies")

    def __init__(self, budget: int | None = None, source: str = "none") -> None:
        self.budget = budget
        self.source = source  # "--max-backlog-bytes", or "0.5 of the data filesystem (…)"
        self.tallies: list[Tally] = []

    def join(self, tally: Tally) -> None:
        """Count ``tally`` in the budget (once)."""
        if not any(t is tally for t in self.tallies):
            self.tallies.append(tally)

    @property
    def queued(self) -> int:
        """Every byte queued on disk, all tallies together."""
        return sum(t.backlog_bytes for t in self.tallies)

    def left_for(self, tally: Tally) -> int | None:
        """The budget less what every other tally holds: what ``tally`` may hold now
        (None: no budget)."""
        if self.budget is None:
            return None
        others = 0
        for t in self.tallies:  # (on every queued message: a plain loop, no generator)
            if t is not tally:
                others += t.backlog_bytes
        return self.budget - others
