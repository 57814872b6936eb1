"""The broker core: sessions, subscriptions, retained messages and the publish router.

Sans-IO like the codec: nothing here awaits. A caller that gets ``True`` back ("a durable
record was staged") must ``await store.commit()`` before acknowledging anything that
depends on it; that is the connection's job (``connection.py``), done once per read burst.

Publish path (``route``): deliver to live subscribers, stage every durable copy (one per
durable matching session, MQTT-3.3.5-1 merges overlapping subscriptions of one client to
the highest granted QoS), stage the retained change, feed the bridge callbacks. When no
durable session matches and nothing is retained/ingested, no store call happens at all.

QoS 2 (docs/mqtt.md, "QoS 2 exactly once"): every delivery of a QoS 2 PUBLISH, and every
QoS 2 delivery to a durable session, is *held* in ``self.hold`` instead of being sent.
Whoever commits next takes the hold (``take_hold``) and releases it once its commit
returned; the connection does so for its own read burst, ``MqttService``'s releaser task
for everything else (wills, retained replays, bridges). So nothing of a QoS 2 message
leaves before the round that made it durable, and a publisher's re-send after a crash
finds either nothing (nobody got anything) or its packet id (nobody gets it twice).
"""

from __future__ import annotations

import itertools
import secrets
from collections import deque
from collections.abc import Callable, Iterable, Sized
from typing import Any, Protocol

from oxiedge.mqtt import persist
from oxiedge.mqtt.persist import CF, RawStore
from oxiedge.mqtt.replay import RetainedReplay
from oxiedge.mqtt.session import Hold, Limits, Message, Outlet, Pending, Session, Stats
from oxiedge.mqtt.topics import (
    RetainedTrie,
    TopicTrie,
    topic_filter_problem,
    topic_limit_problem,
)

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
#: ... and bounded in the bytes of the cached topics' names (long topics must not pin
#: megabytes after their publisher left).
ROUTE_CACHE_MAX_BYTES = 1 << 20

#: Retained messages one ``replay_step`` sends at most before it lets other tasks run.
REPLAY_BATCH = 64

#: One topic's subscribers: ``(session, highest granted QoS of its matching filters)``.
Route = tuple[tuple[Session, int], ...]


def _levels(topic_filter: str) -> int:
    return topic_filter.count("/") + 1


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
        # Deliveries waiting for a commit (see the module docstring). ``on_hold`` is called
        # whenever deliveries were added to it (the service's releaser task wakes up).
        self.hold = Hold()
        self.on_hold: Callable[[], None] | None = None
        # client id -> the connection whose CONNECT awaits a commit: of two CONNECTs for
        # one id that overlap that way, the newer wins (MQTT-3.1.4-2).
        self.connecting: dict[str, object] = {}
        # topic -> merged subscribers. Publishers repeat their topics, so the trie walk and
        # the MQTT-3.3.5-1 merge run once per topic, not once per PUBLISH. Every change of
        # the subscription set (subscribe, unsubscribe, session discarded, recovery) clears
        # it; nothing else can change what a topic matches.
        self._routes: dict[str, Route] = {}
        self._routes_bytes = 0  # sum of the cached topics' lengths
        self.retained_bytes = 0  # topic + payload bytes of ``retained`` (--mqtt-retained-bytes)
        # Filter levels of all subscriptions: an upper bound on the subscription trie's
        # nodes, which are what subscriptions cost in memory (--mqtt-max-subscription-levels).
        self.subscription_levels = 0
        # Permission rules exist (docs/permissions.md): deliveries, live and retained, go
        # only to sessions whose client may read the topic. Checked once per topic and
        # session: the route cache holds the filtered result.
        self.acl_active = False

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
                self.subscription_levels += _levels(flt)
            for seq, qos, retain, topic, payload in rs.messages:
                # Possibly sent before the restart: re-deliveries carry DUP (MQTT-3.3.1-1).
                m = Message(topic, payload)
                s.queue.append(Pending(seq, m, qos, retain, True))
                s.queue_bytes += len(payload) + len(m.topic_b)
            before = s.dropped
            s.trim_queue_bytes()  # a lowered --mqtt-queue-bytes: drop (and delete) the oldest
            pending -= s.dropped - before
            for seq in rs.rel:
                s.rel[persist.packet_id_of(seq)] = seq
            s.rx2 = set(rs.rx2)
            s.next_seq = rs.next_seq
            s.dropped += rs.surplus
            self.stats.dropped += rs.surplus
            pending += len(rs.messages)
            self.sessions[s.client_id] = s
        self._clear_routes()
        self._owners = itertools.count(max_owner + 1)
        for topic, qos, payload in persist.load_retained(store):
            # Kept even over the retained bounds (they were accepted under other settings);
            # the bounds apply to new retained topics.
            m = Message(topic, payload)
            self.retained.set(topic, Retained(m, qos))
            self.retained_bytes += len(m.topic_b) + len(payload)
        return len(self.sessions), pending

    # ------------------------------------------------------------------ holding
    def take_hold(self) -> Hold | None:
        """The deliveries held so far (None if there are none), to be released after a
        ``store.commit()`` called from now on has returned."""
        h = self.hold
        if not h:
            return None
        self.hold = Hold()
        return h

    def return_hold(self, h: Hold) -> None:
        """A taker that could not see its commit through (cancelled) gives the hold back;
        the next commit releases it, ahead of what was held since."""
        h.merge(self.hold)
        self.hold = h
        self._held()

    def _held(self) -> None:
        if self.on_hold is not None and self.hold:
            self.on_hold()

    # ------------------------------------------------------------------ sessions
    def assign_client_id(self) -> str:
        """A fresh id for a clean client that sent an empty one (MQTT-3.1.3-6)."""
        while True:
            cid = f"oxiedge-{secrets.token_hex(8)}"
            if cid not in self.sessions:
                return cid

    def session_room(self, client_id: str) -> bool:
        """False if a CONNECT for ``client_id`` would create a session beyond
        ``max_sessions`` (resuming or replacing an existing one is always possible)."""
        return client_id in self.sessions or len(self.sessions) < self.limits.max_sessions

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
            self.subscription_levels -= _levels(flt)
        s.subs.clear()
        s.replay = None
        self._clear_routes()
        s.stage_delete()

    # ---------------------------------------------------------------- permissions
    def set_acl(self, s: Session, acl: Any) -> None:
        """The client now attached to ``s`` reads with ``acl`` (``access.Grants``)."""
        if s.acl is not acl:
            s.acl = acl
            if self.acl_active:
                self._clear_routes()

    def drop_unreadable(self, s: Session) -> int:
        """A client attached to a session holding messages routed before its rules applied
        (a persistent session taken over with another user name, a session recovered at
        start-up, rules changed while it was offline): queued and in-flight messages on
        topics it may not read are dropped and their records deleted, as Mosquitto checks
        each message when it sends it. Returns how many (kick the committer if any)."""
        acl = s.acl
        if not self.acl_active or acl is None or not (s.queue or s.inflight):
            return 0
        dropped: list[Pending] = []
        keep: deque[Pending] = deque()
        for p in s.queue:
            # A held delivery belongs to a commit round still open: it stays, its release
            # path expects it (routed this very burst, under the current rules).
            if p.held or acl.may_read(p.msg.topic):
                keep.append(p)
            else:
                dropped.append(p)
                s.queue_bytes -= len(p.msg.payload) + len(p.msg.topic_b)
        if dropped:
            s.queue = keep
        for pid, p in list(s.inflight.items()):
            if not acl.may_read(p.msg.topic):
                del s.inflight[pid]
                dropped.append(p)
        if s.store is not None:
            for p in dropped:
                s.store.stage_delete_key(CF, persist.msg_key(s.owner_b, p.seq))
        return len(dropped)

    def acl_changed(self, active: bool) -> None:
        """The permission rules changed: cached routes were filtered by the old ones."""
        self.acl_active = active
        self._clear_routes()

    # ------------------------------------------------------------- subscriptions
    def filter_problem(self, topic_filter: str) -> str | None:
        """Why ``topic_filter`` cannot be subscribed (syntax or the topic bounds), or None."""
        problem = topic_filter_problem(topic_filter)
        if problem is None:
            lim = self.limits
            problem = topic_limit_problem(topic_filter, lim.max_topic_levels,
                                          lim.max_topic_length)  # fmt: skip
            if problem is not None:
                self.stats.topics_refused += 1
        return problem

    def subscribe(
        self, s: Session, topics: Iterable[tuple[str, int]]
    ) -> tuple[list[int], list[tuple[str, int]], bool]:
        """Apply SUBSCRIBE: ``(return codes, resulting (filter, qos), staged)``.

        One return code per filter as sent (MQTT-3.8.4-5), but identical filters, in this
        packet or an earlier one, replace each other (MQTT-3.8.4-3): the result lists each
        filter once, with the QoS of its last occurrence, and the session record is only
        staged when the subscription set actually changed."""
        codes: list[int] = []
        resulting: dict[str, int] = {}
        verdict: dict[str, bool] = {}  # each distinct filter is validated once per packet
        limits, stats, subs = self.limits, self.stats, s.subs
        changed = False
        for flt, qos in topics:
            old = subs.get(flt)
            if old is None and len(subs) >= limits.max_subscriptions:
                stats.subscriptions_refused += 1
                codes.append(0x80)  # 3.9.3: failure
                continue
            ok = verdict.get(flt)
            if ok is None:
                ok = verdict[flt] = self.filter_problem(flt) is None
            if not ok:
                codes.append(0x80)
                continue
            if old is None:
                levels = _levels(flt)
                if self.subscription_levels + levels > limits.max_subscription_levels:
                    stats.subscriptions_refused += 1  # the subscription trie is full
                    codes.append(0x80)
                    continue
                self.subscription_levels += levels
            if old != qos:
                subs[flt] = qos  # MQTT-3.8.4-3: replaces an identical filter's QoS
                self.subscriptions.add(flt, s, qos)
                changed = True
            codes.append(qos)
            resulting.pop(flt, None)
            resulting[flt] = qos
        if changed:
            self._clear_routes()
        staged = changed and s.store is not None
        if staged:
            s.stage_record()
        return codes, list(resulting.items()), staged

    def queue_retained(self, s: Session, resulting: Iterable[tuple[str, int]]) -> None:
        """Owe ``s`` the retained messages of these new (or renewed) subscriptions
        (MQTT-3.3.1-6, MQTT-3.8.4-3); ``replay_step`` sends them."""
        if not len(self.retained):
            return
        replay = s.replay
        if replay is None:
            replay = s.replay = RetainedReplay()
        for flt, granted in resulting:
            replay.add(flt, granted)

    def replay_step(self, s: Session, budget: int = REPLAY_BATCH) -> bool:
        """Send up to ``budget`` owed retained messages (RETAIN set, MQTT-3.3.1-8) while
        the output buffer is under its bound and no QoS 1/2 message waits for the
        in-flight window; True if durable copies were staged (kick the committer)."""
        replay, conn = s.replay, s.conn
        if replay is None or conn is None:
            return False
        out_limit = self.limits.out_limit
        staged = False
        # A QoS 2 delivery to a durable session waits for its record (module docstring).
        hold = self.hold if s.store is not None else None
        sent = 0
        while sent < budget:
            if replay.filter is None:
                if not replay.pending:
                    s.replay = None
                    break
                flt = next(iter(replay.pending))
                granted = replay.pending.pop(flt)
                if flt not in s.subs:
                    continue  # unsubscribed meanwhile
                replay.filter, replay.granted, replay.index = flt, granted, 0
                # Topics only: a message replaced or cleared meanwhile is looked up afresh.
                replay.topics = [topic for topic, _r in self.retained.match(flt)]
            if replay.index >= len(replay.topics):
                replay.filter = None
                replay.topics = []
                continue
            if conn.out_bytes >= out_limit or (s.queue and not s.queue[-1].held):
                # The writer calls again once the buffer drained / acks came back. (Held
                # QoS 2 copies wait for their commit, not for the window: go on.)
                break
            topic = replay.topics[replay.index]
            replay.index += 1
            r = self.retained.get(topic)
            if r is not None and self.acl_active and s.acl is not None \
                    and not s.acl.may_read(topic):
                continue  # a subscriber never receives a retained message it may not read
            if r is not None:
                qos = min(r.qos, replay.granted)
                staged |= s.deliver(r.msg, qos, True, hold if qos == 2 else None)
                sent += 1
        if hold is not None:
            self._held()
        return staged

    def unsubscribe(self, s: Session, filters: Iterable[str]) -> bool:
        changed = False
        for flt in filters:
            if s.subs.pop(flt, None) is not None:
                self.subscriptions.remove(flt, s)
                self.subscription_levels -= _levels(flt)
                if s.replay is not None:
                    s.replay.discard(flt)
                changed = True
        if changed:
            self._clear_routes()
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
        # QoS 2: nothing is sent before the round of this PUBLISH committed (module doc).
        hold = self.hold if qos == 2 else None
        for s, granted in route:
            # MQTT-3.3.1-9: retain flag is 0 for deliveries to existing subscriptions.
            if s.deliver(msg, granted if granted < qos else qos, False, hold):
                staged = True
        if hold is not None:
            self._held()
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
        if self.acl_active:
            route = tuple((s, g) for s, g in best.items()
                          if s.acl is None or s.acl.may_read(topic))
        else:
            route = tuple(best.items())
        routes = self._routes
        if len(routes) >= ROUTE_CACHE_MAX or self._routes_bytes > ROUTE_CACHE_MAX_BYTES:
            self._clear_routes()
        routes[topic] = route
        self._routes_bytes += len(topic)
        return route

    def _clear_routes(self) -> None:
        self._routes.clear()
        self._routes_bytes = 0

    def _retain(self, msg: Message, qos: int) -> bool:
        store = self.store
        old = self.retained.get(msg.topic)
        old_size = 0 if old is None else len(old.msg.topic_b) + len(old.msg.payload)
        size = len(msg.topic_b) + len(msg.payload)
        limits = self.limits
        refused = bool(msg.payload) and (
            (old is None and len(self.retained) >= limits.retained_max)
            or self.retained_bytes - old_size + size > limits.retained_bytes
        )
        if refused:
            # Over --mqtt-retained-max/-bytes: the message is still delivered, not kept.
            # An older retained message of the topic goes (it is not the latest any more).
            self.stats.retained_refused += 1
        if not msg.payload or refused:
            # MQTT-3.3.1-10: an empty retained payload clears the topic's retained message.
            if self.retained.delete(msg.topic):
                self.retained_bytes -= old_size
                if store is not None:
                    store.stage_delete_key(CF, persist.retain_key(msg.topic))
                    return True
            return False
        self.retained.set(msg.topic, Retained(msg, qos))  # MQTT-3.3.1-5: replaces
        self.retained_bytes += size - old_size
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


__all__ = ["Broker", "Hold", "Limits", "Outlet", "PublishHook", "Retained", "Session", "Stats"]
