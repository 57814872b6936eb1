"""Shared subscriptions: ``$share/GROUP/FILTER`` (MQTT 5, 4.8.2; 3.1.1 clients too, as
Mosquitto allows them).

Theory of operation. A shared subscription is not a key of the router's subscription trie:
each distinct ``$share/GROUP/FILTER`` string is one ``SharedGroup`` (its members and their
subscription values, a round-robin turn), and the groups are keyed by their FILTER in a
trie of their own, so a topic's matching groups are one walk, cached per topic beside the
router's route cache and cleared with it. A session's ``subs`` keeps the whole string, so
a persistent member's share is in its session record and comes back with it at a restart.

Each message goes to one member per matching group (``SharedGroup.pick``): the next in
turn that is connected, has room in its in-flight window (the client's Receive Maximum)
and in its output buffer, and may read the topic; if none has room, the first connected
one (the message waits in its queue); if none is connected, the first persistent member
(QoS 1/2 only: it waits on disk for its client); else nobody. A member subscribed to one
group several times is still one member.

When a member's session ends (a clean session at disconnect, an expired one, Clean Start,
an administrator's delete) what it was sent and did not acknowledge, and what it had
queued, goes to another member of the group whose filter the topic matches (the spec's
SHOULD, 4.8.2): ``Router.hand_on``. At most ``HAND_ON_MAX`` messages per ending session;
the rest end with it (counted in ``shared_lost``). A message is recognised by its topic,
so a copy the session got through an ordinary subscription that matches the same topic
is handed on as well. Retained messages are not sent for a shared subscription (the spec:
4.8.2, "Retained messages are not sent to the Session when it first subscribes").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oxiedge.mqtt.topics import TopicTrie, topic_filter_problem

if TYPE_CHECKING:
    from oxiedge.mqtt.session import Session

SHARE_PREFIX = "$share/"
#: Unacknowledged or queued messages of one ending member handed to other members.
HAND_ON_MAX = 1024


def split_share(topic_filter: str) -> tuple[str, str] | None:
    """``(group, filter)`` of a ``$share/GROUP/FILTER`` string, None for any other."""
    if not topic_filter.startswith(SHARE_PREFIX):
        return None
    group, _, flt = topic_filter[len(SHARE_PREFIX):].partition("/")
    return group, flt


def unshared(topic_filter: str) -> str:
    """The FILTER of a ``$share/GROUP/FILTER`` (what the read rules check), else itself."""
    parts = split_share(topic_filter)
    return topic_filter if parts is None else parts[1]


def share_problem(topic_filter: str) -> str | None:
    """Why a ``$share/...`` string is no shared subscription (4.8.2), or None."""
    parts = split_share(topic_filter)
    if parts is None:
        return None
    group, flt = parts
    if not group or "+" in group or "#" in group:
        return "a share name is one non-empty level without wildcards (MQTT-4.8.2-1)"
    if not flt:
        return "a shared subscription needs a topic filter after its share name (MQTT-4.8.2-2)"
    return topic_filter_problem(flt)


class SharedGroup:
    """One ``$share/GROUP/FILTER``: its members and whose turn it is."""

    __slots__ = ("filter", "members", "order", "turn")

    def __init__(self, topic_filter: str) -> None:
        self.filter = topic_filter  # the FILTER part
        self.members: dict[Session, int] = {}  # session -> its subscription value
        self.order: list[Session] = []
        self.turn = 0

    def set(self, s: Session, value: int) -> None:
        if s not in self.members:
            self.order.append(s)
        self.members[s] = value

    def drop(self, s: Session) -> None:
        if self.members.pop(s, None) is not None:
            self.order.remove(s)

    def pick(self, topic: str, qos: int, acl_active: bool,
             without: Session | None = None) -> tuple[Session, int] | None:  # fmt: skip
        """The member that gets the next message (module docstring) and its value."""
        order = self.order
        n = len(order)
        waiting: Session | None = None  # connected, but its window or buffer is full
        offline: Session | None = None  # persistent, its client away
        for i in range(n):
            s = order[(self.turn + i) % n]
            if s is without or (acl_active and s.acl is not None
                                and not s.acl.may_read(topic)):  # fmt: skip
                continue
            conn = s.conn
            if conn is None:
                if offline is None and s.store is not None:
                    offline = s
                continue
            value = self.members[s]
            if conn.out_bytes < s.limits.out_limit and (
                    qos == 0 or not value & 3 or len(s.inflight) + len(s.rel) < s.window):
                self.turn = (self.turn + i + 1) % n
                return s, value
            if waiting is None:
                waiting = s
        chosen = waiting
        if chosen is None and offline is not None and qos and self.members[offline] & 3:
            chosen = offline
        if chosen is None:
            return None
        self.turn = (order.index(chosen) + 1) % n
        return chosen, self.members[chosen]


class SharedSubscriptions:
    """Every shared group of one broker, found by topic (module docstring)."""

    def __init__(self) -> None:
        self.groups: dict[str, SharedGroup] = {}  # "$share/GROUP/FILTER" -> its group
        self.trie: TopicTrie[SharedGroup, int] = TopicTrie()
        self.routes: dict[str, tuple[SharedGroup, ...]] = {}  # topic -> matching groups

    def __len__(self) -> int:
        return sum(len(g.members) for g in self.groups.values())

    def add(self, share: str, s: Session, value: int) -> None:
        g = self.groups.get(share)
        if g is None:
            parts = split_share(share)
            assert parts is not None
            g = self.groups[share] = SharedGroup(parts[1])
            self.trie.add(g.filter, g, 0)
        g.set(s, value)
        self.routes.clear()

    def remove(self, share: str, s: Session) -> None:
        g = self.groups.get(share)
        if g is None:
            return
        g.drop(s)
        if not g.members:
            del self.groups[share]
            self.trie.remove(g.filter, g)
        self.routes.clear()

    def match(self, topic: str) -> tuple[SharedGroup, ...]:
        """The groups whose filter ``topic`` matches (cached until a change)."""
        got = self.routes.get(topic)
        if got is None:
            if len(self.routes) >= 4096:
                self.routes.clear()
            got = self.routes[topic] = tuple(g for g, _v in self.trie.match(topic))
        return got

    def of(self, s: Session) -> list[SharedGroup]:
        """The groups ``s`` is a member of."""
        return [self.groups[f] for f in s.subs if f in self.groups]
