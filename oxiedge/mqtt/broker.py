"""The broker core: the owner of the sessions, and what a SUBSCRIBE changes.

Sans-IO like the codec: nothing here awaits. A caller that gets ``True`` back ("a durable
record was staged") must ``await store.commit()`` before acknowledging anything that
depends on it; that is the protocol's job (``protocol.py``), done once per read burst.

Where the rest lives: the publish path (``route``), the route cache, the subscription
trie and the QoS 2 hold are in ``router.py``; retained messages and their bounds in
``retain.py``; what one client id is owed in ``session.py``. ``Broker`` keeps the
sessions, applies SUBSCRIBE / UNSUBSCRIBE (the per-session and broker-wide bounds), paces
retained replays (``replay.py``) and recovers everything at start-up.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Callable, Iterable
from typing import Any

from oxiedge.mqtt import persist
from oxiedge.mqtt.forward5 import expired, forwarded
from oxiedge.mqtt.packets import SUBACK_FAILURE
from oxiedge.mqtt.packets5 import Will5
from oxiedge.mqtt.persist import RawStore
from oxiedge.mqtt.replay import RetainedReplay
from oxiedge.mqtt.retain import Retained, RetainedStore
from oxiedge.mqtt.router import (
    ID_SHIFT,
    ROUTE_CACHE_MAX,
    ROUTE_CACHE_MAX_BYTES,
    Route,
    Router,
    filter_levels,
    with_ids,
)
from oxiedge.mqtt.session import Hold, Limits, Message, Outlet, Session, Stats
from oxiedge.mqtt.shared import SHARE_PREFIX, share_problem, split_share
from oxiedge.mqtt.topics import TopicTrie, topic_filter_problem, topic_limit_problem
from oxiedge.mqtt.wills import DelayedWills
from oxiedge.staged import COMMIT, Fanout

#: Retained messages one ``replay_step`` sends at most before it lets other tasks run.
REPLAY_BATCH = 64


class Broker:
    """All MQTT state of one server. ``store`` is None with ``--no-mqtt-persist``."""

    def __init__(self, store: RawStore | None, limits: Limits, stats: Stats | None = None):
        self.store = store
        self.limits = limits
        self.stats = stats or Stats()
        self.sessions: dict[str, Session] = {}
        self.retained = RetainedStore(store, limits, self.stats)
        self.router = Router(self.retained, self.stats)
        # The publish path and the hold are the router's; bound once, not forwarded per call.
        self.route = self.router.route
        self.take_hold = self.router.take_hold
        self.return_hold = self.router.return_hold
        self._owners = itertools.count(1)
        # client id -> the connection whose CONNECT awaits a commit: of two CONNECTs for
        # one id that overlap that way, the newer wins (MQTT-3.1.4-2).
        self.connecting: dict[str, object] = {}
        # (user, client id) -> the read check of that client (``access.Grants``), for the
        # sessions recovered at start-up: their offline deliveries follow the read rules.
        self.reader_for: Callable[[str, str], Any] | None = None
        # MQTT 5 wills waiting for their Will Delay Interval (``wills.py``, on disk).
        self.wills = DelayedWills(store, self.publish_will5)
        # An offline MQTT 5 session has a deadline of its own (``expire_sessions``).
        self.deadlines = False

    # The router's state under the names the service, the status and the tests know.
    @property
    def subscriptions(self) -> TopicTrie[Session, int]:
        return self.router.subscriptions

    @property
    def subscription_levels(self) -> int:
        return self.router.levels

    @property
    def retained_bytes(self) -> int:
        return self.retained.bytes

    @property
    def _routes(self) -> dict[str, Route]:
        return self.router.routes

    @property
    def hold(self) -> Hold:
        return self.router.hold

    @property
    def on_hold(self) -> Callable[[], None] | None:
        return self.router.on_hold

    @on_hold.setter
    def on_hold(self, fn: Callable[[], None] | None) -> None:
        self.router.on_hold = fn

    @property
    def bus(self) -> Fanout | None:
        """Where ``route`` hands a publish on beyond MQTT (``oxiedge/bus.py``)."""
        return self.router.bus

    @bus.setter
    def bus(self, bus: Fanout | None) -> None:
        self.router.bus = bus

    @property
    def acl_active(self) -> bool:
        return self.router.acl_active

    @acl_active.setter
    def acl_active(self, active: bool) -> None:
        self.router.acl_active = active

    def publish_will5(self, will: Will5, now: float) -> bool:
        """Publish an MQTT 5 will at ``now`` (wall clock: its Message Expiry Interval
        starts then) with its properties; True if durable work was staged."""
        self.stats.wills += 1
        fwd, expires_at = forwarded(will.properties._replace(will_delay_interval=None), now)
        return bool(self.router.route5(will.topic, will.payload, will.qos, will.retain,
                                       will.topic.encode(), fwd, expires_at) & COMMIT)

    # ------------------------------------------------------------------ recovery
    def recover(self, wall: float = 0.0) -> tuple[int, int]:
        """Load durable state (stages deletion of queue surplus); returns
        ``(sessions, pending messages)`` for the start-up log line. ``wall``: now on the
        wall clock (MQTT 5 session deadlines)."""
        store = self.store
        if store is None:
            return 0, 0
        max_owner = 0
        pending = 0
        for rs in persist.load_sessions(store):
            s = Session(rs.client_id, False, rs.owner, self.limits, self.stats, store)
            s.user = rs.user
            if rs.expiry is not None:  # MQTT 5: its own interval; connected at the crash:
                interval, deadline = rs.expiry  # its expiry starts now
                s.expiry = interval
                s.expires_at = deadline if deadline is not None else wall + interval
            if rs.user is not None and self.reader_for is not None:
                s.acl = self.reader_for(rs.user, rs.client_id)
            max_owner = max(max_owner, rs.owner)
            for flt, qos in rs.subs.items():
                s.subs[flt] = qos
                self.router.add(flt, s, qos)  # (a $share/... string: its group, shared.py)
                self.router.levels += filter_levels(flt)
            # Counters, head and tail only: the messages stay on disk until delivered.
            s.queue.recover()
            while len(s.queue) > s.max_queued:  # a lowered --mqtt-queue-limit
                s.drop_oldest()
            s.trim_queue_bytes()  # a lowered --mqtt-queue-bytes: drop (and delete) the oldest
            for seq in rs.rel:
                s.rel[persist.packet_id_of(seq)] = seq
            s.rx2.recover(rs.rx2)
            s.next_seq = max(s.queue.tail, rs.next_seq)
            pending += len(s.queue)
            self.sessions[s.client_id] = s
        self.router.clear_routes()
        self._owners = itertools.count(max_owner + 1)
        self.retained.load()
        self.wills.load()  # (those due by now go at the expiry task's first turn)
        return len(self.sessions), pending

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

    def open_session(self, client_id: str, clean: bool, user: str | None = None
                     ) -> tuple[Session, bool, bool]:
        """The session for a CONNECT: ``(session, session_present, staged)``.

        clean=1 discards any previous session (MQTT-3.1.2-6); clean=0 resumes it or
        creates a durable one (MQTT-3.1.2-4). The caller has already detached the old
        connection (take-over). ``user`` ("" anonymous) goes into the session record."""
        old = self.sessions.get(client_id)
        staged = False
        if old is not None and (clean or old.clean):
            staged = self.discard_session(old) or old.store is not None
            old = None
        if old is not None:
            if user is not None and old.user != user:
                old.user = user  # taken over by another user: the record says so
                if old.store is not None:
                    old.stage_record()
                    return old, True, True
            return old, True, False  # MQTT-3.2.2-2: session present
        store = None if clean else self.store
        s = Session(client_id, clean, next(self._owners), self.limits, self.stats, store)
        s.user = user
        self.sessions[client_id] = s
        if store is not None:
            s.stage_record()
            staged = True
        return s, False, staged

    def discard_session(self, s: Session) -> bool:
        """Forget a session and its subscriptions; stage removal of its records. True if
        messages it owed went to another member of a shared group and staged durable work
        (shared.py; the records' removal is staged either way)."""
        if self.sessions.get(s.client_id) is s:
            del self.sessions[s.client_id]
        staged = self.router.hand_on(s) if self.router.shared.groups else False
        for flt in s.subs:
            self.router.remove(flt, s)
        s.subs.clear()
        s.replay = None
        self.router.clear_routes()
        s.stage_delete()
        return staged

    def expire_sessions(self, now: float, wall: float = 0.0) -> list[Session]:
        """Discard the persistent sessions offline for ``limits.session_expiry`` seconds
        at ``now`` (the clock ``offline_since`` is on) and stage the removal of their
        records; returns them (the caller commits, counts and logs).

        A session no sweep has seen offline yet (recovered at start-up) starts its clock
        now: a restart renews every offline session's lease, as RabbitMQ renews queue
        leases, so a wrong wall clock at boot (a Pi without a real-time clock) can never
        expire a session early. A session whose CONNECT awaits its commit is left alone.

        An MQTT 5 session ends at its own deadline on the wall clock (``wall``), which ran
        while the broker was down (its client asked for that interval, 3.1.2.11.2)."""
        expiry = self.limits.session_expiry
        expired: list[Session] = []
        self.deadlines = False
        for s in self.sessions.values():
            if s.clean or s.conn is not None or s.client_id in self.connecting:
                continue
            if s.expiry is not None:
                if s.expires_at is not None and wall >= s.expires_at:
                    expired.append(s)
                self.deadlines = True
                continue
            if expiry is None:
                continue
            since = s.offline_since
            if since is None:
                s.offline_since = now
            elif now - since >= expiry:
                expired.append(s)
        for s in expired:
            self.discard_session(s)
        return expired

    # ---------------------------------------------------------------- permissions
    def set_acl(self, s: Session, acl: Any) -> None:
        """The client now attached to ``s`` reads with ``acl`` (``access.Grants``)."""
        s.queue.codec.reader = None  # (``drop_unreadable`` sets it when the rules apply)
        if s.acl is not acl:
            s.acl = acl
            if self.router.acl_active:
                self.router.clear_routes()

    def drop_unreadable(self, s: Session) -> int:
        """A client attached to a session holding messages routed before its rules applied
        (a persistent session taken over with another user name, a session recovered at
        start-up, rules changed while it was offline): queued and in-flight messages on
        topics it may not read are dropped and their records deleted, as Mosquitto checks
        each message when it sends it. Returns how many (kick the committer if any)."""
        acl = s.acl
        if not self.router.acl_active or acl is None or not (s.queue or s.inflight):
            return 0
        # A held delivery belongs to a commit round still open: it stays, its release
        # path expects it (routed this very burst, under the current rules). The part of
        # the queue on disk is checked when it is read back (``PendingCodec.reader``).
        dropped = len(s.queue.remove_where(
            lambda p: not p.held and not acl.may_read(p.msg.topic)))
        s.queue.codec.reader = acl
        for pid, p in list(s.inflight.items()):
            if not acl.may_read(p.msg.topic):
                del s.inflight[pid]
                s.queue.ack(p.seq)
                dropped += 1
        return dropped

    def acl_changed(self, active: bool) -> None:
        """The permission rules changed: cached routes were filtered by the old ones."""
        self.router.acl_active = active
        self.router.clear_routes()

    # ------------------------------------------------------------- subscriptions
    def filter_problem(self, topic_filter: str) -> str | None:
        """Why ``topic_filter`` cannot be subscribed (syntax or the topic bounds), or None.
        A ``$share/GROUP/FILTER`` is checked as a share and its FILTER as a filter."""
        problem = share_problem(topic_filter)
        if problem is not None:
            return problem
        parts = split_share(topic_filter)
        if parts is not None:
            topic_filter = parts[1]
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
        limits, stats, subs, router = self.limits, self.stats, s.subs, self.router
        changed = False
        for flt, qos in topics:
            old = subs.get(flt)
            if old is None and len(subs) >= limits.max_subscriptions:
                stats.subscriptions_refused += 1
                codes.append(SUBACK_FAILURE)  # 3.9.3: failure
                continue
            ok = verdict.get(flt)
            if ok is None:
                ok = verdict[flt] = self.filter_problem(flt) is None
            if not ok:
                codes.append(SUBACK_FAILURE)
                continue
            if old is None:
                levels = filter_levels(flt)
                if router.levels + levels > limits.max_subscription_levels:
                    stats.subscriptions_refused += 1  # the subscription trie is full
                    codes.append(SUBACK_FAILURE)
                    continue
                router.levels += levels
            if old != qos:
                subs[flt] = qos  # MQTT-3.8.4-3: replaces an identical filter's QoS
                router.add(flt, s, qos)
                changed = True
            codes.append(qos & 3)  # (MQTT 5 options above the QoS bits: router.py)
            resulting.pop(flt, None)
            resulting[flt] = qos
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
            if not flt.startswith(SHARE_PREFIX):  # not for a shared subscription (4.8.2)
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
        router = self.router
        hold = router.hold if s.store is not None else None
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
            if conn.out_bytes >= out_limit or s.queue.waiting():
                # The writer calls again once the buffer drained / acks came back. (Held
                # QoS 2 copies wait for their commit, not for the window: go on.)
                break
            topic = replay.topics[replay.index]
            replay.index += 1
            r = self.retained.get(topic)
            if r is not None and expired(r.msg, time.time()):
                # Past its Message Expiry Interval: never delivered (no packet id spent on
                # it), and gone from disk (MQTT-3.3.2-5).
                self.stats.expired += 1
                staged |= self.retained.keep(Message(topic, b"", r.msg.topic_b), 0)
                continue
            if r is not None and router.acl_active and s.acl is not None \
                    and not s.acl.may_read(topic):
                continue  # a subscriber never receives a retained message it may not read
            if r is not None:
                qos = min(r.qos, replay.granted & 3)
                sid = s.subs.get(replay.filter, 0) >> ID_SHIFT  # MQTT 5 (3.3.2.3.8)
                staged |= s.deliver(r.msg if not sid else with_ids(r.msg, (sid,)), qos, True,
                                    hold if qos == 2 else None)  # fmt: skip
                sent += 1
        if hold is not None:
            router.held()
        return staged

    def unsubscribe(self, s: Session, filters: Iterable[str]) -> bool:
        changed = False
        for flt in filters:
            if s.subs.pop(flt, None) is not None:
                self.router.remove(flt, s)
                if s.replay is not None:
                    s.replay.discard(flt)
                changed = True
        if changed and s.store is not None:
            s.stage_record()
            return True
        return False

    # --------------------------------------------------------------------- admin
    def session_rows(self, now: float | None = None, wall: float | None = None
                     ) -> list[dict[str, Any]]:  # fmt: skip
        """``oxiedge sessions``; ``now`` on the clock of ``offline_since`` (expiry), ``wall``
        on the wall clock (MQTT 5 session deadlines)."""
        return [s.row(now, wall)
                for s in sorted(self.sessions.values(), key=lambda s: s.client_id)]

    def retained_rows(self, include_sys: bool = False) -> list[dict[str, Any]]:
        return self.retained.rows(include_sys)


__all__ = ["REPLAY_BATCH", "ROUTE_CACHE_MAX", "ROUTE_CACHE_MAX_BYTES", "Broker", "Hold",
           "Limits", "Outlet", "Retained", "Session", "Stats"]
