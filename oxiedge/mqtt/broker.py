"""The broker core: sessions, subscriptions, retained messages and the publish router.

Sans-IO like the codec: nothing here awaits. A caller that gets ``True`` back ("a durable
record was staged") must ``await store.commit()`` before acknowledging anything that
depends on it; that is the connection's job (``connection.py``), done once per read burst.

Publish path (``route``): deliver to live subscribers, stage every durable copy (one per
durable matching session, MQTT-3.3.5-1 merges overlapping subscriptions of one client to
the highest granted QoS), stage the retained change, feed the bridge callbacks. When no
durable session matches and nothing is retained/ingested, no store call happens at all.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Callable, Iterable, Sized
from typing import Any, Protocol

from oxiedge.mqtt import persist
from oxiedge.mqtt.persist import CF, RawStore
from oxiedge.mqtt.session import Limits, Message, Outlet, Pending, Session, Stats
from oxiedge.mqtt.topics import RetainedTrie, TopicTrie, valid_topic_filter

#: ``on_publish(topic, payload, qos, retain) -> bool``: True if it staged durable work.
PublishHook = Callable[[str, bytes, int, bool], bool]


class IngestStep(Protocol):
    """The ingest bridge as the router sees it: documents staged per publish."""

    @property
    def routes(self) -> Sized: ...

    def stage_publish(self, topic: str, payload: bytes) -> bool: ...


#: Topics whose merged subscriber list is cached (``Broker._routes``). When full the cache
#: is cleared wholesale: a publisher cycling through more topics than this pays one trie
#: walk per publish, as without the cache, and memory stays bounded.
ROUTE_CACHE_MAX = 4096

#: One topic's subscribers: ``(session, highest granted QoS of its matching filters)``.
Route = tuple[tuple[Session, int], ...]


class Retained:
    """A retained message (3.3.1.3)."""

    __slots__ = ("msg", "qos")

    def __init__(self, msg: Message, qos: int) -> None:
        self.msg = msg
        self.qos = qos


class Broker:
    """All MQTT state of one server. ``store`` is None with ``--no-mqtt-persist``."""

    def __init__(self, store: RawStore | None, limits: Limits, stats: Stats | None = None):
        self.store = store
        self.limits = limits
        self.stats = stats or Stats()
        self.sessions: dict[str, Session] = {}
        self.subscriptions: TopicTrie[Session, int] = TopicTrie()
        self.retained: RetainedTrie[Retained] = RetainedTrie()
        self.on_publish: list[PublishHook] = []
        # Called directly, not as an ``on_publish`` hook: with no ingest routes (the
        # common case) it costs one attribute test per publish instead of two calls.
        self.ingest: IngestStep | None = None
        self._owners = itertools.count(1)
        # topic -> merged subscribers. Publishers repeat their topics, so the trie walk and
        # the MQTT-3.3.5-1 merge run once per topic, not once per PUBLISH. Every change of
        # the subscription set (subscribe, unsubscribe, session discarded, recovery) clears
        # it; nothing else can change what a topic matches.
        self._routes: dict[str, Route] = {}

    # ------------------------------------------------------------------ recovery
    def recover(self) -> tuple[int, int]:
        """Load durable state (stages deletion of queue surplus); returns
        ``(sessions, pending messages)`` for the start-up log line."""
        store = self.store
        if store is None:
            return 0, 0
        max_owner = 0
        pending = 0
        for rs in persist.load_sessions(store, self.limits.queue_limit):
            s = Session(rs.client_id, False, rs.owner, self.limits, self.stats, store)
            max_owner = max(max_owner, rs.owner)
            for flt, qos in rs.subs.items():
                s.subs[flt] = qos
                self.subscriptions.add(flt, s, qos)
            for seq, qos, retain, topic, payload in rs.messages:
                # Possibly sent before the restart: re-deliveries carry DUP (MQTT-3.3.1-1).
                s.queue.append(Pending(seq, Message(topic, payload), qos, retain, True))
            for seq in rs.rel:
                s.rel[persist.packet_id_of(seq)] = seq
            s.rx2 = set(rs.rx2)
            s.next_seq = rs.next_seq
            s.dropped = rs.surplus
            self.stats.dropped += rs.surplus
            pending += len(rs.messages)
            self.sessions[s.client_id] = s
        self._routes.clear()
        self._owners = itertools.count(max_owner + 1)
        for topic, qos, payload in persist.load_retained(store):
            self.retained.set(topic, Retained(Message(topic, payload), qos))
        return len(self.sessions), pending

    # ------------------------------------------------------------------ sessions
    def assign_client_id(self) -> str:
        """A fresh id for a clean client that sent an empty one (MQTT-3.1.3-6)."""
        while True:
            cid = f"oxiedge-{secrets.token_hex(8)}"
            if cid not in self.sessions:
                return cid

    def open_session(self, client_id: str, clean: bool) -> tuple[Session, bool, bool]:
        """The session for a CONNECT: ``(session, session_present, staged)``.

        clean=1 discards any previous session (MQTT-3.1.2-6); clean=0 resumes it or
        creates a durable one (MQTT-3.1.2-4). The caller has already detached the old
        connection (take-over)."""
        old = self.sessions.get(client_id)
        staged = False
        if old is not None and (clean or old.clean):
            self.discard_session(old)
            staged = old.store is not None
            old = None
        if old is not None:
            return old, True, False  # MQTT-3.2.2-2: session present
        store = None if clean else self.store
        s = Session(client_id, clean, next(self._owners), self.limits, self.stats, store)
        self.sessions[client_id] = s
        if store is not None:
            s.stage_record()
            staged = True
        return s, False, staged

    def discard_session(self, s: Session) -> None:
        """Forget a session and its subscriptions; stage removal of its records."""
        if self.sessions.get(s.client_id) is s:
            del self.sessions[s.client_id]
        for flt in s.subs:
            self.subscriptions.remove(flt, s)
        s.subs.clear()
        self._routes.clear()
        s.stage_delete()

    # ------------------------------------------------------------- subscriptions
    def subscribe(
        self, s: Session, topics: Iterable[tuple[str, int]]
    ) -> tuple[list[int], list[tuple[str, int]], bool]:
        """Apply SUBSCRIBE: ``(return codes, accepted (filter, qos), staged)``."""
        codes: list[int] = []
        accepted: list[tuple[str, int]] = []
        for flt, qos in topics:
            if not valid_topic_filter(flt):
                codes.append(0x80)  # 3.9.3: failure
                continue
            s.subs[flt] = qos  # MQTT-3.8.4-3: replaces an identical filter's QoS
            self.subscriptions.add(flt, s, qos)
            codes.append(qos)
            accepted.append((flt, qos))
        if accepted:
            self._routes.clear()
        staged = bool(accepted) and s.store is not None
        if staged:
            s.stage_record()
        return codes, accepted, staged

    def send_retained(self, s: Session, accepted: list[tuple[str, int]]) -> bool:
        """Deliver retained messages matching newly (re)established subscriptions with the
        RETAIN flag set (MQTT-3.3.1-6, MQTT-3.8.4-3); True if durable copies were staged."""
        staged = False
        for flt, granted in accepted:
            for _topic, r in self.retained.match(flt):
                staged |= s.deliver(r.msg, min(r.qos, granted), True)
        return staged

    def unsubscribe(self, s: Session, filters: Iterable[str]) -> bool:
        changed = False
        for flt in filters:
            if s.subs.pop(flt, None) is not None:
                self.subscriptions.remove(flt, s)
                changed = True
        if changed:
            self._routes.clear()
        if changed and s.store is not None:
            s.stage_record()
            return True
        return False

    # ------------------------------------------------------------------- publish
    def route(
        self,
        topic: str,
        payload: bytes,
        qos: int,
        retain: bool,
        skip: PublishHook | None = None,
        topic_b: bytes | None = None,
        qos0_frame: bytes | None = None,
    ) -> bool:
        """Route one accepted PUBLISH; True if durable work was staged (commit before
        acknowledging). ``skip``: an ``on_publish`` hook not to call (a bridge injecting
        a message must not be handed its own message back). ``topic_b``: the topic's
        UTF-8 bytes if known; ``qos0_frame``: the received packet when it is exactly the
        QoS 0 delivery (QoS 0, RETAIN 0), sent to QoS 0 subscribers as is."""
        self.stats.messages_in += 1
        msg = Message(topic, payload, topic_b)
        if qos0_frame is not None:
            msg.qos0 = qos0_frame
        staged = False
        if retain:
            staged = self._retain(msg, qos)
        route = self._routes.get(topic)
        if route is None:
            route = self._route_of(topic)
        for s, granted in route:
            # MQTT-3.3.1-9: retain flag is 0 for deliveries to existing subscriptions.
            if s.deliver(msg, granted if granted < qos else qos, False):
                staged = True
        if self.on_publish:
            for hook in self.on_publish:
                if hook is not skip and hook(topic, payload, qos, retain):
                    staged = True
        ingest = self.ingest
        if ingest is not None and ingest.routes and ingest.stage_publish(topic, payload):
            staged = True
        return staged

    def _route_of(self, topic: str) -> Route:
        """Walk the trie for ``topic`` and cache the merged result."""
        # MQTT-3.3.5-1: one copy per client at the highest granted QoS of its matches.
        best: dict[Session, int] = {}
        for s, granted in self.subscriptions.match(topic):
            if best.get(s, -1) < granted:
                best[s] = granted
        route = tuple(best.items())
        routes = self._routes
        if len(routes) >= ROUTE_CACHE_MAX:
            routes.clear()
        routes[topic] = route
        return route

    def _retain(self, msg: Message, qos: int) -> bool:
        store = self.store
        if not msg.payload:
            # MQTT-3.3.1-10: an empty retained payload clears the topic's retained message.
            if self.retained.delete(msg.topic) and store is not None:
                store.stage_delete_key(CF, persist.retain_key(msg.topic))
                return True
            return False
        self.retained.set(msg.topic, Retained(msg, qos))  # MQTT-3.3.1-5: replaces
        if store is not None:
            store.stage_put(CF, persist.retain_key(msg.topic), bytes((qos,)) + msg.payload)
            return True
        return False

    # --------------------------------------------------------------------- admin
    def session_rows(self) -> list[dict[str, Any]]:
        return [s.row() for s in sorted(self.sessions.values(), key=lambda s: s.client_id)]

    def retained_rows(self) -> list[dict[str, Any]]:
        return [
            {"topic": topic, "qos": r.qos, "bytes": len(r.msg.payload)}
            for topic, r in sorted(self.retained.items(), key=lambda t: t[0])
        ]


__all__ = ["Broker", "Limits", "Outlet", "PublishHook", "Retained", "Session", "Stats"]
