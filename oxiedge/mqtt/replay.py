"""Retained messages owed to new subscriptions, sent at the pace of the connection.

MQTT-3.8.4-3: a SUBSCRIBE (also a repeated one) re-sends every retained message matching
each of its filters. Done in one go, a client subscribing ``#`` 100,000 times with 50
retained messages would make the broker build 5,000,000 deliveries before it answers
anyone else. Instead each session keeps a ``RetainedReplay``: the filters whose retained
messages are still owed (one entry per *resulting* subscription: subscribing a filter
again restarts its replay instead of adding one), and a cursor into the one replay in
progress. ``Broker.replay_step`` advances it a bounded number of messages at a time and
only while the connection's output buffer is under its bound and no QoS 1/2 message is
waiting for the in-flight window, the same back-pressure live delivery obeys. Memory is
bounded by the subscriptions per session plus one snapshot of matching topics (at most
the retained-message bound).

Sans-IO: the connection calls ``replay_step`` after a SUBACK and whenever its writer has
sent something.
"""

from __future__ import annotations


class RetainedReplay:
    """The retained messages one session is still owed (see the module docstring)."""

    __slots__ = ("filter", "granted", "index", "pending", "topics")

    def __init__(self) -> None:
        #: filter -> granted QoS of subscriptions whose replay has not started, in order
        self.pending: dict[str, int] = {}
        #: the replay in progress: its filter, granted QoS, snapshot of matching topics
        self.filter: str | None = None
        self.granted = 0
        self.topics: list[str] = []
        self.index = 0

    def __bool__(self) -> bool:
        return self.filter is not None or bool(self.pending)

    def add(self, topic_filter: str, granted: int) -> None:
        """A subscription to ``topic_filter`` was (re)established: its retained messages
        are owed once, from the start, whatever was owed for it before."""
        if self.filter == topic_filter:
            self.filter = None  # restart: the new SUBSCRIBE owes every message again
            self.topics = []
        self.pending.pop(topic_filter, None)
        self.pending[topic_filter] = granted

    def discard(self, topic_filter: str) -> None:
        """The subscription is gone (UNSUBSCRIBE): nothing more is owed for it
        (MQTT-3.10.4-2)."""
        self.pending.pop(topic_filter, None)
        if self.filter == topic_filter:
            self.filter = None
            self.topics = []

    def owed(self) -> int:
        """Filters with retained messages still owed (``oxiedge status``)."""
        return len(self.pending) + (self.filter is not None)
