"""The MQTT publish router: the subscription trie, the route cache, the QoS 2 hold.

Sans-IO. ``Router.route`` takes one accepted PUBLISH and

1. stages the retained change (``retain.py``),
2. delivers to live subscribers and stages every durable copy: one per matching session,
   MQTT-3.3.5-1 merges overlapping subscriptions of one client to the highest granted QoS,
3. hands the message to the bus (``oxiedge/bus.py``) for the destinations outside MQTT
   (``amq.topic``, uplink outboxes, ingest): the one marked section of ``route``,

and returns True if a durable record was staged: the caller must ``await
store.commit()`` before acknowledging anything that depends on it. When no durable
session matches and nothing is retained or ingested, no store call happens at all.

QoS 2 (docs/mqtt.md, "QoS 2 exactly once"): every delivery of a QoS 2 PUBLISH, and every
QoS 2 delivery to a durable session, is *held* in ``self.hold`` instead of being sent.
Whoever commits next takes the hold (``take_hold``) and releases it once its commit
returned; the connection does so for its own read burst, ``MqttService``'s releaser task
for everything else (wills, retained replays, bridges). So nothing of a QoS 2 message
leaves before the round that made it durable, and a publisher's re-send after a crash
finds either nothing (nobody got anything) or its packet id (nobody gets it twice).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice

from oxiedge.mqtt.forward5 import to_bus
from oxiedge.mqtt.message import Message5
from oxiedge.mqtt.properties import NO_PROPERTIES, Properties
from oxiedge.mqtt.retain import RetainedStore
from oxiedge.mqtt.session import Hold, Message, Pending, Session, Stats
from oxiedge.mqtt.shared import HAND_ON_MAX, SHARE_PREFIX, SharedGroup, SharedSubscriptions
from oxiedge.mqtt.topics import TopicTrie, topic_matches
from oxiedge.staged import COMMIT, MQTT, NOTHING, REFUSED, ROUTED, Fanout, Origin, Staged

#: Topics whose merged subscriber list is cached (``Router.routes``). When full the cache
#: is cleared wholesale: a publisher cycling through more topics than this pays one trie
#: walk per publish, as without the cache, and memory stays bounded.
ROUTE_CACHE_MAX = 4096
#: ... and bounded in the bytes of the cached topics' names (long topics must not pin
#: megabytes after their publisher left).
ROUTE_CACHE_MAX_BYTES = 1 << 20

#: One topic's subscribers: ``(session, highest granted QoS of its matching filters)``.
Route = tuple[tuple[Session, int], ...]
#: MQTT 5 Subscription Options, kept in a subscription's value above its QoS bits, and its
#: Subscription Identifier above them (``value >> ID_SHIFT``); a 3.1.1 subscription's value
#: is its QoS alone, so its route is built as before.
NO_LOCAL = 4
RETAIN_AS_PUBLISHED = 8
ID_SHIFT = 4
#: One topic's subscribers with options: ``(session, QoS, keep RETAIN, Subscription
#: Identifiers, then the same three for the session's own publish (QoS -1: No Local on
#: every match))``.
Special = tuple[tuple[Session, int, bool, tuple[int, ...], int, bool, tuple[int, ...]], ...]


def with_ids(msg: Message, ids: tuple[int, ...]) -> Message:
    """``msg`` as one subscriber gets it with its Subscription Identifiers (3.3.2.3.8):
    a copy, encoded (and stored) for that subscriber only."""
    if type(msg) is Message5:
        return Message5(msg.topic, msg.payload, msg.topic_b,
                        msg.props._replace(subscription_identifiers=ids), msg.expires_at)
    return Message5(msg.topic, msg.payload, msg.topic_b,
                    Properties(subscription_identifiers=ids), None)


def filter_levels(topic_filter: str) -> int:
    """The trie levels a subscription to ``topic_filter`` costs."""
    return topic_filter.count("/") + 1


class Router:
    """Subscriptions and the publish path of one broker (see the module docstring)."""

    def __init__(self, retained: RetainedStore, stats: Stats) -> None:
        self.retained = retained
        self.stats = stats
        self.subscriptions: TopicTrie[Session, int] = TopicTrie()
        # Filter levels of all subscriptions: an upper bound on the subscription trie's
        # nodes, which are what subscriptions cost in memory (--mqtt-max-subscription-levels).
        self.levels = 0
        # topic -> merged subscribers. Publishers repeat their topics, so the trie walk and
        # the MQTT-3.3.5-1 merge run once per topic, not once per PUBLISH. Every change of
        # the subscription set (subscribe, unsubscribe, session discarded, recovery) clears
        # it; nothing else can change what a topic matches.
        self.routes: dict[str, Route] = {}
        # topic -> its subscribers whose matching filters have MQTT 5 options (No Local,
        # Retain As Published), beside ``routes``; empty while no subscription has any.
        self.specials: dict[str, Special] = {}
        self._routes_bytes = 0  # sum of the cached topics' lengths
        # $share/GROUP/FILTER subscriptions: one delivery per group (shared.py).
        self.shared = SharedSubscriptions()
        # Permission rules exist (docs/permissions.md): deliveries, live and retained, go
        # only to sessions whose client may read the topic. Checked once per topic and
        # session: the route cache holds the filtered result.
        self.acl_active = False
        # Deliveries waiting for a commit (see the module docstring). ``on_hold`` is called
        # whenever deliveries were added to it (the service's releaser task wakes up).
        self.hold = Hold()
        self.on_hold: Callable[[], None] | None = None
        # The destinations outside MQTT (see ``route``); wired once by ``server.py``.
        self.bus: Fanout | None = None

    # ------------------------------------------------------------- subscriptions
    def add(self, topic_filter: str, s: Session, qos: int) -> None:
        """Subscribe ``s`` (new filter or a new QoS for it); the caller counts levels."""
        if topic_filter.startswith(SHARE_PREFIX):
            self.shared.add(topic_filter, s, qos)
        else:
            self.subscriptions.add(topic_filter, s, qos)
        self.clear_routes()

    def remove(self, topic_filter: str, s: Session) -> None:
        """Remove ``s``'s subscription to ``topic_filter`` and its levels."""
        if topic_filter.startswith(SHARE_PREFIX):
            self.shared.remove(topic_filter, s)
        else:
            self.subscriptions.remove(topic_filter, s)
        self.levels -= filter_levels(topic_filter)
        self.clear_routes()

    def clear_routes(self) -> None:
        """Forget the cached routes (the subscriptions or their read rules changed)."""
        self.routes.clear()
        self.specials.clear()
        self.shared.routes.clear()
        self._routes_bytes = 0

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
        self.held()

    def held(self) -> None:
        """Deliveries were added to ``hold``: wake whoever releases them."""
        if self.on_hold is not None and self.hold:
            self.on_hold()

    # ------------------------------------------------------------------- publish
    def route(
        self,
        topic: str,
        payload: bytes,
        qos: int,
        retain: bool,
        origin: Origin | None = None,
        topic_b: bytes | None = None,
        qos0_frame: bytes | None = None,
        publisher: Session | None = None,
    ) -> bool:
        """Route one accepted PUBLISH; True if durable work was staged (commit before
        acknowledging; a ``staged.Staged``: True is ``COMMIT``). ``origin``: where it
        entered the bus (``None``: an MQTT client, the hot path passes nothing); the bus
        never hands it back to its origin. ``topic_b``: the topic's
        UTF-8 bytes if known; ``qos0_frame``: the received packet when it is exactly the
        QoS 0 delivery (QoS 0, RETAIN 0), sent to QoS 0 subscribers as is. ``publisher``:
        the publishing session, for No Local."""
        self.stats.messages_in += 1
        staged = False
        route = self.routes.get(topic)
        if route is None:
            route = self._route_of(topic)
        sp = self.specials.get(topic) if self.specials else None
        sh = self.shared.match(topic) if self.shared.groups else None
        if route or retain or sp or sh:  # (no subscriber, not retained: no ``Message``)
            msg = Message(topic, payload, topic_b)
            if qos0_frame is not None:
                msg.qos0 = qos0_frame
            if retain:
                staged = self.retained.keep(msg, qos)
            # QoS 2: nothing is sent before the round of this PUBLISH committed (module doc).
            hold = self.hold if qos == 2 else None
            for s, granted in route:
                # MQTT-3.3.1-9: retain flag is 0 for deliveries to existing subscriptions.
                if s.deliver(msg, granted if granted < qos else qos, False, hold):
                    staged = True
            if sp and self._special(sp, msg, qos, retain, hold, publisher):
                staged = True
            if sh and self._shared(sh, msg, qos, retain, hold):
                staged = True
            if hold is not None:
                self.held()
        # ---- the bus: amq.topic, uplink outboxes, ingest (oxiedge/bus.py) ---------------
        # (the one place MQTT hands a publish on; everything above is MQTT's own)
        bus = self.bus
        if bus is not None and bus.fan_out(MQTT if origin is None else origin, topic,
                                           payload, qos, retain) & COMMIT:
            staged = True
        # ---- end of the destinations outside MQTT ---------------------------------------
        return staged

    def route5(
        self,
        topic: str,
        payload: bytes,
        qos: int,
        retain: bool,
        topic_b: bytes,
        props: Properties,
        expires_at: float | None,
        publisher: Session | None = None,
        origin: Origin | None = None,
        frame: bytes | None = None,
    ) -> Staged:
        """``route`` for a PUBLISH from an MQTT 5 client: ``props`` are the properties its
        subscribers get (``forward5.forwarded``), ``expires_at`` its wall-clock deadline.
        Without either it is ``route`` (3.1.1 subscribers share one QoS 0 frame; its own
        frame is an MQTT 5 one, so it is never passed on as theirs). ``origin``: another
        origin of the bus whose publish has properties (``None``: an MQTT 5 client);
        ``frame``: the received packet, for a QoS 0 PUBLISH that MQTT 5 subscribers get
        byte for byte (one without properties: ``RawPublish5.frame``).

        Returns a ``staged.Staged``: ``COMMIT`` if durable work was staged (commit before
        acknowledging), ``ROUTED`` if something took it - a session (its options aside) or
        a destination of the bus - (without it, PUBACK/PUBREC 0x10 "no matching
        subscribers"), ``REFUSED`` if a destination's bound refused it (0x97)."""
        stats = self.stats
        if origin is None:
            stats.messages_in5 += 1
        stats.messages_in += 1
        got = NOTHING
        route = self.routes.get(topic)
        if route is None:
            route = self._route_of(topic)
        sp = self.specials.get(topic) if self.specials else None
        sh = self.shared.match(topic) if self.shared.groups else None
        plain = props is NO_PROPERTIES and expires_at is None
        if route or sp or sh:
            got = ROUTED
        if got or retain:
            if plain:
                msg = Message(topic, payload, topic_b)
                if frame is not None:
                    msg.qos0v5 = frame  # (what MQTT 5 subscribers get: forward5.Peer5)
            else:
                msg = Message5(topic, payload, topic_b, props, expires_at)
            if retain and self.retained.keep(msg, qos):
                got |= COMMIT
            hold = self.hold if qos == 2 else None
            for s, granted in route:
                if s.deliver(msg, granted if granted < qos else qos, False, hold):
                    got |= COMMIT
            if sp and self._special(sp, msg, qos, retain, hold, publisher):
                got |= COMMIT
            if sh and self._shared(sh, msg, qos, retain, hold):
                got |= COMMIT
            if hold is not None:
                self.held()
        bus = self.bus
        if bus is not None:
            fan = bus.fan_out(MQTT if origin is None else origin, topic, payload, qos, retain,
                              None if plain else to_bus(props, expires_at))
            if fan:  # (any bit: something beyond MQTT took it; REFUSED passes on)
                got |= ROUTED | (fan & (COMMIT | REFUSED))
        return got

    @staticmethod
    def _special(sp: Special, msg: Message, qos: int, retain: bool, hold: Hold | None,
                 publisher: Session | None) -> bool:  # fmt: skip
        """Deliver to the subscribers with MQTT 5 options: No Local leaves out the
        publisher's own matches (MQTT-3.8.3-3), Retain As Published keeps RETAIN
        (3.8.3.1)."""
        staged = False
        for s, q, rap, ids, q_own, rap_own, ids_own in sp:
            if s is publisher:
                if q_own < 0:
                    continue
                q, rap, ids = q_own, rap_own, ids_own
            if s.deliver(msg if not ids else with_ids(msg, ids), q if q < qos else qos,
                         retain and rap, hold):  # fmt: skip
                staged = True
        return staged

    def _shared(self, groups: tuple[SharedGroup, ...], msg: Message, qos: int, retain: bool,
                hold: Hold | None, without: Session | None = None) -> bool:
        """One delivery per matching shared group (``SharedGroup.pick``)."""
        staged = False
        for g in groups:
            got = g.pick(msg.topic, qos, self.acl_active, without)
            if got is None:
                self.stats.shared_undelivered += 1
                continue
            s, value = got
            sid = value >> ID_SHIFT
            m = msg
            if sid or (type(msg) is Message5 and msg.props.subscription_identifiers):
                m = with_ids(msg, (sid,) if sid else ())  # (this member's own, or none)
            q = value & 3
            if s.deliver(m, q if q < qos else qos, retain and bool(value & RETAIN_AS_PUBLISHED),
                         hold):  # fmt: skip
                staged = True
        return staged

    def hand_on(self, s: Session) -> bool:
        """``s``'s session ends: its unacknowledged and queued messages go to other
        members of its shared groups (shared.py); True if durable work was staged."""
        groups = self.shared.of(s)
        if not groups:
            return False
        owed: list[Pending] = list(s.inflight.values())
        owed += islice((p for p in s.queue if not p.held), HAND_ON_MAX)
        if len(owed) > HAND_ON_MAX:
            self.stats.shared_lost += len(owed) - HAND_ON_MAX
            del owed[HAND_ON_MAX:]
        staged = False
        hold = self.hold
        for p in owed:
            for g in groups:
                if topic_matches(g.filter, p.msg.topic):
                    if self._shared((g,), p.msg, p.qos, False,
                                    hold if p.qos == 2 else None, s):  # fmt: skip
                        staged = True
                    self.stats.shared_handed_on += 1
                    break
        self.held()
        return staged

    def _route_of(self, topic: str) -> Route:
        """Walk the trie for ``topic`` and cache the merged result."""
        # MQTT-3.3.5-1: one copy per client at the highest granted QoS of its matches.
        best: dict[Session, int] = {}
        options: dict[Session, list[int]] | None = None
        for s, granted in self.subscriptions.match(topic):
            if granted > 3:  # MQTT 5 options: merged below, per subscription
                if options is None:
                    options = {}
                options.setdefault(s, []).append(granted)
            elif best.get(s, -1) < granted:
                best[s] = granted
        routes = self.routes
        if len(routes) >= ROUTE_CACHE_MAX or self._routes_bytes > ROUTE_CACHE_MAX_BYTES:
            self.clear_routes()
        if options is not None:
            self._special_of(topic, best, options)
        if self.acl_active:
            route = tuple((s, g) for s, g in best.items()
                          if s.acl is None or s.acl.may_read(topic))
        else:
            route = tuple(best.items())
        routes[topic] = route
        self._routes_bytes += len(topic)
        return route

    def _special_of(self, topic: str, best: dict[Session, int],
                    options: dict[Session, list[int]]) -> None:  # fmt: skip
        """The ``specials`` entry of ``topic``: each session with an optioned match, its
        plain matches (``best``) merged in."""
        out = []
        for s, values in options.items():
            if self.acl_active and s.acl is not None and not s.acl.may_read(topic):
                best.pop(s, None)
                continue
            plain = best.pop(s, -1)
            q = max(plain, *(v & 3 for v in values))
            own = [v for v in values if not v & NO_LOCAL]
            q_own = max(plain, *(v & 3 for v in own)) if own else plain
            # MQTT-3.3.4-4: every matching subscription's identifier, in one PUBLISH
            ids = tuple(sorted({v >> ID_SHIFT for v in values if v >> ID_SHIFT}))
            ids_own = tuple(sorted({v >> ID_SHIFT for v in own if v >> ID_SHIFT}))
            out.append((s, q, any(v & RETAIN_AS_PUBLISHED for v in values), ids, q_own,
                        any(v & RETAIN_AS_PUBLISHED for v in own), ids_own))
        if out:
            self.specials[topic] = tuple(out)
